"""A copy of a wheel under a local version (`2.14.1` -> `2.14.1+cu130`): a stand-in for PyTorch's cu130 index.

PyTorch's own cu130 index serves torch as `2.14.1+cu130`; PyPI serves the same binary as `2.14.1`.
FastMACE compares importlib.metadata.version("torch") exactly, and the tests cannot reach PyTorch's
index, so they serve PyPI's wheel under the local version from a local index instead.

Only the `.dist-info` (and `.data`) directory names, METADATA and RECORD change. Every other member's
compressed bytes are copied as they are, in the kernel and in runs as long as possible, so the 555 MB
torch wheel takes seconds rather than the minutes that recompressing it would.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import zipfile
import zlib
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import ReversionError
from ..files import sha256_file, stat_key, temp_prefix, write_atomic
from ..wheelfile import record_hash

STAMP_SUFFIX = ".reversioned"
_STAMP_FORMAT = 1  # bump when the output for the same input changes

# As zipfile writes: past these a value moves to a ZIP64 field (some readers take the 32-bit
# fields as signed, hence 2**31 - 1). Module constants so that a test can force the ZIP64 path.
ZIP64_LIMIT = (1 << 31) - 1
ZIP64_COUNT = (1 << 16) - 1

_LOCAL = struct.Struct("<4s5H3L2H")  # local file header, up to the name
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # central directory record, up to the name
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_LOCATOR = struct.Struct("<4sLQL")
_LOCAL_SIG, _CENTRAL_SIG = b"PK\x03\x04", b"PK\x01\x02"
_END_SIG, _END64_SIG, _END64_LOCATOR_SIG = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"
_FLAG_ENCRYPTED, _FLAG_UTF8 = 0x1, 0x800
_ZIP64_EXTRA = 0x0001
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # they sign the old RECORD: dropped, not left wrong


def pytorch_standin(pins, cache: Path, cp: str) -> Path:
    """The folder of a local stand-in for PyTorch's index: PyPI's torch wheel for `cp` under the version PyTorch's
    index gives the same binary (the matrix's consumer_torch, e.g. 2.14.1+cu130). Serve it with hosts.pypiserver."""
    from ..inputs import fetch
    pin = pins.matrix.torch_wheel(cp)
    files = fetch.ensure([pin], cache, whole=True)  # the wheel itself is served
    local = pins.matrix.consumer_torch.partition("+")[2]
    standin = cache / "standins" / f"pytorch-{local}"
    reversioned(files[pin.file], local, standin)
    return standin


def reversioned(wheel: Path, local: str, out_dir: Path) -> Path:
    """Write (or reuse) in out_dir a copy of wheel whose version is `<version>+<local>`; return its path.

    The copy is reused while its sidecar stamp (`<copy>.reversioned`) records this very source:
    the same stat, or else the same sha256.
    """
    wheel, out_dir = Path(wheel), Path(out_dir)
    try:
        src_st = wheel.stat()
    except FileNotFoundError:
        raise ReversionError(f"{wheel}: no such wheel") from None
    if not wheel.is_file():
        raise ReversionError(f"{wheel}: not a file")
    old, new, out_name = _names(wheel.name, local)
    out = out_dir / out_name
    stamp = out.with_name(out.name + STAMP_SUFFIX)
    if _reusable(out, stamp, wheel, src_st):
        return out

    out_dir.mkdir(parents=True, exist_ok=True)
    source_sha256 = sha256_file(wheel)
    tmp = out_dir / (temp_prefix(out_name) + "tmp")  # pid-named: files.sweep_stale removes a killed run's
    try:
        _rewrite(wheel, tmp, old, new)
        if stat_key(wheel.stat()) != stat_key(src_st):
            raise ReversionError(f"{wheel}: changed while it was being copied")
        stamp.unlink(missing_ok=True)  # a stale stamp must never vouch for the new file
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    write_atomic(stamp, json.dumps({
        "format": _STAMP_FORMAT, "source": wheel.name, "source_sha256": source_sha256,
        "source_stat": stat_key(src_st), "output": _output_key(out.stat())}) + "\n")
    return out


def _names(filename: str, local: str) -> tuple[Version, Version, str]:
    """The source's version, the new one, and the new file name (name, build tag and tags kept as spelled)."""
    try:
        _, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as e:
        raise ReversionError(f"{filename}: not a wheel's file name ({e})") from None
    if version.local is not None:
        raise ReversionError(f"{filename}: already has a local version ({version}); cannot add +{local}")
    try:
        new = Version(f"{version}+{local}")
    except InvalidVersion:
        raise ReversionError(f"+{local}: not a valid local version label (PEP 440)") from None
    parts = filename[:-len(".whl")].split("-")  # name, version, [build,] python, abi, platform
    parts[1] = str(new)  # normalised: a normalised version has no '-', and wheel names keep '+' as it is
    return version, new, "-".join(parts) + ".whl"


def _output_key(st: os.stat_result) -> list[int]:
    # Not files.stat_key: its ctime also moves when an index links the file in, which changes nothing.
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _reusable(out: Path, stamp: Path, wheel: Path, src_st: os.stat_result) -> bool:
    try:
        rec = json.loads(stamp.read_text())
        if rec.get("format") != _STAMP_FORMAT or rec.get("output") != _output_key(out.stat()):
            return False
    except (OSError, ValueError, AttributeError):
        return False
    if rec.get("source_stat") == stat_key(src_st):
        return True
    if rec.get("source_sha256") != sha256_file(wheel):  # the same bytes under another inode (a fresh download)
        return False
    rec["source_stat"] = stat_key(src_st)
    write_atomic(stamp, json.dumps(rec) + "\n")
    return True


# ---- the archive ---------------------------------------------------------------------------------

def _rewrite(src: Path, dst: Path, old: Version, new: Version) -> None:
    with open(src, "rb") as fin:
        try:
            zf = zipfile.ZipFile(fin)
        except (zipfile.BadZipFile, OSError) as e:
            raise ReversionError(f"{src.name}: not a zip archive ({e})") from None
        with zf:
            infos = zf.infolist()
            end_of_members = zf.start_dir
            comment = zf.comment
            info_dir, rename = _renamer(src.name, infos, old, new)
            metadata_name, record_name = f"{info_dir}/METADATA", f"{info_dir}/RECORD"
            try:
                metadata_old, record_old = zf.read(metadata_name), zf.read(record_name)
            except (KeyError, zipfile.BadZipFile, zlib.error) as e:
                raise ReversionError(f"{src.name}: cannot read its METADATA and RECORD ({e})") from None
        dropped = {f"{info_dir}/{s}" for s in _SIGNATURES}
        metadata = _new_metadata(metadata_old, old, new, src.name)
        record = _new_record(record_old, rename, metadata_name, record_name, dropped, metadata, src.name)
        replaced = {metadata_name: metadata, record_name: record}

        # A member's bytes run from its local header to the next one's (a data descriptor included).
        by_offset = sorted(infos, key=lambda i: i.header_offset)
        ends = [i.header_offset for i in by_offset[1:]] + [end_of_members]
        fd_in = fin.fileno()
        with open(dst, "wb", buffering=0) as fout:
            w = _Out(fout)
            central = {}  # id(info) -> (name bytes, offset, crc, compressed size, size, method, flags, version)
            run_start = run_end = None  # unchanged members are copied byte for byte, as one range
            for zi, end in zip(by_offset, ends):
                if zi.flag_bits & _FLAG_ENCRYPTED:
                    raise ReversionError(f"{src.name}: {zi.filename} is encrypted")
                head = os.pread(fd_in, _LOCAL.size, zi.header_offset)
                if len(head) < _LOCAL.size or head[:4] != _LOCAL_SIG:
                    raise ReversionError(f"{src.name}: no local header for {zi.filename}")
                nlen, elen = _LOCAL.unpack(head)[-2:]
                raw_name = _encoded_name(zi)
                if os.pread(fd_in, nlen, zi.header_offset + _LOCAL.size) != raw_name:
                    raise ReversionError(f"{src.name}: {zi.filename}: local and central names differ")
                data_start = zi.header_offset + _LOCAL.size + nlen + elen
                if end < data_start + zi.compress_size:
                    raise ReversionError(f"{src.name}: {zi.filename} overlaps the next member")
                name = zi.filename
                if name in dropped:
                    continue
                same = (zi.CRC, zi.compress_size, zi.file_size, zi.compress_type, zi.flag_bits, zi.extract_version)
                new_name = rename(name)
                if name not in replaced and new_name == name:  # unchanged: part of a run
                    if run_end != zi.header_offset:
                        if run_start is not None:
                            w.copy(fd_in, run_start, run_end - run_start)
                        run_start = zi.header_offset
                    # Nothing is written until the run is, so w.pos is where the run will start.
                    central[id(zi)] = (raw_name, zi.header_offset - run_start + w.pos, *same)
                    run_end = end
                    continue
                if run_start is not None:
                    w.copy(fd_in, run_start, run_end - run_start)
                    run_start = run_end = None
                new_raw = new_name.encode("utf-8" if zi.flag_bits & _FLAG_UTF8 else "cp437")
                offset = w.pos
                if name in replaced:  # written anew, deflated, sizes in the header (no data descriptor)
                    data = replaced[name]
                    body = _deflate(data)
                    crc, csize, size = zlib.crc32(data), len(body), len(data)
                    flags, method, version = zi.flag_bits & _FLAG_UTF8, zipfile.ZIP_DEFLATED, 20
                    w.write(_LOCAL.pack(_LOCAL_SIG, version, flags, method, *_dos_time(zi), crc, csize, size,
                                        len(new_raw), 0) + new_raw + body)
                    central[id(zi)] = (new_raw, offset, crc, csize, size, method, flags, version)
                else:  # renamed: the same header, extra field and bytes under the new name
                    local_extra = os.pread(fd_in, elen, zi.header_offset + _LOCAL.size + nlen)
                    w.write(head[:-4] + struct.pack("<2H", len(new_raw), elen) + new_raw + local_extra)
                    w.copy(fd_in, data_start, end - data_start)
                    central[id(zi)] = (new_raw, offset, *same)
            if run_start is not None:
                w.copy(fd_in, run_start, run_end - run_start)

            cd_start = w.pos
            kept = [zi for zi in infos if zi.filename not in dropped]  # the source's order
            for zi in kept:
                w.write(_central(zi, *central[id(zi)]))
            _end(w, len(kept), cd_start, w.pos - cd_start, comment)


class _Out:
    """An unbuffered output file and its position; copies go through the kernel where it can."""

    def __init__(self, f):
        self.f, self.fd, self.pos = f, f.fileno(), 0
        self._kernel_copy = hasattr(os, "copy_file_range")

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.pos += n

    def copy(self, fd_in: int, offset: int, length: int) -> None:
        while length > 0:
            if self._kernel_copy:
                try:  # no trip through user space (and a reflink where the filesystem can share extents)
                    n = os.copy_file_range(fd_in, self.fd, length, offset)
                except OSError:  # an old kernel, or filesystems that cannot: read and write instead
                    self._kernel_copy = False
                    continue
                self.pos += n
            else:
                chunk = os.pread(fd_in, min(length, 1 << 22), offset)
                self.write(chunk)
                n = len(chunk)
            if n == 0:
                raise ReversionError("the source wheel ended early (truncated?)")
            offset += n
            length -= n


def _encoded_name(zi: zipfile.ZipInfo) -> bytes:
    return zi.orig_filename.encode("utf-8" if zi.flag_bits & _FLAG_UTF8 else "cp437")


def _dos_time(zi: zipfile.ZipInfo) -> tuple[int, int]:
    y, mo, d, h, mi, s = zi.date_time
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw deflate, as zip stores it
    return c.compress(data) + c.flush()


def _central(zi, raw, offset, crc, csize, size, method, flags, version) -> bytes:
    # ZIP64 fields hold, in this order, only the values whose 32-bit field says 0xFFFFFFFF.
    z64 = []
    if size > ZIP64_LIMIT:
        z64.append(size)
        size = 0xFFFFFFFF
    if csize > ZIP64_LIMIT:
        z64.append(csize)
        csize = 0xFFFFFFFF
    if offset > ZIP64_LIMIT:
        z64.append(offset)
        offset = 0xFFFFFFFF
    extra = _without_zip64(zi.extra)  # the source's offsets no longer hold
    create_version = zi.create_version
    if z64:
        extra = struct.pack(f"<2H{len(z64)}Q", _ZIP64_EXTRA, 8 * len(z64), *z64) + extra
        version, create_version = max(version, 45), max(create_version, 45)
    return _CENTRAL.pack(_CENTRAL_SIG, create_version, zi.create_system, version, zi.reserved, flags, method,
                         *_dos_time(zi), crc, csize, size, len(raw), len(extra), len(zi.comment), 0,
                         zi.internal_attr, zi.external_attr, offset) + raw + extra + zi.comment


def _without_zip64(extra: bytes) -> bytes:
    out, i = [], 0
    while i + 4 <= len(extra):
        kind, n = struct.unpack_from("<2H", extra, i)
        if kind != _ZIP64_EXTRA:
            out.append(extra[i:i + 4 + n])
        i += 4 + n
    return b"".join(out)


def _end(w: _Out, count: int, cd_start: int, cd_size: int, comment: bytes) -> None:
    if count >= ZIP64_COUNT or cd_start > ZIP64_LIMIT or cd_size > ZIP64_LIMIT:
        end64 = w.pos
        w.write(_END64.pack(_END64_SIG, _END64.size - 12, 45, 45, 0, 0, count, count, cd_size, cd_start))
        w.write(_END64_LOCATOR.pack(_END64_LOCATOR_SIG, 0, end64, 1))
        count, cd_size, cd_start = min(count, 0xFFFF), min(cd_size, 0xFFFFFFFF), min(cd_start, 0xFFFFFFFF)
    w.write(_END.pack(_END_SIG, 0, 0, count, count, cd_size, cd_start, len(comment)) + comment)


# ---- the metadata --------------------------------------------------------------------------------

def _renamer(filename: str, infos: list[zipfile.ZipInfo], old: Version, new: Version):
    """The source's .dist-info directory, and a function from a member's name to its new one."""
    name = canonicalize_name(parse_wheel_filename(filename)[0])
    tops = {i.filename.split("/", 1)[0] for i in infos if "/" in i.filename}
    found = []
    for top in tops:
        stem, dot, kind = top.rpartition(".")
        dname, dash, dver = stem.rpartition("-")
        if kind != "dist-info" or not dash:
            continue
        try:
            if canonicalize_name(dname) == name and Version(dver) == old:
                found.append((top, dname))
        except InvalidVersion:
            continue
    if len(found) != 1:
        raise ReversionError(f"{filename}: expected one {name}-{old}.dist-info directory, found "
                             f"{sorted(t for t, _ in found) or 'none'}")
    info_dir, dname = found[0]
    stem = info_dir[:-len(".dist-info")]
    # PEP 427: {name}-{version}.dist-info, the version normalised: '+' stays (bdist_wheel and pip agree).
    moves = {info_dir + "/": f"{dname}-{new}.dist-info/", stem + ".data/": f"{dname}-{new}.data/"}

    def rename(member: str) -> str:
        for a, b in moves.items():
            if member.startswith(a):
                return b + member[len(a):]
        return member

    return info_dir, rename


def _new_metadata(data: bytes, old: Version, new: Version, filename: str) -> bytes:
    """METADATA with its Version header changed; all else byte for byte (line endings included)."""
    lines = data.splitlines(keepends=True)
    hits = []
    for n, line in enumerate(lines):
        if not line.strip():
            break  # the headers end here; the description follows
        m = re.match(rb"(?i)version[ \t]*:[ \t]*(.*?)[ \t]*(\r?\n)?$", line)
        if m:
            hits.append((n, m))
    if len(hits) != 1:
        raise ReversionError(f"{filename}: METADATA has {len(hits)} Version headers, expected 1")
    n, m = hits[0]
    try:
        ok = Version(m.group(1).decode()) == old
    except (InvalidVersion, UnicodeDecodeError):
        ok = False
    if not ok:
        raise ReversionError(f"{filename}: METADATA says Version {m.group(1)!r}, the file name {old}")
    lines[n] = b"Version: " + str(new).encode() + (m.group(2) or b"")
    return b"".join(lines)


def _new_record(data: bytes, rename, metadata_name: str, record_name: str, dropped: set[str], metadata: bytes,
                filename: str) -> bytes:
    """RECORD with the paths renamed, METADATA's hash and size new, RECORD's own left empty (as the spec says)."""
    text = data.decode("utf-8")
    newline = "\r\n" if "\r\n" in text else "\n"  # as the source wrote it (csv's default is \r\n)
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator=newline)
    seen = set()
    for row in csv.reader(io.StringIO(text, newline="")):
        if not row:
            continue
        path = row[0]
        if path in dropped:
            continue
        if path == metadata_name:
            row = [rename(path), record_hash(metadata), str(len(metadata))]
        elif path == record_name:
            row = [rename(path), "", ""]
        else:
            row = [rename(path), *row[1:]]
        seen.add(path)
        writer.writerow(row)
    missing = {metadata_name, record_name} - seen
    if missing:
        raise ReversionError(f"{filename}: RECORD does not list {', '.join(sorted(missing))}")
    return out.getvalue().encode("utf-8")
