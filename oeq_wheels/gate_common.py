"""The gate's common part: what every wheel of ours is checked for, whichever the product.

RECORD, exactly the expected files (nothing else: no .pth, no path outside the package),
the WHEEL file, ELF facts (oeq_wheels.elf: NEEDED, RUNPATH, stripped, no build-host paths), the platform tag
auditwheel proves (oeq_wheels.tags), `twine check --strict`. The products add their own checks:
oeq_wheels.ext.gate (fastmace-oeq-ext: every manifest field against the pins) and
oeq_wheels.oeq.gate (binary openequivariance: the sdist's tree, the build record, the
stable C ABI, every versioned CUDA symbol in its line's oldest wheels); oeq_wheels.gate picks one
by the wheel's name. This module imports neither: the products build on it, never the reverse.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import struct
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from . import pins as pins_mod, proc
from .elf import elf_facts
from .errors import OeqWheelsError
from .files import not_a_file, remembered, sha256_file
from .tags import audit, external_ok, manylinux_version, proven_tag, split_variant, tag_arch


# Libraries every manylinux system has (auditwheel's policies whitelist them); the architecture's dynamic loader
# joins these (pins: [arch.NAME] loader).
SYSTEM_NEEDED = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"}


@dataclass
class Verdict:
    """The outcome of a check: ok when no problem was found; facts say what was seen."""

    subject: Path
    problems: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def said(self) -> list[str]:
        """The verdict as `verify` and `publish` print it: OK with the tag auditwheel proves, or FAIL with each
        problem."""
        if not self.ok:
            return [f"FAIL {self.subject.name}", *(f"     - {p}" for p in self.problems)]
        return [f"OK   {self.subject.name}  tag {self.facts['tag']} (auditwheel: {self.facts['auditwheel_sym_tag']})",
                *([f"     {self.facts['torch_abi_audit']}"] if "torch_abi_audit" in self.facts else [])]


def twine_check(wheel: Path, memo_dir: Path | None = None) -> str | None:
    """Why `twine check --strict` refuses the wheel, or None."""
    def ask() -> dict:
        res = proc.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                       capture_output=True, text=True)
        return {"problem": None if res.returncode == 0 else (res.stdout + res.stderr).strip()[-1500:]}
    return remembered("twine", wheel, ask, memo_dir)["problem"]


def check_elf(data: bytes, *, required: set[str], allowed: set[str], runpath: str,
              forbidden_paths: list[str], arch: pins_mod.Arch) -> tuple[dict, list[str]]:
    facts, problems = elf_facts(data), []
    if facts["machine"] != arch.elf_machine:
        problems.append(f"is an {facts['machine']} binary, the wheel's tag says {arch.name} ({arch.elf_machine})")
    needed = set(facts["needed"])
    if any(n.startswith("libpython") for n in needed):
        problems.append(f"links libpython: {sorted(needed)}")
    missing = required - needed
    if missing:
        problems.append(f"NEEDED lacks {sorted(missing)}")
    unexpected = needed - allowed - SYSTEM_NEEDED - {arch.loader}
    if unexpected:
        problems.append(f"unexpected NEEDED {sorted(unexpected)}")
    if facts["runpath"] != runpath:
        problems.append(f"RUNPATH is {facts['runpath']!r}, expected {runpath!r}")
    if facts["rpath"]:
        problems.append(f"has an RPATH {facts['rpath']!r} (RUNPATH only)")
    if not facts["stripped"]:
        problems.append("not stripped (.symtab or debug sections present)")
    for p in forbidden_paths:
        if p and p.encode() in data:
            problems.append(f"contains the build-host path {p!r}")
    return facts, problems


def default_forbidden_paths() -> list[str]:
    return sorted({str(Path.home()), tempfile.gettempdir() + "/", "/root/", "/home/"}, key=len)


# No member of a wheel of ours comes near this (the largest, a host library, is about 0.5 MB; a whole wheel unpacks
# to about 1.1 MB): a larger one is refused before a byte of it is read, and so is an archive that would unpack to
# more than the total.
MAX_MEMBER = 32 << 20
MAX_TOTAL = 64 << 20
CHUNK = 1 << 20


class Members(Mapping):
    """A wheel's members by name, each read only when asked for (and then kept): the gate never holds what it does
    not look at, so a hostile member costs time to hash, never memory."""

    def __init__(self, wheel: Path, names: list[str]):
        self._wheel, self._names, self._read = wheel, names, {}

    def __getitem__(self, name: str) -> bytes:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._read:
            with zipfile.ZipFile(self._wheel) as zf:
                self._read[name] = zf.read(name)
        return self._read[name]

    def __contains__(self, name) -> bool:  # Mapping's own would read the member
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _record_entries(text: str) -> dict[str, tuple[str, int]] | str:
    """RECORD's (sha256 hex, size) per path, or why it is no RECORD of ours (every file hashed with sha256)."""
    out: dict[str, tuple[str, int]] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) != 3:
            return f"a RECORD row has {len(row)} fields: {row[:3]}"
        path, digest, size = row
        if path in out:
            return f"RECORD lists {path} twice"
        if path.endswith(".dist-info/RECORD") and not digest and not size:
            continue
        if not digest.startswith("sha256=") or not size.isdigit():
            return f"RECORD has no sha256 and size for {path}"
        try:
            raw = base64.urlsafe_b64decode(digest[7:] + "=" * (-len(digest[7:]) % 4))
        except ValueError:
            return f"RECORD's hash of {path} is not base64"
        out[path] = (raw.hex(), int(size))
    return out


# The zip records the layout check reads (APPNOTE 4.3.7, 4.3.12, 4.3.16): signature and fixed size of each.
LOCAL, CENTRAL, END = 0x04034B50, 0x02014B50, 0x06054B50
DESCRIPTOR = 0x08074B50


def layout_problem(path: Path) -> str | None:
    """Why this file is not one unambiguous zip archive of ours, or None: a regular file (no link, FIFO or device);
    no larger than any wheel of ours unpacks to; ending in the end record (no comment, no bytes after it), no ZIP64,
    one disk; its central directory right before the end record; the entries' local headers one after another from
    the first byte, each naming what its central entry names (method, and CRC and size where the header holds them),
    the last one's data ending where the central directory begins. Such an archive reads the same to every reader:
    pip, uv and Python's zipfile (which silently shifts an archive with bytes before it) take the same members.

    Hand-rolled: zipfile tolerates exactly these (a prefix, a comment), and no library of the standard set refuses
    them; the records' layout is APPNOTE's, read with struct."""
    unreadable = not_a_file(path, MAX_TOTAL)
    if unreadable:
        return unreadable
    size = path.stat().st_size
    if size < 22:
        return f"{size} bytes: too short to be a zip archive"
    with open(path, "rb") as f:
        f.seek(size - 22)
        sig, disk, cd_disk, n_disk, n, cd_size, cd_off, comment = struct.unpack("<IHHHHIIH", f.read(22))
        if sig != END:
            return "does not end with the zip end record (bytes after it, or an archive comment)"
        if comment:
            return "has an archive comment"
        if disk or cd_disk or n_disk != n:
            return "spans several disks"
        if 0xFFFF in (n,) or 0xFFFFFFFF in (cd_size, cd_off):
            return "is a ZIP64 archive (no wheel of ours needs one)"
        if cd_off + cd_size != size - 22:
            return (f"its central directory (at {cd_off}, {cd_size} bytes) does not end where its end record begins "
                    f"({size - 22}): bytes before the first entry or after the central directory")
        f.seek(cd_off)
        cd = f.read(cd_size)
        entries, at = [], 0
        for _ in range(n):
            if at + 46 > len(cd) or struct.unpack_from("<I", cd, at)[0] != CENTRAL:
                return "a central directory entry is damaged"
            (flags, method, crc, csize, nlen, elen, clen, offset) = (struct.unpack_from("<H", cd, at + 8)[0],
                struct.unpack_from("<H", cd, at + 10)[0], *struct.unpack_from("<II", cd, at + 16),
                *struct.unpack_from("<HHH", cd, at + 28), struct.unpack_from("<I", cd, at + 42)[0])
            entries.append((offset, cd[at + 46:at + 46 + nlen], flags, method, crc, csize))
            at += 46 + nlen + elen + clen
        if at != len(cd):
            return "its central directory holds more than its entries"
        pos = 0
        for offset, name, flags, method, crc, csize in sorted(entries):
            label = name.decode("utf-8", errors="replace")
            if offset != pos:
                return f"{offset - pos} bytes {'before' if pos == 0 else 'between entries before'} {label!r}" \
                    if offset > pos else f"entries overlap at {label!r}"
            f.seek(pos)
            head = f.read(30)
            if len(head) < 30 or struct.unpack_from("<I", head)[0] != LOCAL:
                return f"no local header where the central directory puts {label!r}"
            lflags, lmethod, _t, _d, lcrc, lcsize, lusize, lnlen, lelen = struct.unpack_from("<HHHHIIIHH", head, 6)
            if f.read(lnlen) != name:
                return f"the local header of {label!r} names another file"
            if 0xFFFFFFFF in (lcsize, lusize, csize):
                return f"{label!r} has ZIP64 sizes (no wheel of ours needs them)"
            if lmethod != method or (not flags & 8 and (lcrc, lcsize) != (crc, csize)):
                return f"the local header of {label!r} disagrees with its central directory entry"
            pos += 30 + lnlen + lelen + csize
            if flags & 8:  # a data descriptor follows the data: its own signature, optional, then CRC and sizes
                f.seek(pos)
                pos += 16 if struct.unpack("<I", f.read(4).ljust(4, b"\0"))[0] == DESCRIPTOR else 12
        if pos != cd_off:
            return f"{cd_off - pos} bytes between the last entry and the central directory" if pos < cd_off \
                else "the last entry runs into the central directory"
    return None


def _check_archive(wheel: Path) -> tuple[list[zipfile.ZipInfo], str | None]:
    """(members, None) when the archive is one a resolver reads the same way ours does, every member as
    RECORD says (its size in the central directory before anything is read, then its sha256 read in bounded chunks);
    else (members, the first problem).

    Hand-rolled rather than `wheel`'s WheelFile: that reads each member whole into memory and takes a duplicated
    name, where installers disagree on which copy wins. The layout first (layout_problem): nothing is opened as a
    zip that readers could read differently."""
    layout = layout_problem(wheel)
    if layout:
        return [], layout
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            return infos, f"duplicate entries in the archive (installers disagree on which wins): {dupes[:5]}"
        unsafe = [n for n in names if n.startswith("/") or "\\" in n or "\0" in n
                  or any(part in ("", ".", "..") for part in n.rstrip("/").split("/"))]
        if unsafe:
            return infos, f"member names that are no plain relative path (absolute, '.', '..', empty): {unsafe[:5]}"
        records = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
        if len(records) != 1:
            return infos, f"{len(records)} .dist-info/RECORD files (exactly one is expected)"
        big = [f"{i.filename} ({i.file_size} bytes)" for i in infos if i.file_size > MAX_MEMBER]
        if big or sum(i.file_size for i in infos) > MAX_TOTAL:
            return infos, (f"members larger than any of ours (over {MAX_MEMBER >> 20} MiB, or {MAX_TOTAL >> 20} MiB "
                           f"in all): {big[:5]}")
        entries = _record_entries(zf.read(records[0]).decode("utf-8", errors="replace"))
        if isinstance(entries, str):
            return infos, entries
        unrecorded = sorted(set(names) - set(entries) - {records[0]})
        absent = sorted(set(entries) - set(names))
        if unrecorded or absent:
            return infos, (f"RECORD and the archive disagree: not in RECORD {unrecorded[:5]}, "
                           f"not in the archive {absent[:5]}")
        for i in infos:
            if i.filename == records[0]:
                continue
            digest, size = entries[i.filename]
            if i.file_size != size:
                return infos, f"{i.filename} is {i.file_size} bytes in the archive, RECORD says {size}"
            h, n = hashlib.sha256(), 0
            with zf.open(i) as f:
                while chunk := f.read(CHUNK):
                    n += len(chunk)
                    if n > size:
                        return infos, f"{i.filename} unpacks to more than the {size} bytes RECORD says"
                    h.update(chunk)
            if h.hexdigest() != digest:
                return infos, f"{i.filename} does not match its sha256 in RECORD"
    return infos, None


def open_wheel(wheel: Path, v: Verdict):
    """(name, version, tag, members) of a wheel, or None with the problem recorded. Members are read lazily, after
    the archive passed _check_archive. A variant wheel's label is v.facts["variant"] (None for any other)."""
    base, v.facts["variant"] = split_variant(wheel.name)
    try:
        name, version, _, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as exc:
        v.problems.append(f"bad wheel file name: {exc}")
        return None
    if len(tags) != 1:
        v.problems.append(f"{wheel.name} carries {len(tags)} tags; exactly one (cpXY-cpXY-<platform>) is expected")
        return None
    try:
        infos, problem = _check_archive(wheel)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError, ValueError) as exc:
        problem = f"not a readable zip archive ({type(exc).__name__}: {exc})"  # a damaged archive is the wheel's
    if problem:
        v.problems.append(f"RECORD check failed: {problem}")
        return None
    names = [i.filename for i in infos]
    links = [i.filename for i in infos if (i.external_attr >> 16) & 0o170000 == 0o120000]
    if links:
        v.problems.append(f"symbolic links in the archive: {links}")
    v.facts["names"] = set(names)
    return canonicalize_name(name), str(version), next(iter(tags)), Members(wheel, [n for n in names
                                                                                 if not n.endswith("/RECORD")])


def python_of(tag) -> str | None:
    """'3.11' for a cp311-cp311 wheel tag, '3.12' for cp312-abi3 (the oldest CPython it serves), '3.14t' for
    cp314-cp314t (free-threaded); None for any other interpreter or ABI."""
    cp = tag.interpreter
    if not re.fullmatch(r"cp3\d+", cp) or tag.abi not in (cp, "abi3", cp + "t"):
        return None
    return f"{cp[2]}.{cp[3:]}" + ("t" if tag.abi == cp + "t" else "")


def accounted(v: Verdict, names: set[str], expected: set[str]) -> None:
    """Every file in the archive is one we expect, and every expected one is there."""
    extra, missing = sorted(names - expected), sorted(expected - names)
    if extra:
        v.problems.append(f"files that do not belong in the wheel: {extra[:10]}")
    if missing:
        v.problems.append(f"files missing from the wheel: {missing[:10]}")


def check_wheel_file(v: Verdict, files: dict, info: str, tag, purelib: bool) -> None:
    want = "Wheel-Version: 1.0\nGenerator: "
    text = files.get(f"{info}/WHEEL", b"").decode(errors="replace")
    if not text.startswith(want) or f"Root-Is-Purelib: {'true' if purelib else 'false'}" not in text \
            or f"Tag: {tag}" not in text:
        v.problems.append(f"{info}/WHEEL does not describe this wheel (tag {tag})")


def audit_and_twine(v: Verdict, wheel: Path, tag, p: pins_mod.Pins, twine: bool, memo_dir: Path | None) -> None:
    try:
        proven, problems = proven_tag(audit(wheel, memo_dir), external_ok(p))
        v.problems += problems
        v.facts["auditwheel_sym_tag"] = proven
        if proven and manylinux_version(tag.platform) is None:
            v.problems.append(f"platform tag {tag.platform} is not a manylinux tag")
        elif proven and tag_arch(proven) != tag_arch(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel sees {tag_arch(proven)} binaries ({proven})")
        elif proven and manylinux_version(proven) > manylinux_version(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel proves only {proven}")
    except (OeqWheelsError, ValueError) as exc:
        v.problems.append(str(exc))
    if twine:
        problem = twine_check(wheel, memo_dir)
        if problem:
            v.problems.append(f"twine check failed: {problem}")
    v.facts.update(tag=str(tag), size=wheel.stat().st_size, sha256=sha256_file(wheel))


def file_entry(x) -> tuple[str, str, str, str]:
    """A pinned file (pins.Pinned) or a recorded one (manifest.Input), comparable with each other."""
    return (x.name, x.version, x.file, x.sha256)


def field_differences(what: str, record, want: dict, files: tuple[str, ...] = (),
                      file_lists: tuple[str, ...] = ()) -> list[str]:
    """One line for each field of a record (a manifest, a build record) that is not what the pins say. The fields
    in `files` are one recorded file each, those in `file_lists` a tuple of them: both compared as file_entry."""
    got = {k: getattr(record, k) for k in want}
    got.update({k: file_entry(got[k]) for k in files})
    got.update({k: tuple(file_entry(i) for i in got[k]) for k in file_lists})
    return [f"{what} {k} is {got[k]!r}, pins say {want[k]!r}" for k in want if got[k] != want[k]]
