"""The cached test venv: torch of the release matrix on CPython 3.11 (its wheel lies on
local disk here), plus OEq's Python package and a fastmace-oeq-ext wheel on demand.
Shared by the tests and the benchmark so that both use the same venv and versions; and pip's and uv's
environment as the install checks give it. The venvs only the suite makes are tests/support/venvs.py's."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .. import proc, settings
from ..inputs import pythons
from ..files import locked
from ..oeq import wheel as oeqpy
from ..pins import Pins
from ..registry import PYPI

REPO = Path(__file__).resolve().parents[2]
CONSUMER_LOCK = REPO / "requirements" / "consumer.txt"
# PyPI as uv names its default index. uv keys its cache by the index's URL as written: "https://pypi.org/simple/"
# (with the slash) is another index to it, and every wheel installed through it would be stored a second time.
UV_PYPI = PYPI.rstrip("/")
def mirror_url() -> str | None:
    """The test session's kept mirror of PyPI (tests/support/pypi_mirror.py; its simple index URL), or None where
    installs go to PyPI directly. The verbs the suite runs (install-matrix, clean-install, the variant index's check)
    install through it."""
    value = settings.current().pypi_mirror or ""
    return value if value.startswith("http") else None


def standin_url() -> str | None:
    """The running session's stand-in index (NVIDIA's library wheels and Triton as stand-ins), or None without a
    mirror."""
    index = mirror_url()
    return index.removesuffix("simple/") + "standin/simple/" if index else None


def pypi_index() -> str:
    """PyPI as the tests' installs reach it: the session's kept mirror of it (mirror_url), else PyPI as uv spells
    it. Every install names it the same way, so that uv's cache holds each wheel once."""
    return mirror_url() or UV_PYPI


def index_env(standins: bool = False) -> dict:
    """pip's and uv's index where the session has a mirror of PyPI (nothing otherwise). uv's as UV_INDEX_URL, which
    an --index-url or UV_DEFAULT_INDEX given to uv overrides (UV_DEFAULT_INDEX would override the command line's
    --index-url). The timeouts are for a request that waits while another fetches the same 900 MB wheel.
    standins: the mirror's stand-in index (NVIDIA's library wheels and Triton as metadata-only stand-ins)."""
    mirror = standin_url() if standins else mirror_url()
    return dict(PIP_INDEX_URL=mirror, PIP_DEFAULT_TIMEOUT="600", UV_INDEX_URL=mirror,
                UV_HTTP_TIMEOUT="600") if mirror else {}


def pip_env(base: dict | None = None) -> dict:
    """An environment for pip as a new user's: without this machine's pip configuration (caps, indexes,
    find-links) and with nothing cached, from `base` (default: this process's); PyPI is the session's mirror where
    it has one (index_env). pip's cache would keep torch's wheels (~3 GB per architecture) beside every install of
    them; the mirror's store is the one copy of what PyPI sent, and uv's cache the one the venvs share."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    env.update(index_env())
    return env


def site_packages(venv: Path) -> Path:
    (lib,) = (venv / "lib").glob("python3.*")
    return lib / "site-packages"


def _contents(venv: Path) -> str:
    """What a cached venv holds: the index its wheels came through (uv's cache keeps them under that index's URL:
    one made through another spelling of PyPI would have its stack stored twice), then its distributions
    (name-version), one per line."""
    return f"index {pypi_index()}\n" + "".join(f"{d.name}\n" for d in sorted(site_packages(venv).glob("*.dist-info")))


def _ready(venv: Path) -> bool:
    """A cached venv is reused only as it was made: .complete records its index and distributions, and a venv
    someone installed into or removed from since (tests install into overlays, never into these), or one made through
    another index, is made again; so is one whose interpreter is gone (the CPython it was made from removed or
    moved)."""
    done = venv / ".complete"
    return done.is_file() and (venv / "bin" / "python").exists() and done.read_text() == _contents(venv)


def _done(venv: Path) -> Path:
    (venv / ".complete").write_text(_contents(venv))
    return venv


def _cached(venv: Path, make) -> Path:
    """The cached venv at `venv`: reused where ready, else made by make(venv) under its lock, so that processes
    sharing the cache (the test suite's workers) make it once and never remove it under each other."""
    with locked(venv):
        if _ready(venv):
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        make(venv)
        return _done(venv)


def uv_env(cache: Path | None = None) -> dict:
    """uv as a new user's (no configuration, no UV_ variables of this process), with its own cache where given."""
    env = {k: v for k, v in pip_env().items() if not k.startswith("UV_") and k != "VIRTUAL_ENV"}
    env.update(index_env(), UV_NO_CONFIG="1")
    if cache:
        env["UV_CACHE_DIR"] = str(cache)
    return env


def torch_venv(pins: Pins, cache: Path, version: str = "3.11") -> Path:
    """cache/venvs/torch-<ver>-cpXY: the release matrix's torch from the registry as `pip install torch==X` gets
    it, checked against the pinned wheel's sha256, with the NVIDIA wheels it requires; installed with uv, whose
    cache then holds those files once for this venv and the suite's pypi_torch_venv's (tests/support/venvs.py).
    Made once, then reused."""
    import sys
    interp = pythons.find(version)
    whl = pins.matrix.torch_wheel(interp.cp_tag)

    def make(venv: Path) -> None:
        uv, env = [sys.executable, "-m", "uv"], uv_env()
        proc.run(uv + ["venv", "-q", "--seed", "--python", interp.executable, str(venv)], check=True, env=env)
        req = venv / "torch-requirement.txt"  # uv verifies a hash it is given, without one for every dependency
        req.write_text(f"torch=={whl.version} --hash=sha256:{whl.sha256}\n")
        proc.run(uv + ["pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-r", str(req)],
                 check=True, env=env)
    return _cached(cache / "venvs" / f"torch-{pins.matrix.torch_version}-{interp.cp_tag}", make)


def install_oeq_stack(venv: Path, pins: Pins, cache: Path, wheels: list[Path], workdir: Path) -> None:
    """OEq 0.7.0's dependencies and its Python package (pure wheel from the sdist), then `wheels`,
    all without resolving against torch, which is already there."""
    py = str(venv / "bin" / "python")
    oeq_whl = oeqpy.build_pure(pins, workdir, cache)
    pip = [py, "-m", "pip", "install", "-q", "--no-deps"]
    proc.run(pip + ["--require-hashes", "-r", str(CONSUMER_LOCK)], check=True, env=pip_env())
    proc.run(pip + ["--force-reinstall", str(oeq_whl), *map(str, wheels)], check=True, env=pip_env())
