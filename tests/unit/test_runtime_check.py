"""fastmace_oeq_ext.check(): every mismatch has its own reason (no torch or OEq needed)."""
import dataclasses
import hashlib
import json

import pytest

import fastmace_oeq_ext as rt
from fastmace_oeq_ext.manifest import Input, Manifest, ManifestError
from support.artifacts import as_schema_3

# A made-up build: the runtime compares the installed versions with its manifest's, never with any release's, so no
# pinned version is needed (a newer torch and OEq than the build's are made up too).
TORCH, NEWER_TORCH, OEQ, NEWER_OEQ = "9.2.3", "9.3.0", "4.5.6", "4.5.7"
GOOD_ENV = {"torch_version": f"{TORCH}+cu130", "torch_cuda": "13.0", "cxx11_abi": 1, "oeq_version": OEQ,
            "python_tag": "cp311", "system": "Linux", "machine": "x86_64"}


def make_manifest(lib_sha256: str, **change) -> Manifest:
    pin = Input("x", "1", "x-1.whl", "0" * 64)
    m = Manifest(package="fastmace-oeq-ext", extension_version=f"{OEQ}.post9", variant="pypi", openequivariance=OEQ,
                 torch=f"{TORCH}+cu130", torch_index="https://download.pytorch.org/whl/cu130",
                 oeq_sdist=Input("openequivariance", OEQ, f"openequivariance-{OEQ}.tar.gz", "1" * 64), cuda="13.0",
                 torch_git_version="abc", torch_wheel=Input("torch", TORCH, f"torch-{TORCH}.whl", "2" * 64),
                 python="cp311", python_built_with="3.11.99", platform="manylinux_2_28_x86_64",
                 library="libtorch_tp_jit.so", sha256=lib_sha256, glibc_max_symbol="GLIBC_2.14", cuda_wheels=(pin,),
                 pybind11_wheel=Input("pybind11", "8.7.6", "pybind11-8.7.6.whl", "3" * 64), compiler="GCC 98.7.6",
                 flags=("-DTORCH_EXTENSION_NAME=libtorch_tp_jit", "-std=c++20", "-O3", "-D_GLIBCXX_USE_CXX11_ABI=1"),
                 matrix=f"torch-{TORCH}")
    return dataclasses.replace(m, **change)


@pytest.fixture
def manifest(tmp_path):
    lib = tmp_path / "libtorch_tp_jit.so"
    lib.write_bytes(b"\x7fELF pretend library")
    path = tmp_path / "manifest.json"
    path.write_text(make_manifest(hashlib.sha256(lib.read_bytes()).hexdigest()).to_json())
    return path


def test_exact_match_is_usable(manifest):
    d = rt.check(manifest, GOOD_ENV)
    assert d.usable and d.library == str(manifest.parent / "libtorch_tp_jit.so")
    # PyPI's distribution version is the plain release while version.py says +cu130: the same build.
    assert rt.check(manifest, {**GOOD_ENV, "torch_version": TORCH}).usable


@pytest.mark.parametrize("change, words", [
    ({"torch_version": f"{NEWER_TORCH}+cu130"}, f"torch {NEWER_TORCH}+cu130 installed"),
    ({"torch_version": f"{TORCH}+cu126", "torch_cuda": "12.6"}, "CUDA 12.6"),
    ({"torch_version": f"{TORCH}+cu126"}, "cu126 build"),
    ({"torch_version": f"{TORCH}+cpu", "torch_cuda": None}, "CUDA None"),
    ({"cxx11_abi": 0}, "ABI=0"),
    ({"oeq_version": "0.6.9"}, "openequivariance 0.6.9"),
    ({"oeq_version": None}, "openequivariance is not installed"),
    ({"python_tag": "cp312"}, "Python cp312 running"),
    ({"system": "Darwin", "machine": "arm64"}, "platform Darwin arm64"),
    ({"machine": "aarch64"}, "platform Linux aarch64"),
])
def test_each_mismatch_has_its_reason(manifest, change, words):
    d = rt.check(manifest, {**GOOD_ENV, **change})
    assert not d.usable and words in d.reason and d.library is None


def test_missing_library(manifest):
    (manifest.parent / "libtorch_tp_jit.so").unlink()
    d = rt.check(manifest, GOOD_ENV)
    assert not d.usable and d.reason.startswith("library missing")


def test_wrong_sha256(manifest):
    (manifest.parent / "libtorch_tp_jit.so").write_bytes(b"something else")
    d = rt.check(manifest, GOOD_ENV)
    assert not d.usable and "differs from the manifest" in d.reason


def test_missing_and_corrupt_manifest(tmp_path):
    d = rt.check(tmp_path / "manifest.json", GOOD_ENV)
    assert not d.usable and d.reason.startswith("manifest missing")
    (tmp_path / "manifest.json").write_text("{not json")
    d = rt.check(tmp_path / "manifest.json", GOOD_ENV)
    assert not d.usable and d.reason.startswith("manifest unreadable")
    (tmp_path / "manifest.json").write_text("{}")
    assert rt.check(tmp_path / "manifest.json", GOOD_ENV).reason.startswith("manifest unreadable")


def test_prebuilt_mode_values(monkeypatch):
    for val, mode in (("", "auto"), ("0", "never"), ("1", "require")):
        monkeypatch.setenv("FASTMACE_OEQ_PREBUILT", val)
        assert rt.prebuilt_mode() == mode
    monkeypatch.setenv("FASTMACE_OEQ_PREBUILT", "yes")
    with pytest.raises(ValueError, match="FASTMACE_OEQ_PREBUILT"):
        rt.prebuilt_mode()


def test_manifest_round_trips_and_every_malformed_field_is_a_reason(manifest):
    m = Manifest.from_json(manifest.read_text())
    assert Manifest.from_json(m.to_json()) == m
    good = json.loads(manifest.read_text())
    for field, bad in [("library", {}), ("library", 7), ("sha256", None), ("cuda_wheels", {}),
                       ("cuda_wheels", [{"name": "x"}]), ("flags", [1]), ("schema", 1), ("schema", 5),
                       ("torch_wheel", "torch.whl"), ("package", ""), ("python", "cp312"), ("pybind11", "8.7.5"),
                       ("library_sha256", "0" * 64), ("torch_local", "cu130"), ("torch", f"{NEWER_TORCH}+cu130"),
                       ("torch", f"{TORCH}+cu126"), ("torch_index", "https://download.pytorch.org/whl/cu126"),
                       ("flags", ["-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1"]),
                       ("flags", ["-DTORCH_EXTENSION_NAME=libtorch_tp_jit", "-D_GLIBCXX_USE_CXX11_ABI=1"]),
                       ("flags", ["-DTORCH_EXTENSION_NAME=libtorch_tp_jit", "-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=2"]),
                       ("flags", ["-DTORCH_EXTENSION_NAME=other", "-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1"])]:
        manifest.write_text(json.dumps({**good, field: bad}))
        d = rt.check(manifest, GOOD_ENV)  # never raises
        assert not d.usable and d.reason.startswith("manifest unreadable") and field.split("[")[0] in d.reason, d
        with pytest.raises(ManifestError):
            Manifest.from_json(manifest.read_text())
    manifest.write_text(json.dumps({k: v for k, v in good.items() if k != "package"}))
    assert "'package' missing" in rt.check(manifest, GOOD_ENV).reason


def test_schema_4_tells_each_fact_once(manifest):
    """Every key is a field of its own, or `pybind11` (a post1 key FastMACE reads) written from pybind11_wheel;
    what follows from another field is derived, not stored."""
    from fastmace_oeq_ext import manifest as mf
    data = json.loads(manifest.read_text())
    assert set(data) == {"schema", "pybind11", *(f.name for f in dataclasses.fields(Manifest))}
    assert data["schema"] == 4 and set(mf.CONSUMER_KEYS) <= set(data)
    assert not set(data) & (set(mf.DERIVED) - {"pybind11"}) and not set(data) & set(mf.SCHEMA3_TWINS)
    m = Manifest.from_json(manifest.read_text())
    assert (m.oeq_version, m.torch_version, m.torch_local, m.pybind11) == (OEQ, TORCH, "cu130", "8.7.6")
    assert (m.extension_name, m.cxx_std, m.cxx11_abi) == ("libtorch_tp_jit", "c++20", 1)
    assert m.compiler_record() == ("GCC 98.7.6\nflags: -DTORCH_EXTENSION_NAME=libtorch_tp_jit -std=c++20 -O3 "
                                   "-D_GLIBCXX_USE_CXX11_ABI=1\n")


def test_schema_3_wheels_are_read_and_their_twins_must_agree(manifest):
    m = Manifest.from_json(manifest.read_text())
    old = as_schema_3(m.to_json())
    assert len(old) == len(json.loads(m.to_json())) + 10
    manifest.write_text(json.dumps(old))
    assert Manifest.from_json(manifest.read_text()) == m and rt.check(manifest, GOOD_ENV).usable
    for key, bad in (("version", f"{OEQ}.post8"), ("platform_tag", "manylinux_2_17_x86_64"), ("python_tag", "cp312"),
                     ("library_sha256", "0" * 64), ("oeq_version", NEWER_OEQ), ("torch_version", NEWER_TORCH),
                     ("torch_local", "cu126"), ("extension_name", "other"), ("cxx_std", "c++17"), ("cxx11_abi", 0)):
        manifest.write_text(json.dumps({**old, key: bad}))
        d = rt.check(manifest, GOOD_ENV)
        assert not d.usable and d.reason.startswith("manifest unreadable") and repr(key) in d.reason, (key, d)
    manifest.write_text(json.dumps({k: v for k, v in old.items() if k != "torch_local"}))
    assert "'torch_local'" in rt.check(manifest, GOOD_ENV).reason


def test_a_local_rebuild_of_the_same_oeq_release_matches(manifest):
    assert rt.check(manifest, {**GOOD_ENV, "oeq_version": f"{OEQ}+oeqwheels.cu13.1"}).usable
    assert not rt.check(manifest, {**GOOD_ENV, "oeq_version": f"{NEWER_OEQ}+oeqwheels.cu13.1"}).usable


# ---- resolve(): the one decision behind activate(), status() and the doctor --------------

def env_with(tmp_path, **change):
    """Facts as resolve.environment() reports them, for a machine without a CUDA toolkit."""
    env = {**GOOD_ENV, "torch_version": f"{TORCH}+cu130", "torch_hip": None, "torch_site": str(tmp_path / "site"),
           "oeq_extlib": None, "oeq_jit_forced": False, "cuda_home": None, "cuda_home_usable": False,
           "tools": {"g++": "/usr/bin/g++", "ninja": "/usr/bin/ninja"}, "from_wheels": "auto"}
    env.update(change)
    return env


def oeq_with_stable_extension(tmp_path):
    extlib = tmp_path / "openequivariance" / "_torch" / "extlib"
    extlib.mkdir(parents=True)
    (extlib / "liboeq_stable_cuda_aoti.so").write_bytes(b"")
    (extlib / "oeq_stable_cuda.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    return extlib


def test_oeq_precompiled_comes_first(tmp_path, manifest):
    extlib = oeq_with_stable_extension(tmp_path)
    res = rt.resolve(env_with(tmp_path, oeq_extlib=extlib), environ={}, manifest_path=manifest)
    assert res.chosen.name == "oeq-precompiled" and res.chosen.path.endswith("oeq_stable_cuda.cpython-311-x86_64-linux-gnu.so")
    assert [c.name for c in res.candidates] == ["oeq-precompiled"]
    # FASTMACE_OEQ_PREBUILT=1 asks that nothing be compiled: OEq's own extension compiles nothing either.
    assert rt.resolve(env_with(tmp_path, oeq_extlib=extlib), environ={"FASTMACE_OEQ_PREBUILT": "1"},
                      manifest_path=manifest).chosen.name == "oeq-precompiled"


def build_record(cuda_majors: tuple[str, ...], torch_min: str, version: str) -> str:
    from fastmace_oeq_ext.manifest import Input
    from fastmace_oeq_ext.oeq_build import FileHash, OeqBuild
    pin = Input("x", "1", "x.whl", "0" * 64)
    return OeqBuild(package="openequivariance", version=version, oeq_sdist=pin, torch_min=torch_min,
                    cuda_majors=cuda_majors, built_against=pin, python_tag="cp311", platform_tag="manylinux_2_28_x86_64",
                    files=(FileHash("a.so", "0" * 64),), cuda_wheels=(pin,), nanobind=pin, compiler="g++").to_json()


# Made-up binary OEq builds, as their build records say them (CUDA majors, torch floor, version): two of one CUDA line
# each and one build for both (the dispatch library's), and a torch below the CUDA 13 line's floor: the decision reads
# the record, never the pins.
CU13_LINE, CU12_LINE = (("13",), "9.1", f"{OEQ}+oeqwheels.cu13.1"), (("12",), "9.0", f"{OEQ}+oeqwheels.cu12.8")
BOTH = (("12", "13"), "9.0", f"{OEQ}+oeqwheels.cuda.1")
BELOW_CU13_FLOOR = "9.0.5"


@pytest.mark.parametrize("torch, cuda, record, refused", [
    (f"{TORCH}+cu130", "13.0", CU13_LINE, None),
    (f"{BELOW_CU13_FLOOR}+cu128", "12.8", CU12_LINE, None),
    (f"{TORCH}+cu130", "13.0", CU12_LINE, ("built for CUDA 12", "cu130")),
    (f"{BELOW_CU13_FLOOR}+cu128", "12.8", CU13_LINE, (f"built for torch >= {CU13_LINE[1]}", "cu128")),
    (f"{TORCH}+cu128", "12.8", CU13_LINE, ("built for CUDA 13", "cu128")),
    (f"{TORCH}+cu130", "13.0", BOTH, None),
    (f"{BELOW_CU13_FLOOR}+cu128", "12.8", BOTH, None),
    (f"{TORCH}+cu140", "14.0", BOTH, ("built for CUDA 12 and 13", "cu140")),
])
def test_a_binary_oeq_of_another_cuda_line_is_refused_in_one_line(tmp_path, manifest, torch, cuda, record, refused):
    """The build record knows the line's CUDA: a mix is an error (OEq would load the library and fail), never a build."""
    extlib = oeq_with_stable_extension(tmp_path)
    env = env_with(tmp_path, oeq_extlib=extlib, torch_version=torch, torch_cuda=cuda, oeq_build=build_record(*record))
    res = rt.resolve(env, environ={}, manifest_path=manifest)
    if refused is None:
        assert res.chosen.name == "oeq-precompiled" and res.error is None
        return
    assert res.chosen is None and [c.name for c in res.candidates] == ["oeq-precompiled"]
    words, line = refused
    assert res.error.startswith(f"openequivariance {record[2]} is {words}") and "\n" not in res.error
    assert res.error.endswith(f"--extra-index-url <the binary index>/{line}/simple/")  # no fastmace-oeq-ext here
    import importlib
    text, extra, rc = importlib.import_module("fastmace_oeq_ext.doctor").verdict(res, env)
    assert rc == 1 and text == f"host extension: unusable; {res.error}" and not extra
    # OEQ_JIT_EXTENSION=1: OEq skips its own library, so the mix does not matter and the JIT paths are considered.
    res = rt.resolve({**env, "oeq_jit_forced": True}, environ={}, manifest_path=manifest)
    assert res.error is None and "OEQ_JIT_EXTENSION=1" in res.candidates[0].reason and len(res.candidates) > 1


@pytest.mark.parametrize("change, words", [
    ({"oeq_jit_forced": True}, "OEQ_JIT_EXTENSION=1"),
    ({"torch_version": "2.9.1+cu128"}, "older than 2.10"),
    ({"torch_hip": "6.4"}, "HIP build"),
])
def test_oeq_precompiled_refused_when_oeq_would_not_load_it(tmp_path, manifest, change, words):
    extlib = oeq_with_stable_extension(tmp_path)
    res = rt.resolve(env_with(tmp_path, oeq_extlib=extlib, **change), environ={}, manifest_path=manifest)
    first = res.candidates[0]
    assert first.name == "oeq-precompiled" and not first.taken and words in first.reason


def test_prebuilt_then_its_refusal_then_the_fallbacks(tmp_path, manifest):
    res = rt.resolve(env_with(tmp_path), environ={}, manifest_path=manifest)
    assert [(c.name, c.taken) for c in res.candidates] == [("oeq-precompiled", False), ("prebuilt", True)]
    assert res.chosen.path == str(manifest.parent / "libtorch_tp_jit.so")
    # A different torch: the prebuilt is refused with its reason, the NVIDIA wheels are missing
    # here, and torch's CUDA_HOME has no headers: nothing is taken, and every reason is kept.
    res = rt.resolve(env_with(tmp_path, torch_version=f"{NEWER_TORCH}+cu130"), environ={}, manifest_path=manifest)
    assert res.chosen is None and [c.name for c in res.candidates] == \
        ["oeq-precompiled", "prebuilt", "nvidia-wheels", "host-toolchain"]
    assert f"torch {NEWER_TORCH}+cu130 installed" in res.candidates[1].reason
    assert "has no CUDA headers" in res.candidates[3].reason
    # A toolkit with headers: the host toolchain is taken.
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    res = rt.resolve(env_with(tmp_path, torch_version=f"{NEWER_TORCH}+cu130", cuda_home=str(home),
                              cuda_home_usable=True), environ={}, manifest_path=manifest)
    assert res.chosen.name == "host-toolchain" and "g++ /usr/bin/g++" in res.chosen.reason


def test_required_prebuilt_that_cannot_be_used_is_an_error(tmp_path, manifest):
    res = rt.resolve(env_with(tmp_path, python_tag="cp312"), environ={"FASTMACE_OEQ_PREBUILT": "1"},
                     manifest_path=manifest)
    assert res.chosen is None and "FASTMACE_OEQ_PREBUILT=1" in res.error and "cp312" in res.error
    res = rt.resolve(env_with(tmp_path), environ={"FASTMACE_OEQ_PREBUILT": "0"}, manifest_path=manifest)
    assert res.candidates[1].reason == "FASTMACE_OEQ_PREBUILT=0"


def test_doctor_json_and_help(tmp_path):
    import subprocess
    import sys
    from support import RUNTIME
    env = {**__import__("os").environ, "PYTHONPATH": str(RUNTIME)}
    r = subprocess.run([sys.executable, "-m", "fastmace_oeq_ext", "--help"], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0 and "--json" in r.stdout and "host extension:" not in r.stdout  # help, not the doctor
    r = subprocess.run([sys.executable, "-m", "fastmace_oeq_ext", "--json"], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    out = json.loads(r.stdout)
    # The tools' interpreter has no torch: nothing can be used, which the doctor's exit status says.
    assert r.returncode == 1 and out["host_extension"] is None and out["verdict"].startswith("host extension: unusable")
    assert [c["name"] for c in out["candidates"]][:2] == ["oeq-precompiled", "prebuilt"]
    assert all(c["reason"] for c in out["candidates"]) and out["candidates"][1]["reason"] == "torch is not installed"



@pytest.mark.parametrize("change, reason", [
    ({}, None),
    ({"torch_distribution": TORCH}, f"fastmace-oeq-ext was built for torch {TORCH}+cu130, installed is {TORCH}"),
    ({"oeq_version": f"{OEQ}+oeqwheels.cu13.1"},
     f"fastmace-oeq-ext was built for openequivariance {OEQ}, installed is {OEQ}+oeqwheels.cu13.1"),
    ({"python_tag": "cp312"}, "fastmace-oeq-ext was built for python cp311, installed is cp312"),
    ({"machine": "aarch64"}, "fastmace-oeq-ext is for Linux x86_64, not Linux aarch64"),
])
def test_consumer_rule_in_fastmaces_words(manifest, change, reason):
    env = {"torch_distribution": f"{TORCH}+cu130", "oeq_version": OEQ, "python_tag": "cp311", "system": "Linux",
           "machine": "x86_64", **change}
    from fastmace_oeq_ext.decision import consumer_refusal
    assert consumer_refusal(Manifest.from_json(manifest.read_text()), env) == reason


@pytest.mark.parametrize("env, fix", [
    ({"torch_distribution": TORCH, "oeq_version": OEQ},
     f"pip install --force-reinstall --no-deps torch=={TORCH}+cu130 "
     "--index-url https://download.pytorch.org/whl/cu130"),
    ({"torch_distribution": NEWER_TORCH, "oeq_version": OEQ},
     f"pip install --force-reinstall torch=={TORCH}+cu130 --index-url https://download.pytorch.org/whl/cu130"),
    ({"torch_distribution": f"{TORCH}+cu130", "oeq_version": f"{OEQ}+oeqwheels.cu13.1"},
     "pip install --upgrade fastmace-oeq-ext"),
])
def test_consumer_fix_names_the_command_that_works(manifest, env, fix):
    m = Manifest.from_json(manifest.read_text())
    from fastmace_oeq_ext import decision
    assert decision._consumer_fix(m, {"torch_cuda": "13.0", **env}) == fix


def test_the_fix_names_our_index_of_torchs_cuda_major_not_of_its_minor(monkeypatch):
    """A torch built for CUDA 13.2 gets the cu130 line's OEq (one line per CUDA major), which the installed
    fastmace-oeq-ext names as its Project-URL "CUDA 13 index"; a site without those URLs gets cu<major><minor>."""
    from oeq_wheels import pins as P
    import importlib
    decision = importlib.import_module("fastmace_oeq_ext.decision")
    urls = {label: url for label, url in P.load().project_urls}
    monkeypatch.setattr(decision, "_project_urls", lambda: urls)
    one = P.load().index_url(P.load().oeq_binary.name)  # one line for CUDA 12 and 13
    assert [decision.index_for_cuda(c) for c in ("13.0", "13.2", "12.8", "12.9")] == [one, one, one, one]
    monkeypatch.setattr(decision, "_project_urls", lambda: {"Binary index": "https://x.example/"})
    assert decision.index_for_cuda("13.2") == "https://x.example/cu132/simple/"
    monkeypatch.setattr(decision, "_project_urls", lambda: {})
    assert decision.index_for_cuda("13.2") is None and decision.index_for_cuda("13.2", "<b>/") == "<b>/cu132/simple/"


def test_a_build_record_of_schema_2_says_one_cuda_major_and_is_still_read():
    """Binary OEq wheels of a CUDA line (oeqwheels.cu13.2 and before) record one cuda_major (schema 2)."""
    import json
    from fastmace_oeq_ext.oeq_build import OeqBuild
    raw = json.loads(build_record(("13",), "2.11", f"{OEQ}+oeqwheels.cu13.2"))
    del raw["cuda_majors"]
    old = OeqBuild.from_json(json.dumps({**raw, "schema": 2, "cuda_major": "13"}))
    assert old.cuda_majors == ("13",) and old.serves(f"{TORCH}+cu128", "12.8") == \
        f"built for CUDA 13, torch {TORCH}+cu128 is built for CUDA 12.8"
