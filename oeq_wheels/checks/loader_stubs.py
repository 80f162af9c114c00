"""Load stubs: the NVIDIA libraries a check on a machine without a GPU loads but never calls, made from what the
libraries present need of them, so that such a check needs none of NVIDIA's wheels (about 2.6 GB per CUDA torch).

On a machine without a GPU, `import torch`, loading OEq's precompiled extension and FastMACE's decisions load
torch's NVIDIA libraries (NEEDED) and call none of them. For each library a file of the install NEEDS that neither
the install nor the system has, a stub of that soname defines exactly what the install's files take from it: each
versioned symbol under its version (the importers' own version needs name the library), and the unversioned
symbols that nothing present defines. Every function returns 100 (CUDA's "no device"), every object is zeroed.
The stubs are put first on LD_LIBRARY_PATH; libcuda.so.1 is left to driver_stub (OEQ_CUDA_DRIVER_LIBRARY names it).

The build's link stubs (oeq_wheels/inputs/link_stubs.py) are not loadable: they carry symbols without code, and
`import torch` crashes on them. These are, and they are never shipped: tests only, beside the real libraries'
proof on the GPU machine (docs/validation.md).
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from fastmace_oeq_ext.cudaflags import DRIVER_SONAME

from ..pins import OeqLine

from .. import proc
from ..elf import dynamic_symbol_table, elf_facts
from ..errors import LoaderStubError

# NVIDIA's libraries (CUDA's runtime and math libraries, CUPTI, cuDNN, NCCL, NVRTC, nvJitLink, NVSHMEM, cuFile): the
# only ones stubbed, when the install lacks them, even where the system has one (a CUDA toolkit's in the loader's
# cache), so that every machine loads the same stubs. Any other library is the loader's to find (Triton's
# libtriton.so, NEEDED by name and loaded by path first).
NVIDIA = re.compile(r"lib(cu|nv|nccl)\w*\.so(\.\d+)*")
ELF_MAGIC = b"\x7fELF"
DISPATCH_LIBRARY = OeqLine.dispatch_library
SYSTEM_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


def _elf_files(root: Path) -> list[Path]:
    out = []
    for p in root.rglob("*.so*"):
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                if f.read(4) == ELF_MAGIC:
                    out.append(p)
    return out


def system_libraries(sysroot: Path | None = None) -> dict[str, Path]:
    """The system's shared libraries by file name, as the loader finds them (its cache, then its default folders).
    sysroot: another system's root file system (a Debian root of another CPython or architecture): its default
    folders and their multiarch ones, each link followed inside that root."""
    found: dict[str, Path] = {}
    if sysroot is not None:
        for d in SYSTEM_DIRS:
            base = sysroot / d.lstrip("/")
            for folder in [base, *sorted(base.glob("*-linux-gnu*"))] if base.is_dir() else []:
                for p in sorted(folder.glob("*.so*")):
                    target = _inside(sysroot, p)
                    if target is not None:
                        found.setdefault(p.name, target)
        return found
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(ldconfig, os.X_OK):
            r = proc.run([ldconfig, "-p"], capture_output=True, text=True)
            for m in re.finditer(r"^\s+(\S+) \(.*\) => (\S+)$", r.stdout, re.M):
                found.setdefault(m.group(1), Path(m.group(2)))
            break
    for d in SYSTEM_DIRS:
        for p in Path(d).glob("*.so*") if Path(d).is_dir() else []:
            found.setdefault(p.name, p)
    return found


def _inside(sysroot: Path, path: Path, hops: int = 16) -> Path | None:
    """path's file with each link (absolute ones too) followed inside sysroot; None where it leads nowhere."""
    while path.is_symlink() and hops:
        link = Path(os.readlink(path))
        path, hops = (sysroot / link.relative_to("/") if link.is_absolute() else path.parent / link), hops - 1
    return path if path.is_file() else None


def _needed(path: Path) -> tuple[list[str], list[Path]]:
    """(NEEDED, the folders its RUNPATH or RPATH names, $ORIGIN expanded)."""
    with open(path, "rb") as f:
        facts = elf_facts(f)
    origin = str(path.parent)
    return facts["needed"], [Path(d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin))
                             for d in (facts["runpath"] or facts["rpath"] or "").split(":") if d]


def _symbols(path: Path) -> tuple[dict, set]:
    """({symbol: (type, the file its version names or None, version or None)} needed and not weak, {defined})."""
    with open(path, "rb") as f:
        table = dynamic_symbol_table(f)
    return ({s.name: (s.type, s.library, s.version) for s in table if not s.defined and not s.weak},
            {s.name for s in table if s.defined})


def _dispatch_bound(files) -> set[str]:
    """The CUDA functions the files' CUDA dispatch libraries (oeq/dispatch/) bind at import, by name, from the libraries
    torch loaded: both spellings of the one the majors name differently."""
    from ..oeq.gate import OTHER_NAME, dispatch_exports
    bound: set[str] = set()
    for f in files:
        if f.name == DISPATCH_LIBRARY:
            bound |= dispatch_exports(f.read_bytes())
    return bound | {OTHER_NAME[n] for n in bound if n in OTHER_NAME}


def _dispatch_libraries(bound: set[str], sonames: set[str]) -> dict[str, set[str]]:
    """{soname: functions} the dispatch library binds from each CUDA library of the majors whose runtime is among
    sonames (libcudart.so.N: NVRTC and cuBLAS of N too, which nothing NEEDS: it finds them beside the runtime)."""
    from ..oeq.gate import CUDA_FUNCTION, CUDA_LIBRARY
    majors = {n.rsplit(".", 1)[1] for n in sonames if re.fullmatch(r"libcudart\.so\.\d+", n)}
    return {f"{stem}.{m}": {n for n in bound if CUDA_LIBRARY[CUDA_FUNCTION.match(n).group(1)] == stem}
            for m in majors for stem in CUDA_LIBRARY.values()} if bound else {}


def _interpreter_files(interpreter: Path) -> list[str]:
    """The interpreter's executable and, for a shared build, its libpython: what defines the Python C API."""
    r = proc.run([str(interpreter), "-c", "import os, sys, sysconfig; print(os.path.realpath(sys.executable)); "
                  "print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', "
                  "sysconfig.get_config_var('LDLIBRARY') or ''))"], capture_output=True, text=True, check=True)
    exe, lib = (r.stdout.splitlines() + ["", ""])[:2]
    # LDLIBRARY of a static build (a CPython built here: inputs/freethreaded.py) is libpython3.X.a: no dynamic symbols
    return [f for f in (exe, lib) if os.path.isfile(f) and (f == exe or ".so" in os.path.basename(f))]


def plan(root: Path, interpreter: Path, system: dict[str, Path] | None = None,
         sysroot: Path | None = None) -> dict[str, dict[str, tuple]]:
    """{missing soname: {symbol: (type, version or None)}} for the ELF files under root (a site-packages) run by
    interpreter: what a stub of each NVIDIA library that root's files NEED and the install lacks must define.
    system: the system's libraries (default: the loader's), whose symbols nothing stubs. sysroot: the root file
    system the install runs in (another CPython's or architecture's): its libraries are the system's, and
    interpreter, a path inside it, is read, not run."""
    files = _elf_files(root)
    # What loading the install's own modules loads, found as the loader finds it (the importer's RUNPATH): every
    # library outside NVIDIA's folder (torch's, OEq's, Triton's) and what it NEEDS, transitively; not
    # NVIDIA's plugins that nothing NEEDS (NVSHMEM's transports, which need MPI and UCX, are dlopen()ed by choice). A
    # library of the same name elsewhere in the install (Triton's own CUPTI) is not one the loader finds.
    needs: dict[Path, list[str]] = {}
    missing: set[str] = set()
    todo = [p.resolve() for p in files if p.relative_to(root).parts[0] != "nvidia"]
    while todo:
        p = todo.pop()
        if p in needs:
            continue
        needed, folders = _needed(p)
        needs[p] = needed
        for n in needed:
            found = next((d / n for d in folders if (d / n).is_file()), None)
            if found:
                todo.append(found.resolve())
            elif n != DRIVER_SONAME and NVIDIA.fullmatch(n):
                missing.add(n)
    dispatched = _dispatch_libraries(_dispatch_bound(needs), missing)
    missing |= set(dispatched)
    if not missing:  # an install with NVIDIA's wheels: decided from NEEDED alone, in a second or two
        return {}
    system = system_libraries(sysroot) if system is None else system
    symbols = {p: _symbols(p) for p in needs}
    defined = set().union(*(d for _, d in symbols.values()))
    python = [_inside(sysroot, interpreter)] if sysroot else _interpreter_files(interpreter)
    if None in python:
        raise LoaderStubError(f"load stubs: no interpreter {interpreter} in the root {sysroot}")
    for lib in {*map(str, python)} | {str(system[n]) for needed in needs.values() for n in needed
                                                    if n in system and n not in missing}:
        defined |= _symbols(Path(lib))[1]
    out: dict[str, dict[str, tuple]] = {n: {} for n in missing}
    for p, needed in needs.items():
        gone = [n for n in needed if n in missing]
        if not gone:
            continue
        undefined = symbols[p][0]
        loose = {s: (t, None) for s, (t, soname, _v) in undefined.items() if soname is None and s not in defined}
        for s, (t, soname, version) in undefined.items():
            if soname in missing:
                out[soname][s] = (t, version)
        # Unversioned symbols say no library: each missing one this file needs that has no versions of its own.
        for n in [g for g in gone if not any(v for _t, v in out[g].values())] or gone:
            for s, tv in loose.items():
                out[n].setdefault(s, tv)
    for soname, names in dispatched.items():  # bound by name under the library's own version, as NVIDIA's define them
        for n in names:
            out[soname].setdefault(n, ("STT_FUNC", soname))
    return out


def _source(symbols: dict[str, tuple]) -> str:
    lines = ["/* a load stub: every function returns 100 (no device), every object is zeroed */"]
    for name, (typ, _version) in sorted(symbols.items()):
        if typ == "STT_OBJECT":
            lines.append(f"char {name}[256] __attribute__((aligned(64)));")
        elif typ == "STT_TLS":
            lines.append(f"__thread char {name}[256];")
        else:
            lines.append(f"int {name}(void) {{ return 100; }}")
    return "\n".join(lines) + "\n"


def _version_script(symbols: dict[str, tuple]) -> str:
    nodes: dict[str, list[str]] = {}
    for name, (_t, version) in sorted(symbols.items()):
        if version:
            if not re.fullmatch(r"[\w.]+", version):
                raise LoaderStubError(f"load stubs: version {version!r} is not one a version script can name")
            nodes.setdefault(version, []).append(name)
    return "".join(f"{v} {{ global: {' '.join(s + ';' for s in names)} }};\n" for v, names in nodes.items())


def lacking(root: Path) -> set[str]:
    """The NVIDIA sonames (libcuda.so.1 aside) that an ELF file under root NEEDS and no file under root is named:
    plan's set counted without the loader's search (no RUNPATH, no closure), the cross-check make holds it to. As in
    plan, a file in NVIDIA's folder counts only where some file NEEDS it by name (a plugin is dlopen()ed by choice)."""
    files = {f: _needed(f)[0] for f in _elf_files(root)}
    wanted = {n for needed in files.values() for n in needed}
    present = {p.name for p in root.rglob("*.so*")}
    out = {n for f, needed in files.items() if f.relative_to(root).parts[0] != "nvidia" or f.name in wanted
           for n in needed if n != DRIVER_SONAME and NVIDIA.fullmatch(n) and n not in present}
    return out | {n for n in _dispatch_libraries(_dispatch_bound(files), out) if n not in present}


def make(root: Path, interpreter: Path, out: Path, cc: str = "gcc", sysroot: Path | None = None) -> list[Path]:
    """Write a stub for each library root's files need and nobody has into out; return them (none: nothing is
    missing, as in an install with NVIDIA's wheels). cc: a compiler for the install's architecture; sysroot: as
    plan's. The set is exactly lacking(root), or nothing is written."""
    planned = plan(root, interpreter, sysroot=sysroot)
    expected = lacking(root)
    if set(planned) != expected:
        raise LoaderStubError(f"load stubs: the loader's walk of {root} lacks {sorted(planned)}, its files' NEEDED "
                              f"lack {sorted(expected)}: one of the two counts is wrong")
    made = []
    for soname, symbols in sorted(planned.items()):
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src, script = Path(tmp) / "stub.c", Path(tmp) / "stub.map"
            src.write_text(_source(symbols))
            cmd = [cc, "-shared", "-fPIC", "-w", "-fno-builtin", f"-Wl,-soname,{soname}", "-o", str(out / soname),
                   str(src)]
            versions = _version_script(symbols)
            if versions:
                script.write_text(versions)
                cmd.append(f"-Wl,--version-script={script}")
            r = proc.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise LoaderStubError(f"load stub {soname}: {cc} failed: {r.stderr.strip()[-300:]}")
        made.append(out / soname)
    return made
