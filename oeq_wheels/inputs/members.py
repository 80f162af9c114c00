"""The members of a pinned wheel that a build reads, fetched by HTTP range instead of the whole wheel.

torch's and NVIDIA's wheels are inputs the build only reads: headers, two text files and the libraries it links
(inputs.py says which). A wheel is a zip with its central directory at the end, so the directory, RECORD and
exactly those members can be fetched by range; the rest (most of a 555 MB torch wheel) never is.

pip's hash checking covers whole files only, so the chain of trust is ours:
- pins.toml pins the wheel's sha256 (the registry's) and the sha256 of its RECORD, taken from one full download
  of the pinned file when the pin was made (`oeq-wheels pins --records`);
- the wheel named by the registry must have the pinned sha256; RECORD, fetched by range, must have the pinned
  sha256; each member must have the sha256 and size RECORD gives it. Anything else is refused in one line and
  nothing of it is kept.

Members are stored once by sha256 under cache/members/ (torch releases share headers), and the input trees
hard-link them. The libraries the build links are not kept: their link stubs are (oeq_wheels/inputs/link_stub_store.py), made
from the first bytes of the member (fetch_prefix) or from the whole member, which is then removed. Where the index has no JSON API or the file
host ignores ranges, or OEQ_WHEELS_FETCH=whole, or a pin has no RECORD sha256, the whole wheel is fetched as
before (fetch.ensure). Hand-rolled because no installer fetches part of a wheel.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import tempfile
import threading
import time
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from .. import registry, settings
from ..errors import MemberError, RegistryError, Unsupported
from ..files import temp_prefix, sweep_stale
from ..pins import Pinned
from ..stop import stop_if_cancelled

LEDGER = "fetched.jsonl"   # cache/members/: one line per range fetch {wheel, bytes, seconds}, for bench/run.py
GAP = 1 << 20              # members closer than this are fetched in one request (the headers lie together)
CHUNK = 1 << 20


def mode() -> str:
    """'members' (the default) or 'whole' (OEQ_WHEELS_FETCH=whole: every input as a whole file)."""
    return settings.current().fetch


def by_members(pin: Pinned) -> bool:
    """Whether this pin's wheel is read member by member (a wheel with a pinned RECORD, members mode)."""
    return bool(pin.record) and pin.file.endswith(".whl") and mode() == "members"


def _b64_sha256(text: str) -> str:
    """RECORD's urlsafe-base64 sha256 as hex."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).hex()


def parse_record(data: bytes) -> dict[str, tuple[str, int]]:
    """RECORD's rows: path -> (sha256 hex, size); rows without a hash (RECORD itself) are left out."""
    out = {}
    for row in csv.reader(io.StringIO(data.decode())):
        if len(row) >= 3 and row[1].startswith("sha256="):
            out[row[0]] = (_b64_sha256(row[1][len("sha256="):]), int(row[2]))
    return out


def record_name(names, wheel: str) -> str:
    """The one .dist-info/RECORD among a wheel's member names (raises MemberError naming the wheel otherwise)."""
    found = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(found) != 1:
        raise MemberError(f"{wheel}: expected one .dist-info/RECORD, found {len(found)}")
    return found[0]


def store_path(cache: Path, sha256: str) -> Path:
    return cache / "members" / sha256[:2] / sha256


def _stored(cache: Path, sha256: str, size: int) -> Path | None:
    """The stored member of this sha256, if present and still of that sha256. It is read again each time a tree is
    made from it (rarely: a tree is made once per input and kept), so a damaged member is fetched afresh, never
    linked into a tree."""
    path = store_path(cache, sha256)
    try:
        if path.stat().st_size == size:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(CHUNK * 4), b""):
                    digest.update(chunk)
            if digest.hexdigest() == sha256:
                return path
        path.unlink()
    except FileNotFoundError:
        pass
    return None


@dataclass
class Member:
    name: str
    sha256: str
    size: int
    info: zipfile.ZipInfo


class _Reader(registry._RangeReader):
    """The range reader with 256 KB blocks: a torch wheel's central directory (~1.5 MB) in a few requests."""

    BLOCK = 1 << 18


class RemoteWheel:
    """A pinned wheel on the index, read by range: its central directory and RECORD, checked against the pin."""

    def __init__(self, pin: Pinned, index: str):
        self.pin = pin
        try:
            files = registry.project_files(index, pin.name)
        except RegistryError as exc:
            if "does not serve the JSON simple API" in str(exc):
                raise Unsupported(str(exc)) from None
            raise MemberError(str(exc)) from None
        hits = [f for f in files if f.filename == pin.file]
        if not hits:
            raise MemberError(f"{index} lists no {pin.file}; check the pinned file name in oeq_wheels/pins.toml")
        self.file = hits[0]
        if self.file.sha256 != pin.sha256:
            raise MemberError(f"{pin.file}: the index gives sha256 {self.file.sha256}, pinned {pin.sha256}; refusing it")
        if not self.file.size:
            raise Unsupported(f"{pin.file}: the index gives no size, so it cannot be read by range")
        self.reader = _Reader(self.file)
        try:
            zf = zipfile.ZipFile(io.BufferedReader(self.reader, _Reader.BLOCK))
        except RegistryError as exc:
            raise (Unsupported if "ignored" in str(exc) else MemberError)(str(exc)) from None
        except zipfile.BadZipFile as exc:
            raise MemberError(f"{pin.file}: its central directory cannot be read by range ({exc})") from None
        self.infos = {i.filename: i for i in zf.infolist()}
        try:
            data = zf.read(record_name(self.infos, pin.file))
        except RegistryError as exc:
            raise MemberError(str(exc)) from None
        got = hashlib.sha256(data).hexdigest()
        if got != pin.record:
            raise MemberError(f"{pin.file}: its RECORD has sha256 {got}, pinned {pin.record}; refusing the wheel "
                              "(re-pin with `oeq-wheels pins --records` if the pin is wrong)")
        self.record = parse_record(data)
        self.fetched = self.reader.fetched
        self.counted = 0           # of fetched, the bytes a ledger line has already counted
        self.fetched_members = 0

    def members(self, wanted) -> list[Member]:
        """The members whose names satisfy wanted(name), each with RECORD's sha256 and size."""
        out = []
        for name, info in self.infos.items():
            if info.is_dir() or not wanted(name):
                continue
            if name not in self.record:
                raise MemberError(f"{self.pin.file}: member {name} is not in its RECORD; refusing it")
            sha, size = self.record[name]
            if info.file_size != size:
                raise MemberError(f"{self.pin.file}: member {name} does not match its pinned RECORD ({info.file_size} "
                                  f"bytes, RECORD {size}); refusing it")
            out.append(Member(name, sha, size, info))
        return out


_store_lock = threading.Lock()
_fetch_lock = threading.Lock()


def _spans(members: list[Member]) -> list[list[Member]]:
    """Members in file order, grouped where they lie within GAP of each other (one request per group)."""
    groups: list[list[Member]] = []
    last = -1
    for m in sorted(members, key=lambda m: m.info.header_offset):
        start = m.info.header_offset
        if groups and start - last <= GAP:
            groups[-1].append(m)
        else:
            groups.append([m])
        last = start + 30 + len(m.info.filename.encode()) + len(m.info.extra) + m.info.compress_size
    return groups


def _fetch_span(wheel: RemoteWheel, group: list[Member], tmp: Path) -> tuple[Path, int]:
    """One range request covering the group (local headers included), streamed to a file; (path, its offset)."""
    start = group[0].info.header_offset
    last = group[-1].info
    # The local header's extra field may be longer than the central directory's: allow 64 KB more, within the file.
    stop = min(last.header_offset + 30 + len(last.filename.encode()) + len(last.extra) + last.compress_size + 65536,
               wheel.file.size)
    req = urllib.request.Request(wheel.file.url, headers={"Range": f"bytes={start}-{stop - 1}"})
    path = tmp / f"span-{start}"
    try:
        with urllib.request.urlopen(req, timeout=120) as r, open(path, "wb") as f:
            if r.status != 206:
                raise Unsupported(f"{wheel.pin.file}: the file host ignored a range request (HTTP {r.status})")
            n = 0
            while chunk := r.read(CHUNK):
                stop_if_cancelled()  # a stopped run does not wait for a 340 MB library to arrive
                f.write(chunk)
                n += len(chunk)
    except OSError as exc:
        raise MemberError(f"{wheel.pin.file}: a range request failed ({exc}); check the network") from None
    if n != stop - start:
        raise MemberError(f"{wheel.pin.file}: the file host cut a range response ({n} of {stop - start} bytes); "
                          "nothing of it is used")
    wheel.fetched += n
    return path, start


def _to_data(f, wheel: RemoteWheel, m: Member, span_start: int):
    """Seek f (a span) past the member's local header to its data; return the inflater it needs (None: stored)."""
    f.seek(m.info.header_offset - span_start)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        raise MemberError(f"{wheel.pin.file}: member {m.name} has no local header where the directory says")
    f.seek(int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little"), 1)
    if m.info.compress_type == zipfile.ZIP_DEFLATED:
        return zlib.decompressobj(-15)
    if m.info.compress_type != zipfile.ZIP_STORED:
        raise MemberError(f"{wheel.pin.file}: member {m.name} uses compression {m.info.compress_type}")
    return None


def _unpack(wheel: RemoteWheel, m: Member, span: Path, span_start: int, cache: Path) -> None:
    """Decompress one member out of its span into the store, under its sha256 only if RECORD's sha256 matches."""
    dest = store_path(cache, m.sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(span, "rb") as f:
        inflate = _to_data(f, wheel, m, span_start)
        left = m.info.compress_size
        digest, size = hashlib.sha256(), 0
        tmp = dest.with_name(temp_prefix(dest.name) + f"{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as out:
                while left > 0:
                    raw = f.read(min(CHUNK, left))
                    if not raw:
                        raise MemberError(f"{wheel.pin.file}: member {m.name} is cut short in the response")
                    left -= len(raw)
                    data = inflate.decompress(raw) if inflate else raw
                    digest.update(data)
                    size += len(data)
                    out.write(data)
                if inflate:
                    data = inflate.flush()
                    digest.update(data)
                    size += len(data)
                    out.write(data)
            if digest.hexdigest() != m.sha256 or size != m.size:
                raise MemberError(f"{wheel.pin.file}: member {m.name} does not match its pinned RECORD "
                                  f"(sha256 {digest.hexdigest()}, RECORD {m.sha256}); refusing it")
            os.replace(tmp, dest)
        except zlib.error as exc:
            raise MemberError(f"{wheel.pin.file}: member {m.name} does not inflate ({exc}); refusing it") from None
        finally:
            tmp.unlink(missing_ok=True)


def fetch(pin: Pinned, wanted, cache: Path, index: str, log=lambda s: None, what: str = "",
          wheel: RemoteWheel | None = None) -> dict[str, Path]:
    """The wheel's members satisfying wanted(name), each verified and stored once: member name -> stored path.

    Members already in the store are not fetched again. Raises Unsupported where only a whole file will do.
    what: names this request in the ledger (one wheel's headers and its libraries are fetched apart).
    wheel: the wheel already opened (its central directory read), instead of opening it from index."""
    t0 = time.monotonic()
    wheel = wheel or RemoteWheel(pin, index)
    fetched_before = wheel.counted
    members = wheel.members(wanted)
    out = {m.name: store_path(cache, m.sha256) for m in members}
    root = cache / "members"
    root.mkdir(parents=True, exist_ok=True)
    with _fetch_lock:  # the CPython builds of one torch want the same libtorch: fetch it once, not four times
        _fetch_missing(wheel, members, cache, root)
    took = time.monotonic() - t0
    _ledger(wheel, root, what, took, len(members), wheel.fetched_members)
    log(f"fetched {wheel.fetched_members} of {len(members)} needed members of {pin.file} by range "
        f"({(wheel.fetched - fetched_before) / 1e6:.0f} of {wheel.file.size / 1e6:.0f} MB, {took:.0f}s)")
    return out


def _fetch_missing(wheel: RemoteWheel, members: list[Member], cache: Path, root: Path) -> None:
    missing = {m.sha256: m for m in members if _stored(cache, m.sha256, m.size) is None}
    wheel.fetched_members = len(missing)
    sweep_stale(root)
    if missing:
        with tempfile.TemporaryDirectory(dir=root, prefix=temp_prefix("span")) as tmp:
            for group in _spans(list(missing.values())):
                span, start = _fetch_span(wheel, group, Path(tmp))
                try:
                    for m in group:
                        _unpack(wheel, m, span, start, cache)
                finally:
                    span.unlink()


def _ledger(wheel: RemoteWheel, root: Path, what: str, took: float, wanted: int, fetched: int) -> None:
    """One line of the ledger: the bytes this request on the wheel took (the central directory's with its first)."""
    with _store_lock, open(root / LEDGER, "a") as ledger:
        ledger.write(json.dumps({"wheel": wheel.pin.file, "what": what, "bytes": wheel.fetched - wheel.counted,
                                 "seconds": round(took, 2), "members": wanted, "fetched": fetched}) + "\n")
        wheel.counted = wheel.fetched


def fetch_prefix(wheel: RemoteWheel, name: str, size: int, cache: Path, log=lambda s: None) -> bytes:
    """The first size bytes of one member (decompressed), by one range request: what a link stub is made of
    (oeq_wheels/inputs/link_stub_store.py). RECORD's sha256 covers whole members only, so these bytes are checked by the caller,
    against the pinned digest of the stub they make; here only that the response is whole and inflates."""
    t0 = time.monotonic()
    pin, before = wheel.pin, wheel.counted
    found = wheel.members(lambda n: n == name)
    if not found:
        raise MemberError(f"{pin.file} has no member {name}; check [stubs] in oeq_wheels/pins.toml")
    m = found[0]
    size = min(size, m.size)
    # Deflate grows incompressible data by a few bytes per 16 KB block: this many compressed bytes always suffice.
    need = min(m.info.compress_size, size + size // 64 + 65536)
    root = cache / "members"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=temp_prefix("prefix")) as tmp:
        info = zipfile.ZipInfo(m.name)
        info.header_offset, info.extra, info.compress_size = m.info.header_offset, m.info.extra, need
        span, start = _fetch_span(wheel, [Member(m.name, m.sha256, need, info)], Path(tmp))
        with open(span, "rb") as f:
            inflate = _to_data(f, wheel, m, start)
            raw = f.read(need)
    try:
        data = inflate.decompress(raw, size) if inflate else raw[:size]
    except zlib.error as exc:
        raise MemberError(f"{pin.file}: member {name} does not inflate ({exc}); refusing it") from None
    if len(data) < size:
        raise MemberError(f"{pin.file}: the first {size} bytes of member {name} are cut short ({len(data)}); "
                          "nothing of it is used")
    took = time.monotonic() - t0
    _ledger(wheel, root, f"{name} (first {size} bytes)", took, 1, 1)
    log(f"fetched the first {size / 1e3:.0f} kB of {name} from {pin.file} by range "
        f"({(wheel.fetched - before) / 1e6:.1f} MB, {took:.1f}s)")
    return data


def fresh_bytes(ledger: Path) -> int:
    """Bytes fetched by range into a cache from empty: each request's first fetch that stored something (later
    lines of the same wheel and request are trees unpacked again, or other caches sharing the store)."""
    seen, total = set(), 0
    for line in ledger.read_text().splitlines():
        row = json.loads(line)
        key = (row["wheel"], row.get("what", ""))
        if row["fetched"] and key not in seen:
            seen.add(key)
            total += row["bytes"]
    return total
