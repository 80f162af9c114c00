"""Unpack the parts of the pinned inputs that a build reads, without installing anything.

A CUDA torch install is ~5.5 GB and `import torch` needs all of it; the build
needs only torch's headers, the libraries it links against and two text files.
Each tree is unpacked once per input hash into the cache (build in a temporary
directory, then rename), so concurrent or interrupted runs never see half a tree.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path

from .pins import Pinned

TORCH_TEXT_FILES = ("torch/version.py", "torch/utils/cpp_extension.py")


def _atomic_tree(target: Path, fill) -> Path:
    """Create target by calling fill(tmpdir) and renaming; reuse it if it exists."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        fill(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _blob_lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


def _extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, root: Path, blobs: Path | None) -> None:
    """Extract one member; large identical members (same name, size, CRC) share one blob.

    The torch wheels of different Pythons carry the same ~900 MB of libtorch;
    hard links keep one copy on disk and skip its decompression for later Pythons.
    """
    dest = root / info.filename
    dest.parent.mkdir(parents=True, exist_ok=True)
    if blobs is not None and info.file_size > (8 << 20):
        blob = blobs / f"{Path(info.filename).name}-{info.file_size}-{info.CRC:08x}"
        with _blob_lock(blob.name):  # Pythons built in parallel threads want the same blobs
            if not blob.is_file():
                blobs.mkdir(parents=True, exist_ok=True)
                tmp = blob.with_name(f".{blob.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                with zf.open(info) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
                os.replace(tmp, blob)
        os.link(blob, dest)
        return
    with zf.open(info) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def torch_tree(wheel: Path, pin: Pinned, cache: Path, link_libs: frozenset[str]) -> Path:
    """torch/{include,lib/<link libs>,version.py,utils/cpp_extension.py} of one torch wheel."""
    blobs = cache / "extract" / "blobs"

    def fill(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if info.is_dir():
                    continue
                if (name.startswith("torch/include/") or name in TORCH_TEXT_FILES
                        or (name.startswith("torch/lib/") and Path(name).name in link_libs)):
                    _extract_member(zf, info, tmp, blobs)

    libs_key = hashlib.sha256(" ".join(sorted(link_libs)).encode()).hexdigest()[:8]
    return _atomic_tree(cache / "extract" / f"torch-{pin.version}-{pin.sha256[:16]}-{libs_key}", fill)


def cuda_tree(wheels: list[tuple[Pinned, Path]], cache: Path) -> Path:
    """One site-packages-like tree with nvidia/cu13/{include,lib} from the pinned wheels.

    Only headers and the libraries pinned for linking are taken (cublasLt, cusolver
    and cusparse libraries are large and not linked).
    """
    key = hashlib.sha256("".join(p.sha256 for p, _ in wheels).encode()).hexdigest()[:16]

    def fill(tmp: Path) -> None:
        for pin, wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    parts = info.filename.split("/")
                    if info.is_dir() or parts[0] != "nvidia" or len(parts) < 4:
                        continue
                    if parts[2] == "include" or (parts[2] == "lib" and parts[-1] in pin.libs):
                        _extract_member(zf, info, tmp, None)

    return _atomic_tree(cache / "extract" / f"cuda-{key}", fill)


def pybind11_include(wheel: Path, pin: Pinned, cache: Path) -> Path:
    def fill(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith("pybind11/include/") and not info.is_dir():
                    _extract_member(zf, info, tmp, None)

    return _atomic_tree(cache / "extract" / f"pybind11-{pin.version}-{pin.sha256[:16]}", fill) / "pybind11" / "include"


def nanobind_tree(wheel: Path, pin: Pinned, cache: Path) -> Path:
    """nanobind's include/, src/ and ext/robin_map/include/: what nanobind_add_module compiles."""
    keep = ("nanobind/include/", "nanobind/src/", "nanobind/ext/robin_map/include/")

    def fill(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith(keep) and not info.is_dir():
                    _extract_member(zf, info, tmp, None)

    return _atomic_tree(cache / "extract" / f"nanobind-{pin.version}-{pin.sha256[:16]}", fill) / "nanobind"


def oeq_tree(sdist: Path, pin: Pinned, cache: Path) -> Path:
    """The unpacked OEq sdist (its extension sources, Python package and LICENSE)."""
    def fill(tmp: Path) -> None:
        with tarfile.open(sdist) as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(tmp, filter="data")
            else:  # Pythons before 3.11.4: the same safety by hand
                for m in tf.getmembers():
                    if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
                        raise RuntimeError(f"refusing unsafe sdist member {m.name!r}")
                tf.extractall(tmp)

    root = _atomic_tree(cache / "extract" / f"oeq-{pin.version}-{pin.sha256[:16]}", fill)
    return root / f"openequivariance-{pin.version}"
