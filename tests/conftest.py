"""Shared fixtures: the pipeline's cache, a real cp311 build, and a torch 2.14.1 venv."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oeq_wheels import build, pins as pins_mod, stub  # noqa: E402


def run_cli(*args, env=None, cwd=None):
    e = dict(os.environ, PYTHONPATH=str(REPO))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "oeq_wheels", *args], capture_output=True, text=True,
                          env=e, cwd=cwd or REPO)


@pytest.fixture(scope="session")
def cache() -> Path:
    return build.default_cache()


@pytest.fixture(scope="session")
def fresh_object_cache(tmp_path_factory, cache) -> Path:
    """A cache sharing downloads and unpacked inputs but with no compiled objects,
    so that a build in it really runs the compiler."""
    root = tmp_path_factory.mktemp("cache")
    for sub in ("downloads", "extract"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
        (root / sub).symlink_to(cache / sub)
    return root


@pytest.fixture(scope="session")
def cp311_wheel(tmp_path_factory, fresh_object_cache) -> Path:
    """A wheel built from scratch (real compile) for CPython 3.11."""
    out = tmp_path_factory.mktemp("wheels")
    rows, failures = build.run(out, ["3.11"], cache=fresh_object_cache)
    assert not failures, failures
    (row,) = rows
    return out / row["wheel"]


@pytest.fixture(scope="session")
def torch_venv(cache) -> Path:
    """A venv with torch 2.14.1 (CUDA 13.0 build) for CPython 3.11; made once, kept in the cache."""
    pins = pins_mod.load()
    from oeq_wheels import pythons
    interp = pythons.find("3.11")
    venv = cache / "venvs" / f"torch-{pins.matrix.torch_version}-cp311"
    py = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([interp.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"torch=={pins.matrix.torch_version}"], check=True)
        (venv / ".complete").touch()
    return venv


@pytest.fixture(scope="session")
def libcuda_stub(tmp_path_factory, cp311_wheel) -> Path:
    """A directory with a stub libcuda.so.1 made from the shipped library's own driver symbols."""
    import zipfile
    d = tmp_path_factory.mktemp("stub")
    with zipfile.ZipFile(cp311_wheel) as zf:
        lib = d / "lib.so"
        lib.write_bytes(zf.read("fastmace_oeq_ext/libtorch_tp_jit.so"))
    stub.make_stub(stub.undefined_driver_symbols([lib], dynamic=True), d / "lib")
    return d / "lib"


@pytest.fixture(scope="session")
def oeq_venv(torch_venv, cp311_wheel, tmp_path_factory, cache) -> Path:
    """torch_venv plus OpenEquivariance 0.7.0's Python package and the cp311 wheel."""
    from oeq_wheels import oeqpy
    py = str(torch_venv / "bin" / "python")
    out = tmp_path_factory.mktemp("oeqwheel")
    oeq_whl = oeqpy.build(pins_mod.load(), out, cache)
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # OEq 0.7.0's own dependencies; its wheel and ours go in without resolving (torch is there).
    subprocess.run(pip + ["numpy", "jinja2", "packaging", "setuptools", "ninja", "pybind11==3.1.0"], check=True)
    subprocess.run(pip + ["--no-deps", "--force-reinstall", str(oeq_whl), str(cp311_wheel)], check=True)
    return torch_venv


@pytest.fixture
def sentinels(tmp_path) -> tuple[Path, Path]:
    """A bin directory whose g++, c++, ninja and nvcc log their call and fail; and the log."""
    d, log = tmp_path / "sentinel-bin", tmp_path / "sentinel.log"
    d.mkdir()
    for tool in ("g++", "c++", "ninja", "nvcc"):
        p = d / tool
        p.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\necho "sentinel: {tool} must not run" >&2\nexit 1\n')
        p.chmod(0o755)
    return d, log
