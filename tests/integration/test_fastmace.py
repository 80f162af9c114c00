"""The consumer itself: FastMACE's own code (the pinned release) decides whether its users get our prebuilt.

In a venv with the matrix's torch as PyTorch's index serves it (PyPI's binary, re-versioned: that index cannot
be reached here) and FastMACE (pinned by sha256 in pins.toml):
- post1's world: OEq as the sdist build leaves it and the owner's published fastmace-oeq-ext (post1);
  FastMACE accepts post1, and `pip install -U fastmace-oeq-ext` to ours keeps it accepting;
- the compiler-free install: our binary OEq and the fastmace-oeq-ext build that names it, from the
  served cu130 index, with every compiler a sentinel;
each time FastMACE's prebuilt_extension() is usable, its prepare_in_process() then `import
openequivariance` registers torch.ops.libtorch_tp_jit with nothing compiled, and its doctor's
OpenEquivariance check prints the prebuilt line. README's other two rows: PyPI's torch, where FastMACE refuses
and builds with g++ and ninja; another torch, where pip refuses fastmace-oeq-ext.
"""
from __future__ import annotations

import json
import os
import subprocess
import zipfile


from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch
from oeq_wheels.ext import consumer
from oeq_wheels.output import extra_dir
from oeq_wheels.release import site
from oeq_wheels.checks import cleaninstall, hosts
from support import venvs as test_venvs
from oeq_wheels.checks.venvs import pip_env, site_packages
from support.oeq_operators import LOADED


PROBE = cleaninstall.FASTMACE_PROBE  # FastMACE's own calls, in the order a FastMACE run makes them


def pip(venv, *args, path_prefix=None):
    env = pip_env()
    if path_prefix:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def ask_fastmace(venv, sentinels, libcuda_stub, tmp_path, probe=PROBE, **extra):
    """FastMACE's answers (probe's FASTMACE line) with the sentinels first on PATH, CXX the g++ sentinel and
    FASTMACE_OEQ_PREBUILT=1 (extra: other variables; None removes one); the sentinel log after it."""
    sbin, log = sentinels
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "CC", "CXX")}
    env.update(PATH=f"{sbin}{os.pathsep}{venv / 'bin'}{os.pathsep}{env['PATH']}", FASTMACE_OEQ_PREBUILT="1",
               CXX=str(sbin / "g++"), OEQ_CUDA_DRIVER_LIBRARY=str(libcuda_stub / "libcuda.so.1"),
               LD_LIBRARY_PATH=str(libcuda_stub), TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"),
               FASTMACE_CACHE=str(tmp_path / "fastmace-cache"))
    env = {k: v for k, v in {**env, **extra}.items() if v is not None}
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", "-c", probe], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path))
    lines = [l for l in r.stdout.splitlines() if l.startswith("FASTMACE ")]
    assert lines, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    out = json.loads(lines[-1][len("FASTMACE "):])
    out["sentinel_log"] = log.read_text() if log.exists() else ""
    return out


def assert_accepted(out, version):
    assert out["usable"] and out["reason"] is None, out
    assert out["extension_version"] == version
    assert out["doctor_ok"], out["doctor"]
    assert f"host extension: prebuilt (fastmace-oeq-ext {version}, " in out["doctor"], out["doctor"]
    assert out["doctor"].rstrip().endswith("no compiler needed"), out["doctor"]
    assert out["extension"]["source"] == "prebuilt" and out["extension"]["version"] == version
    assert out["ops"] == ["jit_conv_forward", "jit_tp_backward", "jit_tp_forward"], out
    assert out["module"].endswith("site-packages/fastmace_oeq_ext/libtorch_tp_jit.so"), out
    assert out["sentinel_log"] == ""  # nothing was compiled, nothing was even tried


def test_fastmace_accepts_post1_then_ours_after_upgrade(fastmace_venv, post1_wheel, post1_torch, cp311_wheel,
                                                        cp311_plain_oeq, sentinels, libcuda_stub, tmp_path):
    pins = P.load()
    pip(fastmace_venv, "--no-deps", "--force-reinstall", str(cp311_plain_oeq), str(post1_wheel))
    out = ask_fastmace(fastmace_venv, sentinels, libcuda_stub, tmp_path)
    if post1_torch == pins.matrix.consumer_torch:
        assert_accepted(out, pins.consumer.published.version)  # the harness is post1's world: FastMACE takes post1 here
    else:  # a release for a newer torch: post1 is refused there, and the upgrade below is what fixes it
        assert not out["usable"] and out["reason"] == \
            f"fastmace-oeq-ext was built for torch {post1_torch}, installed is {pins.matrix.consumer_torch}", out
    # `pip install -U fastmace-oeq-ext` from PyPI (a stand-in serving our release, the rest from PyPI).
    packages = tmp_path / "pypi"
    packages.mkdir()
    (packages / cp311_wheel.name).write_bytes(cp311_wheel.read_bytes())
    with hosts.pypi_standin(packages, tmp_path / "pypi.log") as index:
        pip(fastmace_venv, "-U", "fastmace-oeq-ext", "--index-url", index, path_prefix=sentinels[0])
    out = ask_fastmace(fastmace_venv, sentinels, libcuda_stub, tmp_path)
    assert_accepted(out, pins.version)


def test_fastmace_accepts_the_compiler_free_install(fastmace_venv, cp311_wheel, sentinels, libcuda_stub, tmp_path):
    pins = P.load()
    line = pins.oeq_binary
    subprocess.run([str(fastmace_venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "openequivariance",
                    "fastmace-oeq-ext"], env=pip_env(), capture_output=True)
    root = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins)
    with hosts.pages(root, "oeq-wheels") as base:
        # README's FastMACE line (fastmace itself is installed already; its other dependencies are not needed).
        r = pip(fastmace_venv, "fastmace-oeq-ext", "openequivariance>=0.7", "--extra-index-url",
                f"{base}{line.index_paths[0]}/", path_prefix=sentinels[0])
    assert not sentinels[1].exists(), sentinels[1].read_text()
    out = ask_fastmace(fastmace_venv, sentinels, libcuda_stub, tmp_path)
    assert_accepted(out, pins.for_variant(line.name).version)
    versions = subprocess.run([str(fastmace_venv / "bin" / "python"), "-c",
                               "import importlib.metadata as m; print(m.version('openequivariance'), m.version('torch'))"],
                              capture_output=True, text=True).stdout.split()
    assert versions == [line.version(pins.oeq.version), pins.matrix.consumer_torch], r.stdout
    # Our doctor says what FastMACE will do.
    doc = subprocess.run([str(fastmace_venv / "bin" / "python"), "-m", "fastmace_oeq_ext"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert doc.stdout.splitlines()[1] == f"FastMACE {pins.consumer.wheel.version}: uses this prebuilt; no compiler needed", doc.stdout


def test_doctor_says_fastmace_refuses_pypis_torch_and_the_command_that_works(oeq_venv, cache, tmp_path):
    """PyPI's torch says X.Y.Z, not X.Y.Z+cu13N: FastMACE refuses the prebuilt, and we say so in one line."""
    pins = P.load()
    t, ct = pins.matrix.torch_version, pins.matrix.consumer_torch
    files = fetch.ensure(list(pins.consumer.wheels), cache)
    target = tmp_path / "fastmace"
    pip(oeq_venv, "--no-deps", "--target", str(target), *(str(files[w.file]) for w in pins.consumer.wheels))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(oeq_venv / "bin" / "python"), "-m", "fastmace_oeq_ext"], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(target)))
    assert r.stdout.splitlines()[1] == (
        f"FastMACE {pins.consumer.wheel.version}: will not use this prebuilt: fastmace-oeq-ext was built for torch {ct}, installed is "
        f"{t}; instead: pip install --force-reinstall --no-deps torch=={ct} --index-url "
        f"{pins.consumer.torch_index}"), r.stdout
    j = subprocess.run([str(oeq_venv / "bin" / "python"), "-m", "fastmace_oeq_ext", "--json"], capture_output=True,
                       text=True, env=dict(env, PYTHONPATH=str(target)))
    assert json.loads(j.stdout)["consumer"]["uses_prebuilt"] is False
    # Without FastMACE the doctor says nothing of it.
    r = subprocess.run([str(oeq_venv / "bin" / "python"), "-m", "fastmace_oeq_ext"], capture_output=True, text=True,
                       env=env)
    assert "FastMACE" not in r.stdout


# FastMACE's runtime as a run with the hybrid backend makes it: model loading's prepare_hybrid() (its in-process OEq
# preparation), then the MACE import, which imports OpenEquivariance; the plan's extension record is kept on the way.
BUILD_PROBE = r"""
import json
from fastmace.kernels import _oeq_runtime as rt
from fastmace.model import loading
pre = rt.prebuilt_extension()
out = {"usable": pre.usable, "reason": pre.reason}
prepare = rt.prepare_in_process
def recorded(*args, **kwargs):
    plan, handles = prepare(*args, **kwargs)
    out["extension"] = plan.extension
    return plan, handles
rt.prepare_in_process = recorded
out["record"] = loading.prepare_hybrid().detail
import torch, openequivariance
from openequivariance._torch import extlib
out.update(built=extlib.BUILT_EXTENSION, error=str(extlib.BUILT_EXTENSION_ERROR or "") or None, ops={LOADED})
print("FASTMACE " + json.dumps(out, default=str))
""".replace("{LOADED}", LOADED)


def test_fastmace_refuses_the_prebuilt_on_pypis_torch_and_builds_with_gxx_and_ninja(oeq_venv, oeq_stack, cache,
                                                                                    sentinels, libcuda_stub, tmp_path):
    """README's FastMACE row for PyPI's torch (X.Y.Z: the binary PyTorch's index serves as X.Y.Z+cu130), with PyPI's
    OEq and our fastmace-oeq-ext: FastMACE (the pinned wheel) refuses the prebuilt in its own words, and where a user
    runs it (FASTMACE_OEQ_PREBUILT unset) it builds OEq's host extension with g++ and ninja, in its child build and
    again in the process. ninja is the venv's own (pip installs it with OEq; logged, then run); g++ and c++ are the
    failing sentinels, CXX g++'s, so each build stops at its first compile: nothing is compiled."""
    pins = P.load()
    t, ct = pins.matrix.torch_version, pins.matrix.consumer_torch
    files = fetch.ensure(list(pins.consumer.wheels), cache)
    pip(oeq_venv, "--no-deps", *(str(files[w.file]) for w in pins.consumer.wheels))
    sbin, log = sentinels
    # ninja where pip installs it for a user, the venv's bin (the overlay venv leaves that binary out): logged first.
    real = oeq_stack / "bin" / "ninja"
    assert real.is_file()
    (sbin / "ninja").write_text(f'#!/bin/sh\necho "ninja $*" >> "{log}"\nexec "{real}" "$@"\n')
    out = ask_fastmace(oeq_venv, sentinels, libcuda_stub, tmp_path, probe=BUILD_PROBE, FASTMACE_OEQ_PREBUILT=None)
    assert not out["usable"] and out["reason"] == f"fastmace-oeq-ext was built for torch {ct}, installed is {t}", out
    ext = out["extension"]
    assert ext["source"] == "in-process" and ext["prebuilt_skipped"] == out["reason"], ext  # not the prebuilt
    assert "the build left no extension library" in ext["error"], ext  # its child build ran and failed
    assert out["record"].endswith("; host extension: in-process"), out["record"]
    assert out["built"] is False and "Error building extension 'libtorch_tp_jit'" in out["error"], out
    assert out["ops"] == [], out
    calls = out["sentinel_log"].splitlines()
    source = site_packages(oeq_venv) / "openequivariance" / "extension" / "libtorch_tp_jit.cpp"
    builds = [c for c in calls if c.startswith("ninja -v")]  # torch's JIT hands the build to ninja ...
    compiles = [c for c in calls if c.startswith("g++ ") and f" -c {source} " in c]  # ... which runs g++ on OEq's source
    assert len(builds) == 2 and len(compiles) == 2, calls  # the child build, then the process's own
    assert "ninja --version" in calls and "g++ --version" in calls, calls  # torch's and FastMACE's looks at them
    assert not [c for c in calls if c.split()[0] not in ("g++", "ninja")], calls  # no c++, no nvcc


INSTALLED = ("import importlib.metadata as m, json; "
             "print(json.dumps(sorted(d.metadata['Name'] + ' ' + d.version for d in m.distributions())))")


def test_pip_refuses_fastmace_oeq_ext_where_another_torch_is_kept_and_would_otherwise_replace_that_torch(
        torch_venv, cp311_wheel, post1_wheel, tmp_path):
    """README's FastMACE row for another torch, through the served indexes: the site (our builds) and a PyPI
    holding fastmace-oeq-ext's PyPI wheels, ours and the owner's post1 (every other project PyPI's own). README's
    line, `pip install fastmace-oeq-ext --extra-index-url .../simple/`, with the installed torch kept by a
    constraint (`-c` of `torch==X`, pip's way to keep a version): pip's resolver refuses, each fastmace-oeq-ext it
    was offered named with its `torch==<the release's torch>`, and nothing in the venv changes. Without the
    constraint pip would replace that torch by the release's (--dry-run: nothing installed).

    The other torches are the cu130 line's floor and newest; the venv's torch says their version (installed_reversion,
    as the consumer venv says PyTorch's index's): pip's resolver reads an installed torch's metadata, nothing else,
    and no second torch stack is installed for it. The refusal fetches no torch; the dry run fetches the release's
    torch wheel from the kept mirror (PyPI lists no core metadata for torch's wheels), once."""
    pins = P.load()
    line, ours = pins.oeq_binary, pins.matrix.torch_version
    others = [line.tested_torch[0], line.tested_torch[-1]]
    assert ours not in others
    packages = tmp_path / "pypi"
    packages.mkdir()
    for whl in (cp311_wheel, post1_wheel):  # fastmace-oeq-ext on PyPI: ours (what the release uploads) and post1
        (packages / whl.name).write_bytes(whl.read_bytes())
    offered = [pins.for_variant(line.name).version, pins.version, pins.consumer.published.version]
    root = site.write_site(tmp_path / "site", site.from_outdir(extra_dir(cp311_wheel.parent), pins), pins)
    py = str(torch_venv / "bin" / "python")
    installed = lambda: subprocess.run([py, "-c", INSTALLED], capture_output=True, text=True).stdout
    with hosts.pypi_standin(packages, tmp_path / "pypi.log") as index, hosts.pages(root, "oeq-wheels") as base:
        cmd = [py, "-m", "pip", "install", "--index-url", index, "--extra-index-url", f"{base}{line.index_paths[0]}/"]
        for other in others:
            test_venvs.installed_reversion(site_packages(torch_venv), "torch", other)
            before = installed()
            assert f'"torch {other}"' in before, before
            keep = tmp_path / f"keep-torch-{other}.txt"
            keep.write_text(f"torch=={other}\n")
            r = subprocess.run([*cmd, "-c", str(keep), pins.package_name], capture_output=True, text=True,
                               env=pip_env())
            said = r.stdout + r.stderr
            assert r.returncode == 1 and "ResolutionImpossible" in said, said[-3000:]
            assert f"The user requested (constraint) torch=={other}" in said, said[-3000:]
            for version in offered:
                assert f"{pins.package_name} {version} depends on torch=={ours}" in said, (version, said[-3000:])
            assert "Downloading torch" not in said, said[-3000:]
            assert installed() == before
        # Without the constraint, pip's resolver takes the release's torch instead of the one installed.
        report = tmp_path / "report.json"
        r = subprocess.run([*cmd, "--dry-run", "--quiet", "--report", str(report), pins.package_name],
                           capture_output=True, text=True, env=pip_env())
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        got = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
        assert got["torch"] == ours and got[pins.package_name] == offered[0], got
        assert installed() == before


def test_gate_refuses_what_fastmace_refuses(cp311_wheel):
    """FastMACE's own prebuilt_extension() judges every fastmace-oeq-ext wheel in the install it is for."""
    pins = P.load()
    t, ct, o = pins.matrix.torch_version, pins.matrix.consumer_torch, pins.oeq.version
    files = consumer.wheel_files(cp311_wheel)
    assert consumer.problems(files, "3.11", pins.for_variant("pypi")) == []
    # post3's manifest: none of the keys FastMACE reads.
    old = {k: v for k, v in json.loads(files["fastmace_oeq_ext/manifest.json"]).items()
           if k not in ("torch", "openequivariance", "python", "extension_version")}
    bad = dict(files, **{"fastmace_oeq_ext/manifest.json": json.dumps(old).encode()})
    (line,) = consumer.problems(bad, "3.11", pins.for_variant("pypi"))
    assert line == (f"{pins.consumer.label} would not use this wheel with torch {ct} and openequivariance {o}: "
                    f"fastmace-oeq-ext was built for torch None, installed is {ct}")
    # PyPI's torch says X.Y.Z: FastMACE refuses even post1's exact manifest there (its own words).
    answer = consumer.ask(files, "3.11", pins.for_variant("pypi"), torch=t)
    assert answer["reason"] == f"fastmace-oeq-ext was built for torch {ct}, installed is {t}"
    # The line's build names our binary OEq; FastMACE refuses it beside PyPI's OEq and takes it beside ours.
    (served,) = extra_dir(cp311_wheel.parent).glob("fastmace_oeq_ext-*+*.whl")
    sfiles = consumer.wheel_files(served)
    assert consumer.problems(sfiles, "3.11", pins.for_variant(pins.oeq_binary.name)) == []
    assert consumer.ask(sfiles, "3.11", pins.for_variant("pypi"))["reason"] == (
        f"fastmace-oeq-ext was built for openequivariance {pins.oeq_binary.version(o)}, installed is {o}")


def test_our_copy_of_fastmaces_rule_agrees_with_fastmace(cp311_wheel):
    """The doctor falls back to decision.consumer_refusal() where FastMACE's code cannot be imported: it must
    give FastMACE's own answer, word for word."""
    from fastmace_oeq_ext.decision import consumer_refusal
    from fastmace_oeq_ext.manifest import Manifest
    pins = P.load()
    files = consumer.wheel_files(cp311_wheel)
    manifest = Manifest.from_json(files["fastmace_oeq_ext/manifest.json"].decode())
    t, ct, o = pins.matrix.torch_version, pins.matrix.consumer_torch, pins.oeq.version
    for torch, oeq in ((ct, o), (t, o), ("9.9.9+cu130", o), (ct, pins.oeq_binary.version(o))):
        theirs = consumer.ask(files, "3.11", pins.for_variant("pypi"), torch=torch, oeq=oeq)
        ours = consumer_refusal(manifest, {"torch_distribution": torch, "oeq_version": oeq,
                                           "python_tag": "cp311", "system": "Linux", "machine": "x86_64"})
        assert ours == theirs["reason"], (torch, oeq, ours, theirs)


def test_verify_and_publish_refuse_a_wheel_fastmace_refuses(cp311_wheel, tmp_path):
    """A wheel whose manifest FastMACE cannot accept fails the gate, with FastMACE's reason."""
    from oeq_wheels.ext.gate import verify_wheel
    pins = P.load()
    t, ct = pins.matrix.torch_version, pins.matrix.consumer_torch
    bad = tmp_path / cp311_wheel.name
    with zipfile.ZipFile(cp311_wheel) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "fastmace_oeq_ext/manifest.json":
                data = data.replace(f'"{ct}"'.encode(), f'"{t}"'.encode())  # PyPI's torch version: refused
            dst.writestr(info, data)
    from wheel.wheelfile import WheelFile  # rewrite RECORD so that only the manifest's content is wrong
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    with zipfile.ZipFile(bad) as zf:
        zf.extractall(fixed)
    bad.unlink()
    with WheelFile(bad, "w") as wf:
        wf.write_files(str(fixed))
    v = verify_wheel(bad, twine=False)
    assert any(p.startswith(f"{pins.consumer.label} would not use this wheel with torch {ct} and openequivariance "
                            f"{pins.oeq.version}: fastmace-oeq-ext was built for torch {t}, installed is {ct}")
               for p in v.problems), v.problems


def test_fastmaces_check_runs_a_cpython_that_finds_its_libpython_only_through_ld_library_path(cp311_wheel, tmp_path,
                                                                                            monkeypatch):
    """setup-python's shared CPythons on GitHub's runner need LD_LIBRARY_PATH (make rehearse-ci found the gate's
    FastMACE check failing there): the check's clean environment keeps it."""
    from oeq_wheels.inputs import pythons
    real = pythons.find("3.11")
    shared = tmp_path / "python3.11"
    shared.write_text('#!/bin/sh\n[ "$LD_LIBRARY_PATH" = /the/libpython/dir ] || { echo "python3.11: error while '
                      'loading shared libraries: libpython3.11.so.1.0: cannot open shared object file" >&2; '
                      f'exit 127; }}\nexec {real.executable} "$@"\n')
    shared.chmod(0o755)
    monkeypatch.setattr(pythons, "find", lambda v: pythons.Interpreter(v, real.full_version, str(shared), real.include))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/the/libpython/dir")
    pins = P.load()
    assert consumer.problems(consumer.wheel_files(cp311_wheel), "3.11", pins.for_variant("pypi")) == []
