"""The proposed FastMACE rules (contrib/fastmace/oeq_rules.py) with FastMACE's own code (the pinned release).

Each row is a venv with torch as `pip install torch==X` gets it from PyPI (distribution version X, no local
label), the pinned FastMACE wheel and the OEq (and fastmace-oeq-ext) the row names. FastMACE runs twice
there, compilers hidden (g++, c++, ninja, nvcc sentinels first on PATH, CXX a sentinel, FASTMACE_OEQ_PREBUILT=1:
FastMACE must refuse rather than build): as it is (today's answer), then with the rules put over its
prebuilt_extension, prepare_in_process and doctor check at run time (oeq_rules.install(), as
contrib/fastmace/launch.py does; nothing is written into FastMACE's files). Each run calls FastMACE's own
prebuilt_extension(), its doctor's OpenEquivariance check, its prepare_in_process() and then `import
openequivariance`; and the `fastmace doctor` command itself.

Rows (torch versions from pins.toml: the FastMACE matrix's torch, the OEq line's tested_torch):
- PyPI's copy of post1's torch + the owner's published fastmace-oeq-ext (post1) + PyPI's OEq: today refused
  (X.Y.Z+cu130 != X.Y.Z); with the rules the prebuilt is used, nothing compiled;
- every tested torch of the line, CUDA 12 (its floor) and CUDA 13 (OEQ_RULES_TORCHES=X,Y narrows a run by hand) + our
  one binary OEq, no fastmace-oeq-ext: today refused; with the rules OEq's precompiled extension, OEQ_JIT_EXTENSION
  never set, `import openequivariance` loads it, nothing compiled; at the oldest and the newest torch the loader's own
  account shows the dispatch library bound that torch's CUDA major's libraries and no other major's.
Unpatched FastMACE's rows stay in test_fastmace.py; the aarch64 row (under qemu) is test_aarch64.py's, beside the
other emulated installs, whose uv cache it shares.

Cost: a uv venv per torch of the line. The matrix's torch is the cached venv other tests
share, NVIDIA's wheels included; every other torch's venv (torch and its requirements but most of NVIDIA's wheels
and Triton, with load stubs for the missing libraries: nothing here calls into CUDA or compiles) and its own uv cache live in the test's
tmp_path and go when it passes (venv_for), so the suite holds one such stack at a time, and each run installs them
again. Then the file runs in a few minutes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support import REPO
from support.builds import oeq_wheel_of
from support.oeq_operators import LOADED
from oeq_wheels import driver_stub as libcuda, pins as P
from oeq_wheels.checks import loader_stubs, venvs
from support import venvs as test_venvs
from oeq_wheels.files import default_cache
from oeq_wheels.output import extra_dir

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)


RULES_DIR = REPO / "contrib" / "fastmace"

# FastMACE's own calls, in the order a FastMACE run makes them; OEQ_RULES=1 installs the rules first. ops: every
# operator the process then holds under torch.ops.libtorch_tp_jit (the tests hold it to the oeq_ops fixture, OEq's
# sdist's).
PROBE = r"""
import json, os, sys, tempfile, importlib.metadata as md
sys.path.insert(0, os.environ["OEQ_RULES_DIR"])
if os.environ["OEQ_RULES"] == "1":
    import oeq_rules
    oeq_rules.install()
from fastmace.kernels import _oeq_runtime as rt
from fastmace.cli import doctor
out = {"torch_distribution": md.version("torch"), "oeq_version": md.version("openequivariance")}
pre = rt.prebuilt_extension()
out.update(usable=pre.usable, reason=pre.reason, extension_version=pre.manifest.get("extension_version"))
item = doctor.check_oeq(doctor.Context(environ=os.environ, hash_models=False))
out.update(doctor_ok=item.ok, doctor=item.detail, doctor_runs_it=doctor.check_oeq in doctor.CHECKS)
try:
    cache = tempfile.TemporaryDirectory(prefix="fastmace-cache-")  # removed at exit, not left in /tmp
    plan, handles = rt.prepare_in_process(cache.name)
except rt.OEqRuntimeError as error:
    out["refused"] = str(error)
else:
    out.update(extension=plan.extension, plan_jit=plan.environment.get("OEQ_JIT_EXTENSION"),
               env_jit=os.environ.get("OEQ_JIT_EXTENSION"))
    import torch, openequivariance
    from openequivariance._torch import extlib
    out.update(torch=torch.__version__, torch_cuda=torch.version.cuda, precompiled=extlib.USE_PRECOMPILED_EXTENSION,
               built=extlib.BUILT_EXTENSION, error=str(extlib.BUILT_EXTENSION_ERROR or "") or None,
               module=getattr(extlib.extension_module, "__file__", None), so_path=openequivariance.torch_ext_so_path(),
               ops={LOADED})
print("RULES " + json.dumps(out, default=str))
""".replace("{LOADED}", LOADED)


def torches() -> list[str]:
    line = P.load().oeq_binary
    chosen = os.environ.get("OEQ_RULES_TORCHES", "")
    if chosen:  # e.g. the floor and the newest for a quicker run by hand
        return chosen.split(",")
    return list(line.tested_torch)  # every tested torch, CUDA 12 and 13; docs/fastmace-proposal.md says what it costs


@pytest.fixture(scope="session")
def built(request) -> Path:
    """The OUTDIR of our cp311 wheels: the session's build (cp311_wheel), or OEQ_WHEELS_TEST_OUTDIR (a finished
    `make wheels` OUTDIR, to run this file alone without building)."""
    outdir = os.environ.get("OEQ_WHEELS_TEST_OUTDIR")
    return Path(outdir) if outdir else request.getfixturevalue("cp311_wheel").parent


@pytest.fixture(scope="session")
def our_oeq(built) -> Path:
    """Our binary OEq for CPython 3.11 (x86_64): one wheel for every CUDA torch."""
    return oeq_wheel_of(built, P.load().oeq_binary.name, tag="cp311-cp311")


# OEq alone, as `import openequivariance` loads it: its precompiled extension or why not.
OEQ_LOAD = r"""
import json, torch, openequivariance
from openequivariance._torch import extlib
print("OEQ " + json.dumps({"torch": torch.__version__, "precompiled": extlib.USE_PRECOMPILED_EXTENSION,
    "built": extlib.BUILT_EXTENSION, "error": str(extlib.BUILT_EXTENSION_ERROR or "") or None,
    "module": getattr(extlib.extension_module, "__file__", None),
    "ops": {LOADED},
    "mapped": sorted({l.split()[-1] for l in open("/proc/self/maps") if "/lib" in l and ".so" in l})}))
""".replace("{LOADED}", LOADED)


# OEQ_LOAD, then what the dispatch library bound.
DISPATCH_LOAD = OEQ_LOAD + r"""
import ctypes, os
d = ctypes.CDLL(os.path.join(os.path.dirname(extlib.extension_module.__file__), "liboeq_cuda_dispatch.so"))
d.oeq_cuda_dispatch_path.restype = ctypes.c_char_p
print("DISPATCH " + json.dumps({"major": d.oeq_cuda_dispatch_major(),
                                "paths": [d.oeq_cuda_dispatch_path(i).decode() for i in range(3)]}))
"""


def dispatch_loads(venv: Path, whl: Path, major: str, oeq_ops, sentinels, tmp_path: Path, record) -> None:
    """Our one cp311 wheel (built against CUDA 12.8's headers) in this torch's venv, no compiler: OEq loads its
    precompiled extension, and the loader's own account (/proc/self/maps) shows CUDA `major`'s cudart, NVRTC and
    cuBLAS from this venv's NVIDIA wheels, bound by the dispatch library, and no CUDA runtime of the other major."""
    reinstall(venv, whl)
    extlib = site_of(venv) / "openequivariance" / "_torch" / "extlib"
    stub_dir = driver_stub(sorted(extlib.glob("*.so")), tmp_path / "stub-dispatch", venv)
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", "-c", DISPATCH_LOAD], capture_output=True,
                       text=True, env=environment(venv, sentinels, stub_dir, tmp_path, rules=False), cwd=str(tmp_path))
    said = {l.split(" ", 1)[0]: json.loads(l.split(" ", 1)[1]) for l in r.stdout.splitlines()
            if l.startswith(("OEQ ", "DISPATCH "))}
    assert "DISPATCH" in said, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    loaded, bound = said["OEQ"], said["DISPATCH"]
    assert loaded["precompiled"] is True and loaded["built"] is True and loaded["error"] is None, loaded
    assert Path(loaded["module"]).parent == extlib and loaded["ops"] == oeq_ops, loaded
    nvidia = os.path.realpath(site_of(venv) / "nvidia") + os.sep
    mapped = {Path(m).name: m for m in loaded["mapped"]}
    cuda = [f"libcudart.so.{major}", f"libnvrtc.so.{major}", f"libcublas.so.{major}"]
    assert bound["major"] == int(major) and all(mapped.get(s, "").startswith(nvidia) for s in cuda), (bound, mapped)
    assert [os.path.realpath(p) for p in bound["paths"]] == [mapped[s] for s in cuda], (bound, mapped)
    other = "12" if major == "13" else "13"
    assert not [n for n in mapped if n.startswith(("libcudart.so.", "libnvrtc.so.", "libcublas.so.")) and
                n.endswith("." + other)], mapped
    log = sentinels[1]
    assert not log.exists() or log.read_text() == ""
    record("dispatch-bound CUDA libraries", sorted(cuda))


@pytest.fixture(scope="session")
def our_ext(built) -> Path:
    """The fastmace-oeq-ext build served beside it on our index (its manifest names our binary OEq)."""
    (whl,) = extra_dir(built).glob("fastmace_oeq_ext-*+*-cp311-cp311-*_x86_64.whl")
    return whl


def venv_for(torch: str, tmp_path: Path) -> Path:
    """The test's own venv: an overlay of the cached one for the matrix's torch (which other tests share), else one
    made in tmp_path with its own uv cache, gone with tmp_path when the test passes (a torch only this file uses:
    the suite's peak disk holds one such stack at a time instead of five). Those other torches come without most of
    NVIDIA's wheels (all but CUDA 13's cudart, NVRTC and cuBLAS, which FastMACE's runtime looks for; ~2 GB less each)
    and without Triton: nothing here calls into CUDA or compiles, and load stubs made from what the install needs
    stand in for the missing libraries (driver_stub(..., venv); oeq_wheels/checks/loader_stubs.py)."""
    pins = P.load()
    if torch == pins.matrix.torch_version:
        return test_venvs.overlay(test_venvs.pypi_torch_venv(pins, default_cache(), torch), tmp_path / f"venv-{torch}")
    return test_venvs.pypi_torch_venv(pins, default_cache(), torch, transient=tmp_path / f"torch-{torch}", whole=False)


site_of = venvs.site_packages


def reinstall(venv: Path, *wheels: Path) -> None:
    """Exactly these wheels beside torch and FastMACE: an earlier step's OEq and fastmace-oeq-ext removed first
    (the venv is the test's own overlay, so nothing of another test is there)."""
    uv = [sys.executable, "-m", "uv", "pip"]
    env = dict(venvs.pip_env(), UV_NO_CONFIG="1")
    subprocess.run([*uv, "uninstall", "-q", "--python", str(venv / "bin" / "python"), "openequivariance",
                    "fastmace-oeq-ext"], env=env, capture_output=True)
    r = subprocess.run([*uv, "install", "-q", "--python", str(venv / "bin" / "python"), "--no-deps", "--reinstall",
                        *map(str, wheels)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def driver_stub(libraries: list[Path], out: Path, venv: Path | None = None, record=None) -> Path:
    """A libcuda.so.1 defining the driver symbols these libraries need (no GPU here); its directory. venv: also the
    load stubs of the NVIDIA libraries its install needs and lacks (a venv_for venv without NVIDIA's wheels), beside
    it on LD_LIBRARY_PATH; none where the wheels are there. record: the test's record_property, which the proof
    table's row then prints the stubs' exact sonames from."""
    stub_dir = libcuda.make_stub(libcuda.undefined_driver_symbols(libraries, dynamic=True), out).parent
    if venv is not None:
        made = loader_stubs.make(site_of(venv), venv / "bin" / "python", stub_dir)
        if record is not None:
            record("load stubs", sorted(p.name for p in made))
    return stub_dir


def environment(venv: Path, sentinels, stub_dir: Path, tmp_path: Path, rules: bool, **extra) -> dict:
    sbin, _ = sentinels
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "CC", "CXX", "OEQ_JIT_EXTENSION", "VIRTUAL_ENV")}
    env.update(PATH=f"{sbin}{os.pathsep}{venv / 'bin'}{os.pathsep}{env['PATH']}", FASTMACE_OEQ_PREBUILT="1",
               CXX=str(sbin / "g++"), OEQ_CUDA_DRIVER_LIBRARY=str(stub_dir / "libcuda.so.1"),
               LD_LIBRARY_PATH=str(stub_dir), TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"),
               FASTMACE_CACHE=str(tmp_path / "fastmace-cache"), OEQ_RULES_DIR=str(RULES_DIR),
               OEQ_RULES="1" if rules else "0")
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def ask(venv: Path, sentinels, stub_dir: Path, tmp_path: Path, rules: bool, runner: list[str] | None = None,
        **extra) -> dict:
    """FastMACE's answers (PROBE) and the `fastmace doctor` command's OpenEquivariance item, with or without
    the rules; the sentinel log after both. runner: the command that runs the venv's interpreter (another
    architecture's, under qemu), else venv/bin/python."""
    env = environment(venv, sentinels, stub_dir, tmp_path, rules, **extra)
    py = runner or [str(venv / "bin" / "python")]
    r = subprocess.run([*py, "-W", "ignore", "-c", PROBE], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    lines = [l for l in r.stdout.splitlines() if l.startswith("RULES ")]
    assert lines, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    out = json.loads(lines[-1][len("RULES "):])
    cli = [*py, "-W", "ignore", str(RULES_DIR / "launch.py"), "-m", "fastmace.cli", "doctor"] if rules else \
        [*py, "-W", "ignore", "-m", "fastmace.cli", "doctor"]
    d = subprocess.run(cli, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    out["cli_doctor"] = oeq_item(d.stdout)
    assert out["cli_doctor"], f"no OpenEquivariance item in `fastmace doctor`:\n{d.stdout[-3000:]}\n{d.stderr[-2000:]}"
    log = sentinels[1]
    out["sentinel_log"] = log.read_text() if log.exists() else ""
    return out


def oeq_item(doctor_out: str) -> str:
    """The OpenEquivariance item of `fastmace doctor`'s checklist: its line and the indented lines after it."""
    lines, keep = [], False
    for line in doctor_out.splitlines():
        if line[:6] in ("[ ok ]", "[warn]", "[FAIL]"):
            keep = line[7:].startswith("OpenEquivariance:")
        if keep:
            lines.append(line)
    return "\n".join(lines)


def test_pypi_torch_and_fastmace_oeq_ext_from_pypi_get_the_prebuilt(post1_wheel, post1_torch, cp311_plain_oeq,
                                                                     oeq_ops, sentinels, tmp_path, record_property):
    """`pip install "fastmace[oeq]"` with nothing first: PyPI's torch, PyPI's OEq and the owner's published
    fastmace-oeq-ext (post1, built for PyTorch's index's torch). Today refused; with the rules the prebuilt, unbuilt."""
    pins = P.load()
    torch = post1_torch.split("+")[0]  # PyPI's copy of the binary post1 was built for
    venv = venv_for(torch, tmp_path)
    reinstall(venv, cp311_plain_oeq, post1_wheel)
    site = site_of(venv)
    stub_dir = driver_stub([site / "fastmace_oeq_ext" / "libtorch_tp_jit.so"], tmp_path / "stub", venv,
                           record_property)
    today = ask(venv, sentinels, stub_dir, tmp_path, rules=False)
    assert today["torch_distribution"] == torch and today["oeq_version"] == pins.oeq.version, today
    assert today["reason"] == f"fastmace-oeq-ext was built for torch {post1_torch}, installed is {torch}"
    assert today["refused"].startswith("OEq unavailable: prebuilt extension not usable: fastmace-oeq-ext was built")
    assert "prebuilt not used: fastmace-oeq-ext was built for torch" in today["cli_doctor"], today["cli_doctor"]

    ours = ask(venv, sentinels, stub_dir, tmp_path, rules=True)
    assert ours["usable"] and ours["reason"] is None, ours
    assert ours["extension"]["source"] == "prebuilt" and ours["extension"]["version"] == pins.consumer.published.version, ours
    assert ours["module"] == str(site / "fastmace_oeq_ext" / "libtorch_tp_jit.so"), ours
    assert ours["ops"] == oeq_ops and ours["built"] is True and ours["precompiled"] is False, ours
    assert ours["env_jit"] == "1"  # PyPI's OEq has no precompiled extension: FastMACE's JIT route, its prebuilt
    line = (f"host extension: prebuilt (fastmace-oeq-ext {pins.consumer.published.version}, "
            f"{site / 'fastmace_oeq_ext' / 'libtorch_tp_jit.so'}); no compiler needed")
    assert ours["doctor_ok"] and line in ours["doctor"].splitlines(), ours["doctor"]
    assert ours["doctor_runs_it"] and line in ours["cli_doctor"] and ours["cli_doctor"].startswith("[ ok ]"), ours
    assert ours["sentinel_log"] == ""  # nothing compiled, nothing even tried


RULE_TABLE = r"""
import json, os, sys
sys.path.insert(0, os.environ["OEQ_RULES_DIR"])
from fastmace.kernels import _oeq_runtime as rt
import oeq_rules
theirs = rt.prebuilt_extension
oeq_rules.install()
rows = []
for torch, cuda, oeq in json.loads(sys.argv[1]):
    versions = {"torch": torch, "openequivariance": oeq}
    rows.append([theirs(versions=versions).reason, oeq_rules.prebuilt_extension(versions=versions, torch_cuda=cuda).reason])
print("TABLE " + json.dumps(rows))
"""


def test_rule_one_against_fastmaces_own_rule(post1_wheel, post1_manifest, post1_torch, cp311_plain_oeq, tmp_path):
    """On post1's real manifest: where FastMACE refuses for the local label only, the rules accept; where the
    release or torch's CUDA differs, they refuse, in FastMACE's words where FastMACE has words for it."""
    venv = venv_for(post1_torch.split("+")[0], tmp_path)
    reinstall(venv, cp311_plain_oeq, post1_wheel)
    # post1's torch (with and without PyTorch's local label) and OEq, a binary OEq of that release, another torch
    # and another OEq release (versions nothing pins), and post1's torch built for CUDA 12.8.
    pt, o = post1_torch, post1_manifest["openequivariance"]
    t, other_torch, other_oeq, binary_oeq = pt.split("+")[0], "9.1.0", "9.1.1", f"{o}+oeqwheels.cu13.1"
    cases = [(pt, "13.0", o), (t, "13.0", o), (pt, "13.0", binary_oeq), (other_torch, "13.0", o), (pt, "12.8", o),
             (pt, "13.0", other_oeq)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", "-c", RULE_TABLE, json.dumps(cases)],
                       capture_output=True, text=True, env=dict(env, OEQ_RULES_DIR=str(RULES_DIR)))
    (line,) = [l for l in r.stdout.splitlines() if l.startswith("TABLE ")] or [r.stderr[-3000:]]
    got = dict(zip(cases, json.loads(line[6:])))
    assert got[cases[0]] == [None, None]
    assert got[cases[1]] == [f"fastmace-oeq-ext was built for torch {pt}, installed is {t}", None]
    assert got[cases[2]] == [f"fastmace-oeq-ext was built for openequivariance {o}, installed is {binary_oeq}", None]
    assert got[cases[3]] == [f"fastmace-oeq-ext was built for torch {pt}, installed is {other_torch}"] * 2
    assert got[cases[4]] == [None, f"fastmace-oeq-ext was built for torch {pt} with CUDA 13.0, installed torch "
                                   f"{pt} is built for CUDA 12.8"]
    assert got[cases[5]] == [f"fastmace-oeq-ext was built for openequivariance {o}, installed is {other_oeq}"] * 2


@pytest.mark.parametrize("torch", torches())
def test_every_cuda_torch_from_pypi_loads_oeqs_precompiled_extension(torch, our_oeq, oeq_ops, sentinels, tmp_path,
                                                                     record_property):
    """torch X from PyPI (CUDA 12 or 13) + our one binary OEq, no fastmace-oeq-ext, no compiler: today FastMACE refuses
    (it forces OEQ_JIT_EXTENSION=1 and has no prebuilt); with the rules OEq loads its own precompiled extension."""
    pins = P.load()
    line = pins.oeq_binary
    venv = venv_for(torch, tmp_path)
    reinstall(venv, our_oeq)
    extlib = site_of(venv) / "openequivariance" / "_torch" / "extlib"
    stub_dir = driver_stub(sorted(extlib.glob("*.so")), tmp_path / "stub", venv, record_property)
    today = ask(venv, sentinels, stub_dir, tmp_path, rules=False)
    assert today["torch_distribution"] == torch and today["oeq_version"] == line.version(pins.oeq.version), today
    assert today["refused"].startswith("OEq unavailable: prebuilt extension not usable: fastmace-oeq-ext is not "
                                       "installed"), today
    assert "host extension: built with the host toolchain (OEQ_JIT_EXTENSION=1" in today["cli_doctor"]

    ours = ask(venv, sentinels, stub_dir, tmp_path, rules=True)
    assert "refused" not in ours, ours
    assert ours["extension"]["source"] == "oeq-precompiled", ours
    assert ours["extension"]["path"] == str(extlib / "liboeq_stable_cuda_aoti.so"), ours
    assert ours["plan_jit"] is None and ours["env_jit"] is None, ours  # never set, in the plan or the process
    assert ours["torch"].startswith(torch) and ours["torch_cuda"].split(".")[0] in line.cuda_majors, ours
    assert ours["precompiled"] is True and ours["built"] is True and ours["error"] is None, ours
    assert Path(ours["module"]).parent == extlib and Path(ours["module"]).name.startswith("oeq_stable_cuda"), ours
    assert ours["so_path"] == str(extlib / "liboeq_stable_cuda_aoti.so") and ours["ops"] == oeq_ops, ours
    precompiled = f"host extension: OpenEquivariance precompiled ({extlib / 'liboeq_stable_cuda_aoti.so'}); no compiler needed"
    assert ours["doctor_ok"] and precompiled in ours["doctor"].splitlines(), ours["doctor"]
    assert ours["cli_doctor"].startswith("[ ok ] OpenEquivariance") and precompiled in ours["cli_doctor"], ours
    assert "fastmace-oeq-ext not used: fastmace-oeq-ext is not installed" in ours["cli_doctor"]
    assert ours["sentinel_log"] == "" and today["sentinel_log"] == ""

    if torch == line.tested_torch[0]:  # below the floor: the same install, torch's release read one minor older
        major, minor = (int(x) for x in line.torch_min.split("."))
        older = f"{major}.{minor - 1}.0+cu{line.cuda.replace('.', '')}"
        record = json.loads(zipfile.ZipFile(our_oeq).read(
            next(n for n in zipfile.ZipFile(our_oeq).namelist() if n.endswith("oeq_wheels_build.json"))))
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import oeq_rules; "
                "p = oeq_rules.oeq_precompiled({}, torch=json.loads(sys.argv[2]), record=json.loads(sys.argv[3])); "
                "print(json.dumps([p.usable, p.reason]))")
        r = subprocess.run([str(venv / "bin" / "python"), "-c", code, str(RULES_DIR),
                            json.dumps({"__version__": older, "cuda": line.cuda}), json.dumps(record)],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert json.loads(r.stdout or "null") == [
            False, f"openequivariance {line.version(pins.oeq.version)}'s precompiled extension needs torch >= "
                   f"{line.torch_min}, torch {older} is installed"], r.stderr[-2000:]
    if torch in (line.tested_torch[0], line.tested_torch[-1]):  # CUDA 12's torch, and the newest CUDA 13 torch
        dispatch_loads(venv, our_oeq, ours["torch_cuda"].split(".")[0], oeq_ops, sentinels, tmp_path, record_property)


def test_pytorch_index_torch_keeps_the_prebuilt_and_without_it_loads_oeqs_own(fastmace_venv, post1_wheel, post1_torch,
                                                                              cp311_plain_oeq, our_oeq, our_ext,
                                                                              oeq_ops, sentinels, tmp_path):
    """The matrix's torch as FastMACE's README installs it (PyTorch's index): where FastMACE takes a prebuilt today (post1 beside
    PyPI's OEq, where that torch is post1's; ours beside our binary OEq), the rules take the same one; our binary OEq
    alone: OEq's own."""
    pins = P.load()
    site = site_of(fastmace_venv)
    lib = site / "fastmace_oeq_ext" / "libtorch_tp_jit.so"
    rows = [(our_oeq, our_ext, pins.for_variant(pins.oeq_binary.name).version)]
    if post1_torch == pins.matrix.consumer_torch:  # re-pinned to a newer torch, post1 is refused (test_fastmace.py)
        rows.insert(0, (cp311_plain_oeq, post1_wheel, pins.consumer.published.version))
    for oeq, ext, version in rows:
        reinstall(fastmace_venv, oeq, ext)
        stub_dir = driver_stub([lib, *sorted((site / "openequivariance" / "_torch" / "extlib").glob("*.so"))],
                               tmp_path / f"stub-{version}")
        for rules in (False, True):
            got = ask(fastmace_venv, sentinels, stub_dir, tmp_path, rules=rules)
            assert got["torch_distribution"] == pins.matrix.consumer_torch, got
            assert got["usable"] and got["extension"]["source"] == "prebuilt", (rules, got)
            assert got["extension"]["version"] == version and got["module"] == str(lib) and got["ops"] == oeq_ops, got
            assert f"host extension: prebuilt (fastmace-oeq-ext {version}, {lib}); no compiler needed" in got["cli_doctor"]
            assert got["sentinel_log"] == ""
    reinstall(fastmace_venv, our_oeq)
    extlib = site / "openequivariance" / "_torch" / "extlib"
    stub_dir = driver_stub(sorted(extlib.glob("*.so")), tmp_path / "stub-oeq")
    today = ask(fastmace_venv, sentinels, stub_dir, tmp_path, rules=False)
    assert today["refused"].startswith("OEq unavailable: prebuilt extension not usable: fastmace-oeq-ext is not "
                                       "installed"), today
    ours = ask(fastmace_venv, sentinels, stub_dir, tmp_path, rules=True)
    assert ours["extension"]["source"] == "oeq-precompiled" and ours["env_jit"] is None, ours
    assert ours["precompiled"] and ours["built"] and Path(ours["module"]).parent == extlib and ours["ops"] == oeq_ops, ours
    assert f"host extension: OpenEquivariance precompiled ({extlib / 'liboeq_stable_cuda_aoti.so'})" in ours["cli_doctor"]
    assert today["sentinel_log"] == "" and ours["sentinel_log"] == ""
