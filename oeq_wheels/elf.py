"""The ELF facts the gate and the build read from a library's bytes: NEEDED, RUNPATH, RPATH, the machine, whether it
is stripped, and its dynamic symbols with their versions (pyelftools, nothing run)."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection


# Mangled names of torch's C++ namespaces: c10::, at::, torch::.
TORCH_CXX = re.compile(r"(?:^_ZN|[0-9])(?:3c10|2at|5torch)")


def _elf(data) -> ELFFile:
    """data: a library's bytes (a wheel's member), or the library opened as a binary file (read as needed: libtorch is
    ~500 MB)."""
    return ELFFile(data if hasattr(data, "read") else io.BytesIO(data))


def elf_facts(data) -> dict:
    elf = _elf(data)
    needed, runpath, rpath = [], None, None
    for sec in elf.iter_sections():
        if isinstance(sec, DynamicSection):
            for tag in sec.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath = tag.runpath
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath = tag.rpath
    sections = [s.name for s in elf.iter_sections()]
    return {"needed": needed, "runpath": runpath, "rpath": rpath, "machine": elf["e_machine"],
            "stripped": ".symtab" not in sections and not any(s.startswith(".debug") for s in sections)}


@dataclass(frozen=True)
class DynamicSymbol:
    name: str
    defined: bool
    type: str             # STT_FUNC, STT_OBJECT, ...
    weak: bool
    version: str | None
    library: str | None   # for a needed symbol with a version: the file that version need names


def dynamic_symbol_table(data) -> list[DynamicSymbol]:
    """Every named dynamic symbol of a library, defined or needed, with its version."""
    elf = _elf(data)
    dynsym = elf.get_section_by_name(".dynsym")
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    names: dict[int, tuple[str, str | None]] = {}  # version index -> (version, the file a version need names)
    for sec in elf.iter_sections():
        if isinstance(sec, GNUVerNeedSection):
            for verneed, auxes in sec.iter_versions():
                for aux in auxes:
                    names[aux.entry["vna_other"]] = (aux.name, verneed.name)
        elif sec.name == ".gnu.version_d":
            for verdef, auxes in sec.iter_versions():
                for aux in auxes:
                    names.setdefault(verdef.entry["vd_ndx"], (aux.name, None))
                    break
    out = []
    for i, sym in enumerate(dynsym.iter_symbols() if dynsym else []):
        if not sym.name:
            continue
        version = library = None
        if versym is not None:
            ndx = versym.get_symbol(i)["ndx"]  # an int, or VER_NDX_LOCAL / VER_NDX_GLOBAL
            version, library = names.get(ndx & 0x7FFF, (None, None)) if isinstance(ndx, int) else (None, None)
        out.append(DynamicSymbol(sym.name, sym["st_shndx"] != "SHN_UNDEF", sym["st_info"]["type"],
                                 sym["st_info"]["bind"] == "STB_WEAK", version, library))
    return out


def dynamic_symbols(data, defined: bool) -> set[tuple[str, str | None]]:
    """(name, version) of the dynamic symbols a library defines (defined=True) or needs."""
    return {(s.name, s.version) for s in dynamic_symbol_table(data) if s.defined == defined}


def glibc_max_symbol(data: bytes) -> str:
    """The newest GLIBC_x.y symbol version a library needs (post1's manifest key glibc_max_symbol)."""
    found = [tuple(int(x) for x in v[len("GLIBC_"):].split("."))
             for _, v in dynamic_symbols(data, defined=False) if v and re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)]
    return "GLIBC_" + ".".join(map(str, max(found))) if found else "none"
