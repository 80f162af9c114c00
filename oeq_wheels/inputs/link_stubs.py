"""Link stubs: a shared library's dynamic symbols, and nothing else, as a small ELF file the linker accepts.

The build links against torch's and NVIDIA's libraries but never runs them. What the linker reads of a shared
library is its soname, its dynamic symbols (name, type, binding, visibility, size, version) and its version
definitions; a stub with exactly those gives the same output as the library itself (bench/run.py --fetch-equal
and tests/unit/test_link_stubs.py compare). A stub of libtorch_cuda.so (~500 MB) is a few MB.

The symbols are read from the library's own tables: from a whole file by its section headers, or from the first
bytes of a file whose table places were pinned (oeq_wheels/pins.toml; the NVIDIA libraries keep their tables at
the start, so only that prefix is fetched). The view of those tables has a digest, and pins.toml names each
stubbed library by it: a stub is used only if its view has the pinned digest.

Written by hand with struct, for ELF64 little-endian (x86_64, aarch64): what llvm-ifs does, with no LLVM or
compiler needed (the build's inputs are made before any toolchain is chosen, and on any host).
"""
from __future__ import annotations

import hashlib
import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import LinkStubError

SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM = 3, 5, 6, 8, 11
SHT_GNU_VERDEF, SHT_GNU_VERSYM = 0x6FFFFFFD, 0x6FFFFFFF
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 4, 5, 6, 10, 11, 14
DT_VERSYM, DT_VERDEF, DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
STT_TLS = 6
STB_LOCAL = 0
SEC_BSS, SEC_TBSS = 7, 8   # the stub's sections of defined symbols (write_stub's layout)


@dataclass(frozen=True)
class Tables:
    """Where a library's dynamic-symbol tables lie: (file offset, size) of each; versym and verdef may be absent."""
    dynsym: tuple[int, int]
    dynstr: tuple[int, int]
    versym: tuple[int, int] | None = None
    verdef: tuple[int, int] | None = None

    @property
    def end(self) -> int:
        """How many bytes from the start of the file hold them all (and the ELF header)."""
        return max(o + s for o, s in (self.dynsym, self.dynstr, self.versym or (0, 64), self.verdef or (0, 64)))

    def to_list(self) -> list[int]:
        return [*self.dynsym, *self.dynstr, *(self.versym or (0, 0)), *(self.verdef or (0, 0))]

    @classmethod
    def from_list(cls, v: list[int]) -> "Tables":
        if len(v) != 8 or not all(isinstance(x, int) and x >= 0 for x in v):
            raise LinkStubError(f"stub tables {v!r} are not 8 offsets and sizes; re-pin with `oeq-wheels pins --records`")
        return cls((v[0], v[1]), (v[2], v[3]), (v[4], v[5]) if v[5] else None, (v[6], v[7]) if v[7] else None)


@dataclass(frozen=True)
class View:
    """What the linker reads of a shared library: enough to write a stub, and to compare two libraries."""
    machine: int
    osabi: int
    flags: int
    soname: str
    verdefs: tuple      # ((flags, ndx, (name, parent names...)), ...) in file order
    symbols: tuple      # ((name, st_info, st_other, abs, value, size, versym), ...) the defined global symbols, in order

    def digest(self) -> str:
        doc = {"machine": self.machine, "osabi": self.osabi, "flags": self.flags, "soname": self.soname,
               "verdefs": self.verdefs, "symbols": self.symbols}
        return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()


def _header(data) -> tuple[int, int, int, int, int, int]:
    """(machine, osabi, flags, shoff, shnum, shentsize) of an ELF64 little-endian file; LinkStubError otherwise."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise LinkStubError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise LinkStubError("not a 64-bit little-endian ELF file (the only kind the pinned architectures have)")
    machine, _ver, _entry, _phoff, shoff, flags, _eh, _phe, _phn, shentsize, shnum, _shstrndx = \
        struct.unpack_from("<HIQQQIHHHHHH", data, 18)
    return machine, data[7], flags, shoff, shnum, shentsize


def find_tables(data) -> tuple[Tables, str]:
    """The table places of a whole library, from its section headers; and its DT_SONAME ('' if it has none)."""
    _m, _o, _f, shoff, shnum, shentsize = _header(data)
    if shoff == 0 or shoff + shnum * shentsize > len(data):
        raise LinkStubError("the section headers are missing or cut off (a whole library is needed)")
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    by_type = {}
    for s in secs:
        by_type.setdefault(s[1], s)
    if SHT_DYNSYM not in by_type:
        raise LinkStubError("the library has no dynamic symbol table")
    dynsym = by_type[SHT_DYNSYM]
    dynstr = secs[dynsym[6]]
    place = lambda s: (s[4], s[5])  # noqa: E731 (offset, size)
    tables = Tables(place(dynsym), place(dynstr), place(by_type[SHT_GNU_VERSYM]) if SHT_GNU_VERSYM in by_type else None,
                    place(by_type[SHT_GNU_VERDEF]) if SHT_GNU_VERDEF in by_type else None)
    soname = ""
    if SHT_DYNAMIC in by_type:
        dyn = by_type[SHT_DYNAMIC]
        for off in range(dyn[4], dyn[4] + dyn[5], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == DT_NULL:
                break
            if tag == DT_SONAME:
                soname = _string(data, tables.dynstr, val)
    return tables, soname


def _string(data, strtab: tuple[int, int], index: int) -> str:
    start = strtab[0] + index
    if index >= strtab[1]:
        raise LinkStubError(f"a string index ({index}) lies outside the string table")
    return bytes(data[start:data.find(b"\0", start, strtab[0] + strtab[1])]).decode()


def read_view(data, tables: Tables, soname: str) -> View:
    """The view of a library's tables; data holds at least its first tables.end bytes."""
    machine, osabi, flags, *_ = _header(data)
    if len(data) < tables.end:
        raise LinkStubError(f"{soname}: {len(data)} bytes given, the tables end at {tables.end}")
    verdefs = []
    if tables.verdef and tables.verdef[1]:
        off, left = tables.verdef[0], tables.verdef[1]
        while True:
            _v, vflags, ndx, cnt, _hash, aux, nxt = struct.unpack_from("<HHHHIII", data, off)
            names, a = [], off + aux
            for _ in range(cnt):
                name, anext = struct.unpack_from("<II", data, a)
                names.append(_string(data, tables.dynstr, name))
                a += anext
            verdefs.append((vflags, ndx, tuple(names)))
            if not nxt or nxt > left:
                break
            off, left = off + nxt, left - nxt
    symbols = []
    count = tables.dynsym[1] // 24
    for i in range(1, count):
        name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, tables.dynsym[0] + 24 * i)
        if shndx == SHN_UNDEF or info >> 4 == STB_LOCAL:
            continue
        versym = struct.unpack_from("<H", data, tables.versym[0] + 2 * i)[0] if tables.versym else 1
        symbols.append((_string(data, tables.dynstr, name), info, other, shndx == SHN_ABS, value, size, versym))
    return View(machine, osabi, flags, soname, tuple(verdefs), tuple(symbols))


def view_of_file(path: Path) -> tuple[View, Tables]:
    """The view of a whole library on disk, and where its tables lie (mapped, not read: libtorch is ~500 MB)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            tables, soname = find_tables(data)
            return read_view(data, tables, soname or path.name), tables
        except LinkStubError as exc:
            raise LinkStubError(f"{path.name}: {exc}") from None
        except struct.error:
            raise LinkStubError(f"{path.name}: its tables are cut off or malformed") from None


def _sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        h ^= (h >> 24) & 0xF0
    return h & 0x0FFFFFFF


class _Strings:
    def __init__(self):
        self.data, self.index = bytearray(b"\0"), {"": 0}

    def add(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.data)
            self.data += s.encode() + b"\0"
        return self.index[s]


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def write_stub(view: View, out: Path) -> Path:
    """An ELF shared object with the view's soname, version definitions and symbols, each at its own address (so
    that the linker pairs weak and strong aliases as in the library) in a section without contents: a stub is
    linked against, never run. Written under a temporary name, then renamed."""
    strs = _Strings()
    soname = strs.add(view.soname)
    plain = [(v, z) for _n, i, _o, a, v, z, _s in view.symbols if not a and i & 0xF != STT_TLS]
    lo = min((v for v, _ in plain), default=0) & ~0xFFF
    hi = max((v + z for v, z in plain), default=lo + 16)
    tls_size = max((v + z for _n, i, _o, a, v, z, _s in view.symbols if not a and i & 0xF == STT_TLS), default=16)
    base = _align(hi + 1, 0x10000)   # the stub's own tables lie above every symbol's address
    syms, versyms = [b"\0" * 24], [0]
    for name, info, other, is_abs, value, size, versym in view.symbols:
        shndx = SHN_ABS if is_abs else SEC_TBSS if info & 0xF == STT_TLS else SEC_BSS
        syms.append(struct.pack("<IBBHQQ", strs.add(name), info, other, shndx, value, size))
        versyms.append(versym)
    verdef = bytearray()
    for i, (vflags, ndx, names) in enumerate(view.verdefs):
        last = i == len(view.verdefs) - 1
        verdef += struct.pack("<HHHHIII", 1, vflags, ndx, len(names), _sysv_hash(names[0].encode()), 20,
                              0 if last else 20 + 8 * len(names))
        for j, n in enumerate(names):
            verdef += struct.pack("<II", strs.add(n), 0 if j == len(names) - 1 else 8)
    nsyms = len(syms)
    # .hash with one bucket: a chain through every symbol (enough for any reader; the stub is never loaded).
    hash_ = struct.pack(f"<II{nsyms + 1}I", 1, nsyms, nsyms - 1, 0, *range(0, nsyms - 1))
    layout = [  # name, type, flags, data, align, entsize, link, info; the indexes are SEC_* and the links below
        (".hash", SHT_HASH, 2, hash_, 8, 4, 2, 0),
        (".dynsym", SHT_DYNSYM, 2, b"".join(syms), 8, 24, 3, 1),
        (".dynstr", SHT_STRTAB, 2, None, 1, 0, 0, 0),   # filled once every string is added
        (".gnu.version", SHT_GNU_VERSYM, 2, struct.pack(f"<{nsyms}H", *versyms), 2, 2, 2, 0),
        (".gnu.version_d", SHT_GNU_VERDEF, 2, bytes(verdef), 8, 0, 3, len(view.verdefs)),
        (".dynamic", SHT_DYNAMIC, 3, None, 8, 16, 3, 0),
        (".bss", SHT_NOBITS, 3, hi - lo, 4096, 0, 0, 0),
        (".tbss", SHT_NOBITS, 0x403, tls_size, 64, 0, 0, 0),
        (".shstrtab", SHT_STRTAB, 0, None, 1, 0, 0, 0),
    ]
    dynstr = bytes(strs.data)
    shstr = _Strings()
    for n, *_r in layout:
        shstr.add(n)
    offsets, sizes, blobs, addrs = {}, {}, {}, {}
    pos = 64 + 4 * 56
    for name, typ, flags, data, align, *_ in layout:
        if name == ".dynstr":
            data = dynstr
        elif name == ".dynamic":
            entries = [(DT_SONAME, soname), (DT_HASH, addrs[".hash"]), (DT_STRTAB, addrs[".dynstr"]),
                       (DT_SYMTAB, addrs[".dynsym"]), (DT_STRSZ, len(dynstr)), (DT_SYMENT, 24),
                       (DT_VERSYM, addrs[".gnu.version"])]
            if view.verdefs:
                entries += [(DT_VERDEF, addrs[".gnu.version_d"]), (DT_VERDEFNUM, len(view.verdefs))]
            data = b"".join(struct.pack("<qQ", t, v) for t, v in [*entries, (DT_NULL, 0)])
        elif name == ".shstrtab":
            data = bytes(shstr.data)
        pos = _align(pos, align)
        offsets[name] = pos
        if typ == SHT_NOBITS:
            sizes[name] = data
            addrs[name] = lo if name == ".bss" else base + pos
        else:
            sizes[name], blobs[name] = len(data), data
            addrs[name] = base + pos if flags & 2 else 0
            pos += len(data)
    shoff = _align(pos, 8)
    image = bytearray(shoff + 64 * (len(layout) + 1))
    for name, data in blobs.items():
        image[offsets[name]:offsets[name] + len(data)] = data
    shdrs = [b"\0" * 64]
    for name, typ, flags, _d, align, entsize, link, info in layout:
        shdrs.append(struct.pack("<IIQQQQIIQQ", shstr.index[name], typ, flags, addrs[name], offsets[name],
                                 sizes[name], link, info, align, entsize))
    image[shoff:] = b"".join(shdrs)
    image_end = offsets[".dynamic"] + sizes[".dynamic"]
    seg = lambda typ, flags, off, addr, filesz, memsz, align: struct.pack(  # noqa: E731
        "<IIQQQQQQ", typ, flags, off, addr, addr, filesz, memsz, align)
    phdrs = [seg(1, 6, 0, lo, 0, hi - lo, 0x1000),                                          # PT_LOAD: the symbols
             seg(1, 4, 0, base, image_end, image_end, 0x1000),                              # PT_LOAD: the tables
             seg(2, 6, offsets[".dynamic"], addrs[".dynamic"], sizes[".dynamic"], sizes[".dynamic"], 8),  # PT_DYNAMIC
             seg(7, 4, offsets[".tbss"], addrs[".tbss"], 0, tls_size, 64)]                  # PT_TLS
    image[64:64 + 4 * 56] = b"".join(phdrs)
    ident = b"\x7fELF" + bytes([2, 1, 1, view.osabi]) + b"\0" * 8
    image[:64] = ident + struct.pack("<HHIQQQIHHHHHH", 3, view.machine, 1, 0, 64, shoff, view.flags, 64, 56, 4, 64,
                                     len(layout) + 1, len(layout))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(bytes(image))
    tmp.replace(out)
    return out
