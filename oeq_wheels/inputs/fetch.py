"""Download pinned inputs into a cache through pip's hash checking (sdists straight from the index,
by name and sha256); reuse them offline."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename

from .. import proc
from . import members, link_stub_store
from ..errors import FetchError, Unsupported
from ..files import sha256_file, stat_key, sweep_stale, temp_prefix, write_atomic
from ..pins import Pinned
from ..registry import PYPI


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, sha256: str) -> bool:
    """A cached file counts as verified while it is the very file that was hashed.

    Hashing ~3 GB of wheels on every run would dominate a no-change rebuild, so the
    stamp written after a full sha256 check holds the file's stat_key (inode, size,
    mtime, ctime); when any of them changes, the file is hashed again.
    """
    stamp = _stamp(path)
    if not (path.is_file() and stamp.is_file()):
        return False
    try:
        rec = json.loads(stamp.read_text())
    except ValueError:
        return False
    return rec == {"sha256": sha256, "stat": stat_key(path.stat())}


def _mark_verified(path: Path, sha256: str) -> None:
    write_atomic(_stamp(path), json.dumps({"sha256": sha256, "stat": stat_key(path.stat())}))


class _Progress:
    """Each running download's bytes so far, from pip's own `--progress-bar raw` lines."""

    LINE = re.compile(r"^Progress (\d+) of (\d+)$")

    def __init__(self):
        self.guard = threading.Lock()
        self.running: dict[str, tuple[float, int, int]] = {}  # file -> (start, done, total)

    def start(self, name: str) -> None:
        with self.guard:
            self.running[name] = (time.monotonic(), 0, 0)

    def line(self, name: str, text: str) -> None:
        m = self.LINE.match(text.strip())
        if m:
            with self.guard:
                self.running[name] = (self.running[name][0], int(m.group(1)), int(m.group(2)))

    def finish(self, name: str) -> str:
        with self.guard:
            t0, _done, total = self.running.pop(name)
        dt = max(time.monotonic() - t0, 1e-3)
        return f"{total / 1e6:.0f} MB in {dt:.0f}s, {total / 1e6 / dt:.1f} MB/s" if total else f"{dt:.0f}s"

    def detail(self) -> str:
        with self.guard:
            items = list(self.running.items())
        now = time.monotonic()
        parts = [f"{name} {done / 1e6:.0f}/{total / 1e6:.0f} MB at {done / 1e6 / max(now - t0, 1e-3):.1f} MB/s"
                 if total else f"{name} starting" for name, (t0, done, total) in items]
        return "downloading " + "; ".join(parts) if parts else ""


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


def index_url() -> str:
    """The index pip would ask (PIP_INDEX_URL, else PyPI's simple API)."""
    return (os.environ.get("PIP_INDEX_URL") or PYPI).rstrip("/") + "/"


class Links(HTMLParser):
    """The attributes of every <a> of a page (a PEP 503 index page: href, data-core-metadata, ...)."""

    def __init__(self):
        super().__init__()
        self.links: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs))


def _fetch_sdist(item: Pinned, tmp: Path, progress: _Progress) -> Path:
    """An sdist straight from the index by its file name (the caller checks its sha256).

    `pip download` would prepare the sdist's metadata through its build backend first: 54 s for OEq's
    on a fresh machine, and in an image without wheels for its build requirements it compiles CMake.
    """
    page = f"{index_url()}{canonicalize_name(item.name)}/"
    try:
        with urllib.request.urlopen(urllib.request.Request(page, headers={"Accept": "text/html"}), timeout=60) as r:
            links = Links()
            links.feed(r.read().decode(errors="replace"))
        files = {unquote(urlsplit(a["href"]).path.rsplit("/", 1)[-1]): a["href"] for a in links.links if a.get("href")}
        if item.file not in files:
            raise FetchError(f"{page} lists no {item.file}; check the pinned file name in oeq_wheels/pins.toml")
        return _get(urljoin(page, files[item.file]), tmp / item.file, progress)
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"could not download {item.file} from {index_url()}: {exc} -- check the network") from None


def _get(url: str, got: Path, progress: _Progress) -> Path:
    """url into got, its progress shown (the caller checks its sha256)."""
    with urllib.request.urlopen(url, timeout=120) as r, open(got, "wb") as f:
        total = int(r.headers.get("Content-Length") or 0)
        while chunk := r.read(1 << 20):
            f.write(chunk)
            progress.line(got.name, f"Progress {f.tell()} of {total}")
    return got


def _fetch_url(item: Pinned, tmp: Path, progress: _Progress) -> Path:
    """A file pinned with its own address (the toolchain's Debian packages)."""
    try:
        return _get(item.url, tmp / item.file, progress)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{item.url} answers {exc.code}: the archive no longer serves {item.name} {item.version} "
                         "(Debian replaces updated packages); re-pin the toolchain (`make pins ARGS=--toolchain`)"
                         ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"could not download {item.file} from {item.url}: {exc} -- check the network") from None


def _pip_download(item: Pinned, tmp: Path, progress: _Progress) -> Path:
    """A wheel through pip's own hash checking (the caller checks its sha256 again)."""
    req = tmp / "requirement.txt"
    req.write_text(f"{item.requirement} --hash=sha256:{item.sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
           "--disable-pip-version-check", "--progress-bar", "raw", "-d", str(tmp), "-r", str(req), *_pip_args(item)]
    # pip's configured constraints (a machine-wide `torch<=X` cap, say) cannot narrow a file pinned by name and
    # sha256: they would only refuse it. The rest of pip's configuration (index, proxy, certificates) stays.
    env = dict(os.environ, PIP_CONSTRAINT=os.devnull)
    res = proc.run(cmd, capture_output=True, text=True, env=env, on_line=lambda l: progress.line(item.file, l))
    got = tmp / item.file
    if res.returncode != 0 or not got.is_file():
        detail = (res.stderr or res.stdout).strip().splitlines()
        hint = [l for l in detail if "hash" in l.lower() or "ERROR" in l] or detail[-3:]
        raise FetchError(
            f"could not download {item.file} ({item.requirement}) with its pinned sha256: "
            + " | ".join(hint)
            + " -- check the network or the hash in oeq_wheels/pins.toml"
        )
    return got


def _download_one(item: Pinned, dest: Path, log, progress: _Progress) -> None:
    # A partial download lives only in this temporary directory, removed on any failure or interrupt.
    with tempfile.TemporaryDirectory(dir=dest, prefix=temp_prefix("download")) as tmp:
        progress.start(item.file)
        try:
            how = _fetch_url if item.url else _fetch_sdist if item.file.endswith(".tar.gz") else _pip_download
            got = how(item, Path(tmp), progress)
        finally:
            took = progress.finish(item.file)
        actual = sha256_file(got)
        if actual != item.sha256:  # pip checked wheels too; a second look costs little
            raise FetchError(
                f"hash mismatch for {item.file}: pinned {item.sha256}, got {actual}; refusing it"
            )
        os.replace(got, dest / item.file)
        _mark_verified(dest / item.file, item.sha256)
    log(f"downloaded {item.file} ({took})")


class Remote:
    """A pinned wheel read member by member (oeq_wheels.inputs.members): fetch.ensure's answer for it. Nothing is fetched
    until an input tree needs members of it; a tree already unpacked needs no network."""

    def __init__(self, pin: Pinned, cache: Path, log):
        self.pin, self.cache, self.log = pin, cache, log

    def unpack(self, wanted, root: Path) -> Path | None:
        """Hard-link the members satisfying wanted(name) into root, and for the libraries among them that the pins
        stub, their link stubs (oeq_wheels.inputs.link_stub_store); or, where the index or file host cannot serve members,
        download the whole wheel and return its path for the caller to unpack."""
        stubbed = link_stub_store.stubbed(self.pin)
        lib = lambda name: name.rsplit("/", 1)[-1]  # noqa: E731
        try:
            wheel = members.RemoteWheel(self.pin, index_url())
            got = members.fetch(self.pin, lambda n: wanted(n) and lib(n) not in stubbed, self.cache, "", self.log,
                                wheel=wheel)
            for name in [n for n in wheel.infos if wanted(n) and lib(n) in stubbed]:
                got[name] = link_stub_store.ensure(wheel, stubbed[lib(name)], name, self.cache, self.log)
        except Unsupported as exc:
            self.log(f"{exc}; downloading the whole {self.pin.file} instead")
            return ensure([dataclasses.replace(self.pin, record="")], self.cache, self.log)[self.pin.file]
        for name, stored in got.items():
            dest = root / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(stored, dest)
        return None


def ensure(items: list[Pinned], cache: Path, log=lambda s: None, jobs: int = 4, stage=None,
           whole: bool = False) -> dict[str, Path | Remote]:
    """Make every pinned file present and verified in cache/downloads; return file -> path.

    Files already verified are used as they are, so a second run needs no network. A wheel whose RECORD is pinned
    is not downloaded (unless a verified whole copy is here already): its answer is a Remote, whose members an input
    tree fetches (oeq_wheels.inputs.members).
    stage: a progress.Stage whose heartbeat then names each download's size and rate.
    whole: every file downloaded whole (for a step that needs the file itself, e.g. to install or re-version it).
    """
    dest = cache / "downloads"
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot make the download cache {dest}: {exc.strerror}; set OEQ_WHEELS_CACHE to a folder "
                         "you can write") from None
    sweep_stale(dest)
    out: dict[str, Path | Remote] = {}
    missing: list[Pinned] = []
    for item in dict.fromkeys(items):
        path = dest / item.file
        if not whole and members.by_members(item) and not _is_verified(path, item.sha256):  # a whole copy at hand is read locally
            out[item.file] = Remote(item, cache, log)
            continue
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
        progress = _Progress()
        if stage is not None:
            stage.detail = progress.detail
        log(f"downloading {len(missing)} file(s): {', '.join(m.file for m in missing)}")
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for fut in [pool.submit(_download_one, m, dest, log, progress) for m in missing]:
                fut.result()
    return out

