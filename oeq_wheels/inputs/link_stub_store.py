"""Link stubs of the pinned libraries, each made once and kept under cache/stubs/ by its view digest.

pins.toml names, for each torch and NVIDIA wheel, the digest of each linked library's dynamic-symbol view
(oeq_wheels/inputs/link_stubs.py), taken from one full download when the pin was made. The chain of trust:
- a library with pinned table places (the NVIDIA libraries keep their tables at the start) is read from the
  first bytes of its member, fetched by range (members.fetch_prefix); RECORD covers whole members only, so what
  is used is the view, and its digest must be the pinned one;
- any other (torch's libraries: patchelf moved their string tables to the end) is fetched whole, checked against
  the pinned RECORD (members.fetch), read, and removed from the member store once its stub is made;
- a whole wheel at hand (downloaded, checked against its pinned sha256) gives its libraries' stubs the same way;
- a stub is written from the view and read back: its own view must have the same digest (the writer is faithful).
In OEQ_WHEELS_FETCH=whole the build links the libraries themselves (inputs.py), which is how bench/run.py
--fetch-equal shows that stubs change no output byte.

A digest names a view, not a file, so the four CPython wheels of one torch (whose libtorch_cpu.so files differ
but export the same symbols) share one stub and fetch the library once.
"""
from __future__ import annotations

import os
import shutil
import struct
import threading
import zipfile
from pathlib import Path

from . import link_stubs, members
from ..errors import LinkStubError, MemberError
from ..files import locked_dir, sweep_stale, temp_prefix
from ..pins import Pinned, StubPin

_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def stubbed(pin: Pinned) -> dict[str, StubPin]:
    """The pin's libraries that trees hold link stubs of, by file name: all its pinned stubs, except under
    OEQ_WHEELS_FETCH=whole, where trees hold the libraries themselves (bench/run.py --fetch-equal compares)."""
    return {s.lib: s for s in pin.stubs} if members.mode() == "members" else {}


def store_path(cache: Path, sp: StubPin) -> Path:
    return cache / "stubs" / sp.digest[:2] / sp.digest / sp.lib


def _usable(path: Path, digest: str) -> bool:
    """The stored stub is there and still of its digest (read again each time a tree is made from it)."""
    try:
        return link_stubs.view_of_file(path)[0].digest() == digest
    except (OSError, ValueError, LinkStubError):
        return False


def _lock(digest: str) -> threading.Lock:
    with _guard:
        return _locks.setdefault(digest, threading.Lock())


def ensure(wheel: members.RemoteWheel, sp: StubPin, member: str, cache: Path, log=lambda s: None) -> Path:
    """The stub of member (a library of the pinned wheel on its index) with the pinned digest: stored, or made now
    from the member's first bytes or the whole member, fetched by range."""
    pin = wheel.pin
    path = store_path(cache, sp)
    # The CPython builds of one torch want the same stubs (threads), and so may two runs sharing the cache
    # (processes: the test suite's workers, two build.sh): make each once. The member fetched whole is removed once
    # its stub is made, so a second maker must never read it meanwhile.
    with _lock(sp.digest), locked_dir(path.parent):
        if _usable(path, sp.digest):
            return path
        if sp.tables:
            tables = link_stubs.Tables.from_list(list(sp.tables))
            data = members.fetch_prefix(wheel, member, tables.end, cache, log)
            view = _view(lambda: link_stubs.read_view(data, tables, sp.lib), pin, member)
        else:
            stored = members.fetch(pin, lambda n: n == member, cache, "", log, what=member, wheel=wheel)[member]
            try:
                view = _view(lambda: link_stubs.view_of_file(stored)[0], pin, member)
            finally:
                stored.unlink(missing_ok=True)  # the stub is what the build keeps; the library is ~100-500 MB
        return _store(view, pin, sp, member, path)


def from_zip(zf: zipfile.ZipFile, info: zipfile.ZipInfo, pin: Pinned, sp: StubPin, cache: Path) -> Path:
    """The stub of a library in a whole wheel at hand (downloaded and checked against its pinned sha256): stored,
    or made now from the member, read out to a temporary file and removed."""
    path = store_path(cache, sp)
    with _lock(sp.digest), locked_dir(path.parent):
        if _usable(path, sp.digest):
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent)
        tmp = path.with_name(temp_prefix(path.name) + "lib")
        try:
            with zf.open(info) as src, open(tmp, "wb") as dst:  # zipfile checks the CRC at the end
                shutil.copyfileobj(src, dst, 1 << 22)
            view = _view(lambda: link_stubs.view_of_file(tmp)[0], pin, info.filename)
        finally:
            tmp.unlink(missing_ok=True)
        return _store(view, pin, sp, info.filename, path)


def _store(view: link_stubs.View, pin: Pinned, sp: StubPin, member: str, path: Path) -> Path:
    """Write the stub of a view with the pinned digest, checked by reading it back; refuse any other view."""
    if view.digest() != sp.digest:
        raise MemberError(f"{pin.file}: {member} exports symbols of digest {view.digest()[:16]}…, pinned "
                                  f"{sp.digest[:16]}…; refusing it (re-pin with `oeq-wheels pins --records` if the "
                                  "pin is wrong)")
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(path.parent)  # a stub half-written by a run that was killed
    tmp = path.with_name(temp_prefix(path.name) + "stub")
    try:
        link_stubs.write_stub(view, tmp)
        if link_stubs.view_of_file(tmp)[0].digest() != sp.digest:
            raise LinkStubError(f"the stub written for {member} does not read back as its library; "
                                    "this is a defect of oeq_wheels/inputs/link_stubs.py")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _view(read, pin: Pinned, member: str) -> link_stubs.View:
    try:
        return read()
    except LinkStubError as exc:
        raise MemberError(f"{pin.file}: {member}: {exc}; refusing it") from None
    except (IndexError, ValueError, UnicodeDecodeError, struct.error):
        raise MemberError(f"{pin.file}: {member}: its symbol tables are not where the pins say; "
                                  "refusing it") from None
