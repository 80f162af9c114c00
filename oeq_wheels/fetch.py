"""Download pinned inputs into a cache through pip's hash checking; reuse them offline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.utils import parse_wheel_filename

from .errors import OeqWheelsError
from .files import sha256_file
from .pins import Pinned


class FetchError(OeqWheelsError):
    pass


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, sha256: str) -> bool:
    """A cached file counts as verified if its stamp matches its size and mtime.

    Hashing ~3 GB of wheels on every run would dominate a no-change rebuild; the
    stamp is written only after a full sha256 check, and any change re-hashes.
    """
    stamp = _stamp(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    st = path.stat()
    try:
        rec = json.loads(stamp.read_text())
    except ValueError:
        return False
    return rec == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _mark_verified(path: Path, sha256: str) -> None:
    st = path.stat()
    _stamp(path).write_text(
        json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    )


def _pip_args(item: Pinned) -> list[str]:
    """pip download options that select exactly this pinned file."""
    if item.file.endswith(".tar.gz"):
        return ["--no-binary", ":all:"]
    _, _, _, tags = parse_wheel_filename(item.file)
    args = ["--only-binary", ":all:"]
    for plat in sorted({t.platform for t in tags}):
        if plat != "any":
            args += ["--platform", plat]
    interp = sorted({t.interpreter for t in tags})[0]  # cp312 or py3
    abi = sorted({t.abi for t in tags})[0]
    digits = interp[2:]
    if interp.startswith("cp"):
        args += ["--implementation", "cp", "--python-version", f"{digits[0]}.{digits[1:]}", "--abi", abi]
    elif args[2:]:  # a platform wheel for any Python 3: select with this interpreter's version
        args += ["--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}"]
    return args


def _download_one(item: Pinned, dest: Path, log) -> None:
    with tempfile.TemporaryDirectory(dir=dest, prefix=".dl-") as tmp:
        req = Path(tmp) / "requirement.txt"
        req.write_text(f"{item.requirement} --hash=sha256:{item.sha256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
               "--disable-pip-version-check", "-q", "-d", tmp, "-r", str(req), *_pip_args(item)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / item.file
        if proc.returncode != 0 or not got.is_file():
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            hint = [l for l in detail if "hash" in l.lower() or "ERROR" in l] or detail[-3:]
            raise FetchError(
                f"could not download {item.file} ({item.requirement}) with its pinned sha256: "
                + " | ".join(hint)
                + " -- check the network or the hash in oeq_wheels/pins.toml"
            )
        actual = sha256_file(got)
        if actual != item.sha256:  # pip checked too; a second look costs little
            raise FetchError(
                f"hash mismatch for {item.file}: pinned {item.sha256}, got {actual}; refusing it"
            )
        os.replace(got, dest / item.file)
        _mark_verified(dest / item.file, item.sha256)
    log(f"downloaded {item.file}")


def ensure(items: list[Pinned], cache: Path, log=lambda s: None, jobs: int = 4) -> dict[str, Path]:
    """Make every pinned file present and verified in cache/downloads; return file -> path.

    Files already verified are used as they are, so a second run needs no network.
    """
    dest = cache / "downloads"
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    missing: list[Pinned] = []
    for item in dict.fromkeys(items):
        path = dest / item.file
        out[item.file] = path
        if _is_verified(path, item.sha256):
            continue
        if path.is_file():
            actual = sha256_file(path)
            if actual == item.sha256:
                _mark_verified(path, item.sha256)
                continue
            log(f"cached {item.file} does not match its pinned sha256; downloading it again")
            path.unlink()
        missing.append(item)
    if missing:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for fut in [pool.submit(_download_one, m, dest, log) for m in missing]:
                fut.result()
    return out

