"""Where the cache lives, and content hashes of files."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import stat
from pathlib import Path

from . import settings


def default_cache() -> Path:
    """OEQ_WHEELS_CACHE, else oeq-wheels in the user's cache folder (settings.py)."""
    return settings.current().cache


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stat_key(st: os.stat_result) -> list[int]:
    """Which version of a file this is: any write changes the ctime, even one that restores the mtime,
    and no user-space call can set it back. Caches trust a recorded hash only while this is unchanged."""
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def write_atomic(path: Path, text: str) -> None:
    """Write text under a temporary name, then rename: readers see the old file or the new, never half."""
    tmp = path.with_name(temp_prefix(path.name) + "tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: Path, holder: str | None = None, waiting=None):
    """Hold an exclusive lock beside `path` (path.lock) while a cached thing is checked and made: processes sharing
    the cache (the test suite's workers) make it once, the others wait and then find it made. The
    kernel drops the lock with its process, so a killed maker never blocks the next. holder: what this process is,
    written into the lock file while it holds it; waiting(what the holder wrote) is called before waiting for one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                f.seek(0)
                waiting(f.read().strip() or "a process that did not say what it is")
            fcntl.flock(f, fcntl.LOCK_EX)
        if holder is not None:
            f.truncate(0)
            f.write(holder)
            f.flush()
        yield


@contextlib.contextmanager
def try_locked(path: Path):
    """locked(), without waiting: yields True holding the lock, or False (holding nothing) where another process
    holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


@contextlib.contextmanager
def locked_dir(directory: Path):
    """Hold an exclusive lock on a kept directory itself (no lock file beside it), as locked() does: for the stub
    store, whose folders are never removed and whose files are all stubs."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def keep_dir() -> str | None:
    """Where a check's work that is kept on purpose (a failed install, --keep) goes: outside a CLI run's temporary
    directory, which goes when the run ends. The CLI sets it to the system's temporary directory unless it is set
    already; the test suite sets it under its own base folder, which its next run removes (5 GB per kept venv)."""
    return settings.current().keep_dir


def temp_prefix(name: str) -> str:
    """Hidden temporary names carry the owner's pid, so a later run can remove a killed run's leftovers."""
    return f".{name}.pid{os.getpid()}."


_TEMP = re.compile(r"^\..*\.pid(\d+)\.")


def sweep_stale(*dirs: Path) -> int:
    """Remove the temporary files and trees of runs that no longer exist (SIGKILL, power loss)."""
    removed = 0
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            m = _TEMP.match(e.name)
            if not m or _alive(int(m.group(1))):
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                Path(e.path).unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remembered(tool: str, wheel: Path, ask, memo_dir: Path | None) -> dict:
    """ask() -> a JSON-able verdict; with memo_dir, remembered under the wheel's sha256 and the tool's version.

    Starting auditwheel and twine takes most of a no-change rebuild, whose wheels are byte-identical
    to the last ones. Only the build passes memo_dir: `verify` and `publish` always ask afresh.
    """
    if memo_dir is None:
        return ask()
    key = hashlib.sha256(f"{tool} {importlib.metadata.version(tool)} ".encode() + wheel.read_bytes()).hexdigest()
    memo = memo_dir / f"{tool}-{key}.json"
    try:
        return json.loads(memo.read_text())
    except (OSError, ValueError):
        pass
    verdict = ask()
    memo_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(memo, json.dumps(verdict))
    return verdict


def not_a_file(path: Path, limit: int) -> str | None:
    """Why a door does not read path (a symbolic link, FIFO or device, or larger than limit bytes), or None; it is
    never opened: a link to /dev/zero would be read forever, a FIFO would block."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path.name}: cannot read it ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"{path.name} is not a regular file (a symbolic link, FIFO or device)"
    if st.st_size > limit:
        return f"{path.name} is {st.st_size} bytes, larger than any file of ours ({limit} at most)"
    return None
