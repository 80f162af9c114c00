"""Unpack the parts of the pinned inputs that a build reads, without installing anything.

A CUDA torch install is ~5.5 GB and `import torch` needs all of it; the build
needs only torch's headers, the libraries it links against and two text files.
Each tree is unpacked once per input hash into the cache (build in a temporary
directory, then rename), so concurrent or interrupted runs never see half a tree,
and carries a record of its content that every run checks before using it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import threading
import zipfile
import zlib
from pathlib import Path

from . import link_stub_store
from ..errors import InputError
from ..files import stat_key, temp_prefix, write_atomic
from ..pins import Pinned
from ..progress import warn

TORCH_TEXT_FILES = ("torch/version.py", "torch/utils/cpp_extension.py")


TREE_RECORD = ".oeq-wheels-tree.json"    # what was unpacked: {path: [size, crc32]}, written once
TREE_STAMPS = ".oeq-wheels-stamps.json"   # when each file was last checked: {path: [ino, size, mtime_ns, ctime_ns]}


def _crc32(path: str | Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            crc = zlib.crc32(chunk, crc)
    return crc


def _files(root: Path) -> dict[str, str]:
    """Relative path -> path of every file under root (strings, not Paths: ~10k files per torch tree, every run)."""
    out: dict[str, str] = {}
    stack = [(str(root), "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            for e in it:
                rel = prefix + e.name
                if e.is_dir(follow_symlinks=False):
                    stack.append((e.path, rel + "/"))
                elif rel not in (TREE_RECORD, TREE_STAMPS):
                    out[rel] = e.path
    return out


def _write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, separators=(",", ":")))


def _record_tree(root: Path) -> None:
    """Write the content record and the stamps of a freshly unpacked tree."""
    files = _files(root)
    record, stamps = {}, {}
    for rel, path in files.items():
        st = os.stat(path)
        record[rel] = [st.st_size, _crc32(path)]
        stamps[rel] = stat_key(st)
    _write_json(root / TREE_RECORD, record)
    _write_json(root / TREE_STAMPS, stamps)


def tree_problem(root: Path) -> str | None:
    """Why a cached tree cannot be used, or None.

    Every file must be there, nothing else, and each must hold the CRC-32 recorded when
    it was unpacked. Reading ~3 GB of trees on every build would take longer than the
    build, so a file is re-read only when its stat_key (inode, size, mtime, ctime)
    differs from when it was last checked.
    """
    try:
        record = json.loads((root / TREE_RECORD).read_text())
    except (OSError, ValueError):
        return "it has no content record (unpacked by an older oeq-wheels, or interrupted)"
    try:
        stamps = json.loads((root / TREE_STAMPS).read_text())
    except (OSError, ValueError):
        stamps = {}
    files = _files(root)
    if files.keys() != record.keys():
        odd = sorted(files.keys() ^ record.keys())
        return f"{len(odd)} file(s) missing or added, e.g. {odd[0]}"
    changed = {}
    for rel, path in files.items():
        st = os.stat(path)
        key = stat_key(st)
        if stamps.get(rel) == key:
            continue
        size, crc = record[rel]
        if st.st_size != size or _crc32(path) != crc:
            return f"{rel} differs from what was unpacked"
        changed[rel] = key
    if changed:
        _write_json(root / TREE_STAMPS, {**stamps, **changed})
    return None


_checked: set[Path] = set()
_tree_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(key, table: dict) -> threading.Lock:
    with _locks_guard:
        return table.setdefault(key, threading.Lock())


def _atomic_tree(target: Path, fill) -> Path:
    """Create target by calling fill(tmpdir) and renaming; reuse it while it checks out.

    A damaged tree is moved aside and unpacked again from its (sha256-verified) archive.
    """
    with _lock_for(target, _tree_locks):  # the Pythons of one build share trees: check each once
        if target in _checked:
            return target
        if target.is_dir():
            problem = tree_problem(target)
            if problem is None:
                _checked.add(target)
                return target
            warn(f"cached {target.name} cannot be used: {problem}; unpacking it again")
            aside = target.with_name(temp_prefix(target.name) + "damaged")
            try:
                os.rename(target, aside)
            except FileNotFoundError:  # another run moved it first
                pass
            shutil.rmtree(aside, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=temp_prefix(target.name)))
        try:
            try:
                fill(tmp)
            except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as exc:
                raise InputError(f"cannot unpack the archive for {target.name}: {exc}; remove it from "
                                 f"{target.parent.parent / 'downloads'} and run again to download it afresh") from None
            _record_tree(tmp)
            try:
                os.rename(tmp, target)
            except OSError:  # another process finished first
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _checked.add(target)
        return target


_locks: dict[str, threading.Lock] = {}


def _blob_lock(name: str) -> threading.Lock:
    return _lock_for(name, _locks)


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
            if blob.is_file() and (blob.stat().st_size != info.file_size or _crc32(blob) != info.CRC):
                warn(f"cached {blob.name} is damaged; extracting it again")
                blob.unlink()
            if not blob.is_file():
                blobs.mkdir(parents=True, exist_ok=True)
                tmp = blob.with_name(temp_prefix(blob.name) + f"{threading.get_ident()}.tmp")
                with zf.open(info) as src, open(tmp, "wb") as dst:  # zipfile checks the CRC at the end
                    shutil.copyfileobj(src, dst, 1 << 22)
                os.replace(tmp, blob)
        os.link(blob, dest)
        return
    with zf.open(info) as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def _unpack_wheel(wheel, wanted, root: Path, blobs: Path | None, pin: Pinned, cache: Path) -> None:
    """Every member of a wheel that satisfies wanted(name), into root, the libraries the pins stub as their link
    stubs: from a downloaded wheel (a path), or fetched by member (a fetch.Remote; it falls back to the whole wheel
    where members cannot be had)."""
    if not isinstance(wheel, (str, Path)):
        wheel = wheel.unpack(wanted, root)
        if wheel is None:
            return
    stubbed = link_stub_store.stubbed(pin)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not wanted(info.filename):
                continue
            lib = info.filename.rsplit("/", 1)[-1]
            if lib in stubbed:
                dest = root / info.filename
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(link_stub_store.from_zip(zf, info, pin, stubbed[lib], cache), dest)
            else:
                _extract_member(zf, info, root, blobs)


def _stubs_key(pins) -> str:
    """A tree name's part for the link stubs in it (trees of the same wheel with libraries or stubs differ)."""
    digests = [s.digest for pin in pins for s in link_stub_store.stubbed(pin).values()]
    return "-stubs" + hashlib.sha256(" ".join(digests).encode()).hexdigest()[:8] if digests else ""


def torch_tree(wheel: Path, pin: Pinned, cache: Path, link_libs: frozenset[str]) -> Path:
    """torch/{include,lib/<link libs>,version.py,utils/cpp_extension.py} of one torch wheel."""
    blobs = cache / "extract" / "blobs"

    def wanted(name: str) -> bool:
        return (name.startswith("torch/include/") or name in TORCH_TEXT_FILES
                or (name.startswith("torch/lib/") and Path(name).name in link_libs))

    def fill(tmp: Path) -> None:
        _unpack_wheel(wheel, wanted, tmp, blobs, pin, cache)

    libs_key = hashlib.sha256(" ".join(sorted(link_libs)).encode()).hexdigest()[:8]
    return _atomic_tree(cache / "extract" / f"torch-{pin.version}-{pin.sha256[:16]}-{libs_key}"
                        f"{_stubs_key([pin])}", fill)


def cuda_tree(wheels: list[tuple[Pinned, Path]], cache: Path) -> Path:
    """One site-packages-like tree with nvidia/cu13/{include,lib} from the pinned wheels.

    Only headers and the libraries pinned for linking are taken (cublasLt, cusolver
    and cusparse libraries are large and not linked).
    """
    key = hashlib.sha256("".join(p.sha256 for p, _ in wheels).encode()).hexdigest()[:16]

    def wanted_of(pin: Pinned):
        def wanted(name: str) -> bool:
            parts = name.split("/")
            return parts[0] == "nvidia" and len(parts) >= 4 and (
                parts[2] == "include" or (parts[2] == "lib" and parts[-1] in pin.libs))
        return wanted

    def fill(tmp: Path) -> None:
        for pin, wheel in wheels:
            _unpack_wheel(wheel, wanted_of(pin), tmp, None, pin, cache)

    return _atomic_tree(cache / "extract" / f"cuda-{key}{_stubs_key([p for p, _ in wheels])}", fill)


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


def consumer_tree(wheels: list[tuple[Pinned, Path]], cache: Path) -> Path:
    """The consumer's pure wheels unpacked into one directory (their packages only), for its own verdict."""
    def fill(tmp: Path) -> None:
        for _, wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    if not info.is_dir() and ".dist-info/" not in info.filename:
                        _extract_member(zf, info, tmp, None)

    key = hashlib.sha256(" ".join(p.sha256 for p, _ in wheels).encode()).hexdigest()[:16]
    return _atomic_tree(cache / "extract" / f"{wheels[0][0].name}-{wheels[0][0].version}-{key}", fill)


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
