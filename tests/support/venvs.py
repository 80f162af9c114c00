"""The suite's own venvs, over oeq_wheels/checks/venvs.py's cached torch venv (which the benchmark shares) and its
pip and uv environments: a throwaway hard-link copy of a cached venv (overlay), torch as PyPI serves it, whole or
for a load-only check (pypi_torch_venv), that venv under PyTorch's index's version (consumer_venv), and another
architecture's under emulation. Only the tests make these; no verb of oeq_wheels does."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from oeq_wheels import proc
# The product's cached-venv bookkeeping (made once under a lock, reused only as made), so that these venvs live in
# the same cache (cache/venvs) under the same rules.
from oeq_wheels.checks.venvs import CONSUMER_LOCK, _cached, _done, site_packages, uv_env
from oeq_wheels.files import sha256_file
from oeq_wheels.inputs import fetch, pythons
from oeq_wheels.pins import Pins


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


def consumer_venv(pins: Pins, cache: Path, version: str = "3.11") -> Path:
    """cache/venvs/fastmace-torch-<consumer_torch>-cpXY: torch as FastMACE's README installs it (PyTorch's
    cu130 index, the matrix's consumer_torch), OEq's import-time dependencies (requirements/consumer.txt) and the
    pinned consumer (FastMACE and filelock), all by hash; made once, then reused. OEq and fastmace-oeq-ext
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
    (FastMACE and filelock), installed with uv (its cache makes a second venv of the same wheels cheap);
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
    from oeq_wheels.checks import emulated
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
