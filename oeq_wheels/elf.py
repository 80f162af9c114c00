"""The ELF facts the gate and the build read from a library's bytes: NEEDED, RUNPATH, RPATH, the machine, whether it
is stripped, and its dynamic symbols with their versions (pyelftools, nothing run)."""
from __future__ import annotations

import io
import re

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection


# Mangled names of torch's C++ namespaces: c10::, at::, torch::.
TORCH_CXX = re.compile(r"(?:^_ZN|[0-9])(?:3c10|2at|5torch)")


def _elf(data: bytes) -> ELFFile:
    return ELFFile(io.BytesIO(data))


def elf_facts(data: bytes) -> dict:
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


def dynamic_symbols(data: bytes, defined: bool) -> set[tuple[str, str | None]]:
    """(name, version) of the dynamic symbols a library defines (defined=True) or needs."""
    elf = _elf(data)
    dynsym = elf.get_section_by_name(".dynsym")
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    names: dict[int, str] = {}
    for sec in elf.iter_sections():
        if isinstance(sec, GNUVerNeedSection):
            for _verneed, auxes in sec.iter_versions():
                for aux in auxes:
                    names[aux.entry["vna_other"]] = aux.name
        elif sec.name == ".gnu.version_d":
            for verdef, auxes in sec.iter_versions():
                for aux in auxes:
                    names.setdefault(verdef.entry["vd_ndx"], aux.name)
                    break
    out = set()
    for i, sym in enumerate(dynsym.iter_symbols()):
        if not sym.name or (sym["st_shndx"] != "SHN_UNDEF") != defined:
            continue
        ver = None
        if versym is not None:
            ndx = versym.get_symbol(i)["ndx"]  # an int, or VER_NDX_LOCAL / VER_NDX_GLOBAL
            ver = names.get(ndx & 0x7FFF) if isinstance(ndx, int) else None
        out.add((sym.name, ver))
    return out


def glibc_max_symbol(data: bytes) -> str:
    """The newest GLIBC_x.y symbol version a library needs (post1's manifest key glibc_max_symbol)."""
    found = [tuple(int(x) for x in v[len("GLIBC_"):].split("."))
             for _, v in dynamic_symbols(data, defined=False) if v and re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)]
    return "GLIBC_" + ".".join(map(str, max(found))) if found else "none"
