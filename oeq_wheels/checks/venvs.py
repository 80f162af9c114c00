"""The cached test venv: torch of the release matrix on CPython 3.11 (its wheel lies on
local disk here), plus OEq's Python package and a fastmace-oeq-ext wheel on demand.
Shared by the tests and the benchmark so that both use the same venv and versions."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .. import proc
from ..inputs import fetch, pythons
from ..files import locked, sha256_file
from ..oeq import wheel as oeqpy
from ..pins import Pins

REPO = Path(__file__).resolve().parents[2]
CONSUMER_LOCK = REPO / "requirements" / "consumer.txt"
# PyPI as uv names its default index. uv keys its cache by the index's URL as written: "https://pypi.org/simple/"
# (with the slash) is another index to it, and every wheel installed through it would be stored a second time.
UV_PYPI = "https://pypi.org/simple"
# The test suite's kept mirror of PyPI (tests/support/pypi_mirror.py), where one runs: its simple index URL. The
# verbs the suite runs (install-matrix, clean-install, the variant index's check) install through it.
MIRROR_ENV = "OEQ_WHEELS_PYPI_MIRROR"


def mirror_url() -> str | None:
    """The running session's mirror of PyPI (its simple index URL), or None where installs go to PyPI directly."""
    value = os.environ.get(MIRROR_ENV, "")
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


def overlay(base: Path, dest: Path) -> Path:
    """A throwaway copy at `dest` of the cached venv `base`, its files hard links (torch's 5 GB in seconds, no
    bytes copied; a plain copy where `dest` is on another file system). It has base's layout exactly (torch and
    the NVIDIA wheels under its own prefix, where FastMACE and our runtime look for them), and a test's installs
    and removals there never change the cache: pip and uv unlink a file before writing it, and removing a link
    leaves base's."""
    import errno
    cfg = dict(line.split(" = ", 1) for line in (base / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    ver = site_packages(base).parent.name
    proc.run([str(Path(cfg["home"]) / ver), "-m", "venv", "--without-pip", str(dest)], check=True)
    shutil.rmtree(site_packages(dest))
    try:
        shutil.copytree(site_packages(base), site_packages(dest), symlinks=True, copy_function=os.link)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.rmtree(site_packages(dest), ignore_errors=True)
        shutil.copytree(site_packages(base), site_packages(dest), symlinks=True)
    # base's scripts (pip, fastmace, ...), run by dest's interpreter.
    for script in (base / "bin").iterdir():
        target = dest / "bin" / script.name
        if target.exists() or script.is_symlink() or not script.is_file() or script.read_bytes()[:2] != b"#!":
            continue
        target.write_text(script.read_text().replace(str(base), str(dest), 1))
        target.chmod(script.stat().st_mode)
    return dest


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
    cache then holds those files once for this venv and pypi_torch_venv's. Made once, then reused."""
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


def consumer_venv(pins: Pins, cache: Path, version: str = "3.11") -> Path:
    """cache/venvs/fastmace-torch-<consumer_torch>-cpXY: torch as FastMACE's README installs it (PyTorch's
    cu130 index, 2.14.1+cu130), OEq's import-time dependencies (requirements/consumer.txt) and the pinned
    consumer (FastMACE 1.0.0 and filelock), all by hash; made once, then reused. OEq and fastmace-oeq-ext
    are the tests' to install.

    PyTorch's index cannot be reached here, and it serves PyPI's binary under another version only: this venv is
    a hard-link copy of pypi_torch_venv's (the same wheels; no second 5 GB install) whose torch .dist-info says
    the index's version (installed_reversion), as an install from that index leaves it.
    """
    interp = pythons.find(version)
    lock_key = sha256_file(CONSUMER_LOCK)[:12]  # a changed lock makes a new venv

    def make(venv: Path) -> None:
        overlay(pypi_torch_venv(pins, cache, pins.matrix.torch_version, version), venv)
        installed_reversion(site_packages(venv), "torch", pins.matrix.consumer_torch)
    return _cached(cache / "venvs" / f"fastmace-torch-{pins.matrix.consumer_torch}-{interp.cp_tag}-{lock_key}", make)


def installed_reversion(site: Path, project: str, new_version: str) -> None:
    """Give an installed distribution another version, as installing the same files under that version does: its
    .dist-info renamed, METADATA's Version and RECORD rewritten. Files are written anew, never through a hard link."""
    import base64
    import csv
    import hashlib
    import io
    (old,) = site.glob(f"{project}-*.dist-info")
    new = site / f"{project}-{new_version}.dist-info"
    new.mkdir()
    for f in old.rglob("*"):
        if f.is_file() and f.name not in ("METADATA", "RECORD"):
            (new / f.relative_to(old)).parent.mkdir(parents=True, exist_ok=True)
            os.link(f, new / f.relative_to(old))
    meta = re.sub(r"^Version: .*$", f"Version: {new_version}", (old / "METADATA").read_text(), count=1, flags=re.M)
    (new / "METADATA").write_text(meta)
    digest = base64.urlsafe_b64encode(hashlib.sha256(meta.encode()).digest()).rstrip(b"=").decode()
    rows = []
    for row in csv.reader(io.StringIO((old / "RECORD").read_text())):
        if row and row[0].startswith(old.name + "/"):
            row[0] = new.name + row[0][len(old.name):]
            if row[0] == f"{new.name}/METADATA":
                row[1:] = [f"sha256={digest}", str(len(meta.encode()))]
        rows.append(row)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (new / "RECORD").write_text(out.getvalue())
    shutil.rmtree(old)


# What a check that loads torch and runs nothing of CUDA leaves out: NVIDIA's wheels (and cuda-toolkit, which names
# them), and Triton, the compiler torch imports only when asked to compile (torch.compile, FastMACE's kernels).
LOAD_ONLY_LEFT_OUT = re.compile(r"(nvidia-|cuda-toolkit\b|triton\b)", re.I)
# Kept: the CUDA libraries OEq's extension NEEDS (cudart, NVRTC, cuBLAS), which FastMACE's runtime also looks for
# before OEq loads (fastmace.kernels._oeq_runtime, CUDA 13's in nvidia/cu13), by their wheels' names (a CUDA 12
# torch's nvidia-*-cu12 too: every line loads beside its real libraries) and as cuda-toolkit's extras.
RUNTIME_WHEEL = re.compile(r"nvidia-(cuda-runtime|cuda-nvrtc|cublas)(-cu1[23])?(?![\w-])", re.I)
RUNTIME_EXTRAS = ("cudart", "nvrtc", "cublas")
TOOLKIT = re.compile(r"cuda-toolkit\[([^\]]*)\]", re.I)


def load_only_requirements(metadata: str) -> list[str]:
    """A distribution's Requires-Dist lines (markers kept, for the installer to judge) without what LOAD_ONLY_LEFT_OUT
    names, but NVIDIA's wheels FastMACE's runtime looks for (RUNTIME_WHEEL; cuda-toolkit's extras narrowed to
    RUNTIME_EXTRAS)."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        toolkit = TOOLKIT.match(req)
        if toolkit:
            kept = [e for e in toolkit.group(1).split(",") if e.strip() in RUNTIME_EXTRAS]
            if kept:
                out.append(TOOLKIT.sub(f"cuda-toolkit[{','.join(kept)}]", req, count=1))
        elif RUNTIME_WHEEL.match(req) or not LOAD_ONLY_LEFT_OUT.match(req):
            out.append(req)
    return out


def load_only_requirements_file(site: Path, dest: Path) -> Path:
    """dest/torch-requirements-load-only.txt: load_only_requirements of the torch installed (--no-deps) in site."""
    (meta,) = site.glob("torch-*.dist-info/METADATA")
    rest = dest / "torch-requirements-load-only.txt"
    rest.write_text("".join(f"{r}\n" for r in load_only_requirements(meta.read_text())))
    return rest


def pypi_torch_venv(pins: Pins, cache: Path, torch_version: str, version: str = "3.11",
                    index_url: str | None = None, transient: Path | None = None, whole: bool = True) -> Path:
    """cache/venvs/pypi-torch-<torch_version>-cpXY-<lock>: torch as `pip install torch==X` gets it from PyPI
    (or `index_url`), OEq's import-time dependencies (requirements/consumer.txt) and the pinned consumer
    (FastMACE 1.0.0 and filelock), installed with uv (its cache makes a second venv of the same wheels cheap);
    made once, then reused. OEq and fastmace-oeq-ext are the tests' to install.

    transient: a folder that then holds the venv and uv's cache of its wheels, both the caller's to delete: for a
    torch only one test uses (each is ~5 GB; kept, five of them would be 20 GB of disk for seconds of install).
    whole=False: torch and its other requirements, of NVIDIA's wheels only those OEq's extension NEEDS (cudart,
    NVRTC, cuBLAS of the torch's CUDA line; cuDNN, NCCL, cuSPARSE(Lt), cuFFT, cuSOLVER, cuRAND, NVSHMEM and the rest,
    about 2 GB, neither fetched nor held), without Triton (~0.2 GB), for a check that loads torch's CUDA libraries and
    calls none of them and compiles nothing: loader_stubs stands in for the missing libraries (load_only_requirements)."""
    import sys
    interp = pythons.find(version)
    lock_key = sha256_file(CONSUMER_LOCK)[:12]

    def make(venv: Path) -> None:
        files = fetch.ensure(list(pins.consumer.wheels), cache)
        env = uv_env(transient / "uv-cache" if transient else None)
        uv = [sys.executable, "-m", "uv"]
        py = str(venv / "bin" / "python")
        proc.run(uv + ["venv", "-q", "--seed", "--python", interp.executable, str(venv)], check=True, env=env)
        index = ["--index-url", index_url] if index_url else []
        proc.run(uv + ["pip", "install", "-q", "--python", py, *([] if whole else ["--no-deps"]),
                       f"torch=={torch_version}", *index], check=True, env=env)
        if not whole:  # then torch's requirements that a load-only check uses
            rest = load_only_requirements_file(site_packages(venv), venv)
            proc.run(uv + ["pip", "install", "-q", "--python", py, "-r", str(rest), *index], check=True, env=env)
        proc.run(uv + ["pip", "install", "-q", "--python", py, "--no-deps", "--require-hashes", "-r",
                       str(CONSUMER_LOCK)], check=True, env=env)
        proc.run(uv + ["pip", "install", "-q", "--python", py, "--no-deps",
                       *(str(files[w.file]) for w in pins.consumer.wheels)], check=True, env=env)
    if not whole and not transient:
        raise ValueError("a venv without NVIDIA's wheels is a test's own (transient): the shared ones are whole")
    if transient:  # the caller's own folder: nothing to share or reuse
        shutil.rmtree(transient / "venv", ignore_errors=True)
        make(transient / "venv")
        return _done(transient / "venv")
    return _cached(cache / "venvs" / f"pypi-torch-{torch_version}-{interp.cp_tag}-{lock_key}", make)


def emulated_pypi_torch_venv(pins: Pins, cache: Path, torch_version: str, arch, python: str,
                             dest: Path, uv_cache: Path | None = None,
                             whole: bool = True) -> tuple[list[str], Path]:
    """pypi_torch_venv's contents for another architecture: a venv of the emulated CPython X.Y of `arch` at dest
    (oeq_wheels.checks.emulated), filled for that platform by uv (hard links into its cache: a few seconds).
    Not cached: it is the test's own. uv_cache: uv's cache for it (default: uv's own). whole=False: as
    pypi_torch_venv's. Returns (the command that runs its interpreter under qemu, its site-packages)."""
    import sys
    from . import emulated
    runner, site = emulated.venv(arch, python, emulated.rootfs(arch, python, cache), dest)
    files = fetch.ensure(list(pins.consumer.wheels), cache)
    env = uv_env(uv_cache)
    target = [sys.executable, "-m", "uv", "pip", "install", "-q", "--target", str(site), "--python-platform",
              f"{arch.name}-{arch.platform_tag.rsplit('_', 1)[0]}", "--python-version", python]
    proc.run(target + [*([] if whole else ["--no-deps"]), f"torch=={torch_version}"], check=True, env=env)
    if not whole:  # then torch's requirements that a load-only check uses (as pypi_torch_venv's)
        proc.run(target + ["-r", str(load_only_requirements_file(site, dest))], check=True, env=env)
    proc.run(target + ["--no-deps", "--require-hashes", "-r", str(CONSUMER_LOCK)], check=True, env=env)
    proc.run(target + ["--no-deps", *(str(files[w.file]) for w in pins.consumer.wheels)], check=True, env=env)
    return runner, site
