"""A real build (compile, link, wheel) and the bad-input cases of the build command."""
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from support.builds import private_cache
from support import REPO
from support.cli import run_cli
from fastmace_oeq_ext.manifest import Manifest
from oeq_wheels.ext import assemble
from oeq_wheels import build, output, pins as P, elf, product, tags
from oeq_wheels.errors import UsageError
from oeq_wheels.files import default_cache
from oeq_wheels.output import extra_dir


def test_wheel_contents_and_metadata(cp311_wheel):
    pins = P.load()
    assert cp311_wheel.name == f"fastmace_oeq_ext-{pins.version}-cp311-cp311-{pins.platform_tag}.whl"
    with zipfile.ZipFile(cp311_wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"fastmace_oeq_ext-{pins.version}.dist-info/METADATA").decode()
        manifest = Manifest.from_json(zf.read("fastmace_oeq_ext/manifest.json").decode())
        lib = zf.read("fastmace_oeq_ext/libtorch_tp_jit.so")
        compiler = zf.read("fastmace_oeq_ext/BUILD_COMPILER.txt").decode()
    # The runtime is a package of several modules: all of them ship.
    assert {f"fastmace_oeq_ext/{n}" for n in assemble.package_files(P.load())} <= names
    assert {"fastmace_oeq_ext/decision.py", "fastmace_oeq_ext/manifest.py", "fastmace_oeq_ext/hooks.py"} <= names
    assert f"Requires-Dist: torch=={pins.matrix.torch_version}\n" in meta
    assert f"Requires-Dist: openequivariance=={pins.oeq.version}\n" in meta
    assert "Requires-Python: ==3.11.*" in meta and "License-Expression: MIT AND BSD-3-Clause" in meta
    # The PyPI page: an install line (and how to get OEq without a compiler), links to the project's sources.
    assert f"\n    pip install fastmace-oeq-ext --extra-index-url {pins.index_url(pins.oeq_binary.name)}\n" in meta
    assert "Project-URL: OpenEquivariance, https://github.com/PASSIONLab/OpenEquivariance" in meta
    assert manifest.sha256 == hashlib.sha256(lib).hexdigest()
    assert (manifest.torch_version, manifest.torch_local, manifest.cuda, manifest.cxx11_abi) == (pins.matrix.torch_version, pins.matrix.torch_local, pins.matrix.cuda, 1)
    assert manifest.python == "cp311" and manifest.platform == "manylinux_2_28_x86_64"
    assert manifest.oeq_sdist.sha256 == P.load().oeq.sha256 and len(manifest.cuda_wheels) == len(pins.matrix.nvidia)
    assert manifest.compiler.startswith("GCC ") and compiler == manifest.compiler_record() and "-std=c++20" in compiler
    # Each fact once (schema 4): a field of its own, or post1's pybind11, which FastMACE reads.
    keys = set(json.loads(manifest.to_json()))
    assert keys == {"schema", "pybind11", *(f.name for f in dataclasses.fields(Manifest))}
    with zipfile.ZipFile(cp311_wheel) as zf:
        assert zf.read("fastmace_oeq_ext/manifest.json").decode() == manifest.to_json()


def test_library_links_right_and_is_clean(cp311_wheel):
    with zipfile.ZipFile(cp311_wheel) as zf:
        lib = zf.read("fastmace_oeq_ext/libtorch_tp_jit.so")
    facts = elf.elf_facts(lib)
    pins = P.load()
    assert facts["runpath"] == "$ORIGIN/../torch/lib:$ORIGIN/../nvidia/cu13/lib"
    assert pins.torch_needed | pins.cuda_needed <= set(facts["needed"])
    assert not any(n.startswith("libpython") for n in facts["needed"])
    assert facts["stripped"]
    for p in (str(Path.home()), str(default_cache()), "/tmp/", str(REPO)):
        assert p.encode() not in lib, p


def test_verify_cli_passes_and_auditwheel_proves_2_28(cp311_wheel):
    r = run_cli("verify", str(cp311_wheel))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout and "manylinux_2_2" in r.stdout
    report = tags.audit(cp311_wheel)
    tag, problems = tags.proven_tag(report, tags.external_ok(P.load()))
    assert not problems and tags.manylinux_version(tag) <= (2, 28)


def test_licence_equals_the_sdist(cp311_wheel, cache):
    from oeq_wheels import pins as P
    from oeq_wheels.inputs import unpack
    pins = P.load()
    root = unpack.oeq_tree(cache / "downloads" / pins.oeq.file, pins.oeq, cache)
    sdist_license = (root / "LICENSE").read_bytes()
    assert (REPO / "LICENSE.openequivariance").read_bytes() == sdist_license
    with zipfile.ZipFile(cp311_wheel) as zf:
        assert zf.read("fastmace_oeq_ext/LICENSE.openequivariance") == sdist_license


LOAD_SCRIPT = r"""
import importlib.util, sys, torch, fastmace_oeq_ext
path = fastmace_oeq_ext.library_path()
torch.ops.load_library(path)
spec = importlib.util.spec_from_file_location("libtorch_tp_jit", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
assert hasattr(mod, "DeviceProp") and hasattr(mod, "GPUTimer"), dir(mod)
ops = torch.ops.libtorch_tp_jit
for name in ("jit_tp_forward", "jit_tp_backward", "jit_tp_double_backward", "jit_conv_forward",
             "jit_conv_backward", "jit_conv_double_backward", "group_gemm"):
    getattr(ops, name).default  # raises if the TORCH_LIBRARY op is not registered
print("LOADED", path)
"""


def test_wheel_loads_beside_torch(cp311_wheel, torch_venv, libcuda_stub, tmp_path):
    py = torch_venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    "--disable-pip-version-check", str(cp311_wheel)], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libcuda_stub))
    r = subprocess.run([str(py), "-W", "ignore", "-c", LOAD_SCRIPT], capture_output=True, text=True, env=env, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "LOADED" in r.stdout and "site-packages/fastmace_oeq_ext/libtorch_tp_jit.so" in r.stdout
    # With a libcuda.so.1 that lacks the driver calls the load must fail: the load above really needed the stub's
    # symbols (first on the loader's path, so a machine's real driver cannot stand in for it).
    from oeq_wheels import driver_stub
    empty = driver_stub.make_stub(["cuNotADriverCall"], tmp_path / "empty").parent
    r2 = subprocess.run([str(py), "-W", "ignore", "-c", LOAD_SCRIPT], capture_output=True, text=True,
                        env=dict(os.environ, LD_LIBRARY_PATH=str(empty)), cwd="/")
    assert r2.returncode != 0 and "undefined symbol: cu" in r2.stderr, r2.stderr[-2000:]


def test_flags_match_torch_own_recipe(torch_venv, cache):
    """Our C++ standard and ABI, read from the wheel without importing torch, equal torch's own."""
    from oeq_wheels.ext import compile as cc
    from oeq_wheels import pins as P
    from oeq_wheels.inputs import unpack
    pins = P.load()
    pin = pins.matrix.torch_wheel("cp311")
    from oeq_wheels.inputs import fetch
    root = unpack.torch_tree(fetch.ensure([pin], cache)[pin.file], pin, cache, pins.torch_needed)
    code = ("import torch, torch.utils.cpp_extension as ce, inspect;"
            "src = inspect.getsource(ce._write_ninja_file_to_build_library);"
            "import re; print(re.search(r\"'-fPIC', '-std=(c\\+\\+\\d+)'\", src).group(1));"
            "print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)")
    r = subprocess.run([str(torch_venv / "bin" / "python"), "-W", "ignore", "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    std, abi, version = r.stdout.split()
    assert cc.torch_cxx_std(root) == std
    assert cc.torch_cxx11_abi(root) == int(abi)
    assert product.torch_version_info(root)["__version__"] == version


# ---- bad input ---------------------------------------------------------------

def test_outdir_created_or_refused(tmp_path):
    out = tmp_path / "a" / "b"
    assert output.prepare_outdir(out).is_dir()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="cannot create"):
        output.prepare_outdir(f / "sub")
    with pytest.raises(UsageError, match="not writable"):
        output.prepare_outdir(Path("/proc"))  # root ignores file modes; /proc refuses everyone


def test_existing_different_wheel_refused_unless_force(tmp_path, cp311_wheel, cache):
    out = tmp_path / "out"
    out.mkdir()
    squatter = out / cp311_wheel.name
    squatter.write_bytes(b"not the same wheel")
    rows, failures = build.run(build.Options(out, ["3.11"], cache=cache))
    assert "already exists with different content" in failures["fastmace-oeq-ext cp311"]
    assert squatter.read_bytes() == b"not the same wheel"
    rows, failures = build.run(build.Options(out, ["3.11"], cache=cache, force=True))
    assert not failures and squatter.read_bytes() == cp311_wheel.read_bytes()
    # The identical wheel again is fine without --force.
    rows, failures = build.run(build.Options(out, ["3.11"], cache=cache))
    assert not failures


def test_one_failing_python_leaves_no_wheel_and_fails(tmp_path, cp311_wheel, resumed_build, cache):
    # An object cache with cp311's objects only (a hard-link copy of the second build's): the wrapper says it is g++,
    # so cached cp312 objects would hide its failure.
    fresh_object_cache = private_cache(tmp_path / "cache", cache)
    shutil.copytree(resumed_build[2] / "objects", fresh_object_cache / "objects", copy_function=os.link)
    wrapper = tmp_path / "gxx"
    wrapper.write_text('#!/bin/sh\ncase "$*" in *python3.12*) echo "injected failure" >&2; exit 1;; esac\nexec g++ "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    env = {"CXX": str(wrapper), "OEQ_WHEELS_CACHE": str(fresh_object_cache)}
    # The host runner and this host's compilers (--toolchain host), so that the injected CXX is the one used.
    r = run_cli("build", "--python", "3.11,3.12", "--arch", "x86_64", "--runner", "host", "--toolchain", "host",
                str(out), env=env)
    assert r.returncode == 1, r.stderr
    assert "[fastmace-oeq-ext cp312] FAILED" in r.stderr and "injected failure" in r.stderr
    x86 = [line for line in P.load().oeq_lines if line.arch.name == "x86_64"]
    assert all(f"[openequivariance {line.key} cp312] FAILED" in r.stderr for line in x86)
    assert sorted(p.name for p in out.glob("*.whl")) == [cp311_wheel.name]
    assert sorted(p.name for p in extra_dir(out).glob("*.whl")) == \
        sorted(p.name for p in extra_dir(cp311_wheel.parent).glob("*_x86_64.whl"))
    assert not [p for p in (*out.iterdir(), *extra_dir(out).iterdir()) if p.name.endswith(".part")]
    assert "fastmace-oeq-ext cp312: FAILED" in (extra_dir(out) / "REPORT-failed.md").read_text()
    assert not (extra_dir(out) / "REPORT.md").exists()  # a failed build never writes REPORT
    assert sorted(p.name for p in out.iterdir()) == [cp311_wheel.name]  # OUTDIR: distributions only
