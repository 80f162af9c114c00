"""The cached test venv: torch of the release matrix on CPython 3.11 (its wheel lies on
local disk here), plus OEq's Python package and a fastmace-oeq-ext wheel on demand.
Shared by the tests and the benchmark so that both use the same venv and versions."""
from __future__ import annotations

import shutil
from pathlib import Path

from . import proc, pythons
from .oeq import wheel as oeqpy
from .pins import Pins


def torch_venv(pins: Pins, cache: Path, version: str = "3.11") -> Path:
    """cache/venvs/torch-<ver>-cpXY with the pinned torch; made once (~5.5 GB), then reused."""
    interp = pythons.find(version)
    venv = cache / "venvs" / f"torch-{pins.matrix.torch_version}-{interp.cp_tag}"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        proc.run([interp.executable, "-m", "venv", str(venv)], check=True)
        proc.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"torch=={pins.matrix.torch_version}"], check=True)
        (venv / ".complete").touch()
    return venv


def install_oeq_stack(venv: Path, pins: Pins, cache: Path, wheels: list[Path], workdir: Path) -> None:
    """OEq 0.7.0's dependencies and its Python package (pure wheel from the sdist), then `wheels`,
    all without resolving against torch, which is already there."""
    py = str(venv / "bin" / "python")
    oeq_whl = oeqpy.build_pure(pins, workdir, cache)
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    proc.run(pip + ["numpy", "jinja2", "packaging", "setuptools", "ninja", f"pybind11=={pins.pybind11.version}"],
                   check=True)
    proc.run(pip + ["--no-deps", "--force-reinstall", str(oeq_whl), *map(str, wheels)], check=True)
