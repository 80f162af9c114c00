"""fastmace-oeq-ext's recipe (the Product protocol, oeq_wheels/product.py): per CPython, OEq's host sources compiled
with OEq's own JIT flags against that Python's pinned torch, linked once, packed as one wheel per OpenEquivariance
FastMACE may find beside it (pins: oeq_variants), each gated and placed."""
from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fastmace_oeq_ext.cudaflags import wheel_build_flags

from .. import driver_stub, elf, pins as pins_mod, tags, toolchain as tc, wheelfile
from ..errors import BuildError
from ..files import sha256_file
from ..inputs import pythons, unpack
from ..output import extra_dir
from ..product import Compile, Part, Run, Wheel, checked_torch, entry, proven_platform, verify_and_place
from ..progress import Stage
from . import assemble, compile as cc, link
from .gate import verify_wheel

NAME = "fastmace-oeq-ext"


@dataclass(frozen=True)
class Unpacked:
    """The inputs every Python's build shares."""

    oeq_root: Path
    cuda_root: Path
    pybind11_include: Path


@dataclass(frozen=True)
class Ready:
    """One Python's part, its torch tree made."""

    part: Part
    common: Unpacked


def parts(pins: pins_mod.Pins, pythons_: list[str], arches: list[str]) -> list[Part]:
    """One part per CPython of the matrix, each one wheel build (its torch tree is its own)."""
    # fastmace-oeq-ext is x86_64 only (FastMACE 1.0.0 limits it by marker and by its platform check).
    if pins.ext_arch.name not in arches:
        return []
    return [Part(pins_mod.cp_tag(v), pins.ext_arch.name, (Wheel(f"{pins.package_name} {pins_mod.cp_tag(v)}", v),),
                 pins_mod.cp_tag(v)) for v in pythons_ if v in pins.matrix.pythons]


def inputs(pins: pins_mod.Pins, parts_: list[Part]) -> list[pins_mod.Pinned]:
    return pins.all_inputs([p.key for p in parts_]) if parts_ else []


def common(run: Run, parts_: list[Part]) -> Unpacked | None:
    if not parts_:
        return None
    p, files, cache = run.pins, run.files, run.cache
    return Unpacked(unpack.oeq_tree(files[p.oeq.file], p.oeq, cache).resolve(),
                    unpack.cuda_tree([(n, files[n.file]) for n in p.matrix.nvidia], cache).resolve(),
                    unpack.pybind11_include(files[p.pybind11.file], p.pybind11, cache).resolve())


def trees(run: Run, part: Part) -> Path:
    """The Python's torch tree (the large download: a library's stub needs it whole once)."""
    pin = run.pins.matrix.torch_wheel(part.key)
    return unpack.torch_tree(run.files[pin.file], pin, run.cache, run.pins.torch_needed)


def setup(run: Run, part: Part, trees_) -> Ready:
    return Ready(part, run.unpacked[NAME])


def prepare(run: Run, ready: Ready) -> None:
    """Nothing is shared by a part's Pythons: a part is one Python."""


def compile_contexts(p: pins_mod.Pins, interp: pythons.Interpreter, torch_root: Path, oeq_root: Path,
                     cuda_root: Path, pybind11_include: Path) -> tuple[cc.CompileContext, cc.CompileContext]:
    """The compiler context for the source that includes Python.h (one Python) and for the others (every Python).

    All paths must be resolved: the compiler records real paths, which -ffile-prefix-map must match.
    """
    cuda = wheel_build_flags(cuda_root, require_driver=False)  # includes only; the link adds the driver
    if cuda is None:
        raise BuildError(f"the NVIDIA wheels in {cuda_root} lack a header or library")
    ext = oeq_root / "openequivariance" / "extension"
    python_include = os.path.realpath(interp.include)
    common_map = {str(ext): "openequivariance/extension", str(tc.SHIM_DIR): "oeq-wheels-shim"}
    prefix_map = {**common_map, str(torch_root): f"torch-{p.matrix.torch_version}", str(cuda_root): "nvidia",
                  str(pybind11_include): "pybind11/include", python_include: f"python{interp.version}"}
    glibc_shim = tags.manylinux_version(p.platform_tag) < (2, 32)
    ctx = cc.CompileContext(ext, torch_root, cuda.include_dirs, pybind11_include, python_include,
                            p.oeq_extension_name, cc.torch_cxx_std(torch_root), cc.torch_cxx11_abi(torch_root),
                            glibc_shim, prefix_map)
    # json11 includes only the C++ standard library, so the torch, CUDA and Python
    # include directories cannot change its object: without them one object serves every Python.
    shared = cc.CompileContext(**{**ctx.__dict__, "python_include": None, "torch_root": None,
                                  "cuda_includes": [], "prefix_map": common_map})
    return ctx, shared


def _contexts(run: Run, ready: Ready, interp: pythons.Interpreter):
    """(the torch pin, its tree, its version.py, the two compile contexts) of one Python."""
    p, u = run.pins, ready.common
    torch_pin = p.matrix.torch_wheel(interp.cp_tag)
    # Resolved paths: the compiler records real paths, which -ffile-prefix-map must match.
    torch_root = unpack.torch_tree(run.files[torch_pin.file], torch_pin, run.cache, p.torch_needed).resolve()
    tv = checked_torch(torch_root, torch_pin, p.matrix.torch_local, p.matrix.cuda)
    ctx, ctx_shared = compile_contexts(p, interp, torch_root, u.oeq_root, u.cuda_root, u.pybind11_include)
    return torch_pin, torch_root, tv, ctx, ctx_shared


def _compiles(run: Run, ready: Ready, ctx: cc.CompileContext, ctx_shared: cc.CompileContext) -> list[Compile]:
    p, objects = run.pins, run.objects_for(ready.part.arch)
    return [Compile(objects, ctx.oeq_ext / src, (ctx if src == p.oeq_python_source else ctx_shared).flags())
            for src in p.oeq_sources]


def compiles(run: Run, ready: Ready, interp: pythons.Interpreter | None) -> list[Compile]:
    if interp is None:
        return []
    _pin, _root, _tv, ctx, ctx_shared = _contexts(run, ready, interp)
    return _compiles(run, ready, ctx, ctx_shared)


def build(run: Run, ready: Ready, interp: pythons.Interpreter) -> list[dict]:
    """The fastmace-oeq-ext wheels of one Python: one library, one wheel per OEq variant."""
    p, tag, u = run.pins, interp.cp_tag, ready.common
    toolchain = run.toolchains[ready.part.arch]
    timings: dict = {}
    with tempfile.TemporaryDirectory(prefix=f"oeq-wheels-{tag}-") as tmp_s:
        tmp = Path(tmp_s)
        with Stage(tag, "inputs", timings):
            torch_pin, torch_root, tv, ctx, ctx_shared = _contexts(run, ready, interp)
        with Stage(tag, "compile", timings) as st:
            jobs = _compiles(run, ready, ctx, ctx_shared)
            with ThreadPoolExecutor(len(jobs)) as pool:
                results = list(pool.map(lambda c: c.objects.compile(c.source, c.flags), jobs))
            objs = [o for o, _ in results]
            st.note = f"{sum(hit for _, hit in results)}/{len(results)} from cache"
        with Stage(tag, "link", timings):
            driver_stub.make_stub(driver_stub.undefined_driver_symbols(objs), tmp / "stub", toolchain.cc)
            cuda = wheel_build_flags(u.cuda_root, driver_dir=str(tmp / "stub"))
            lib = link.link(objs, tmp / p.library_file, torch_root / "torch" / "lib", cuda, toolchain,
                            p.torch_libs, p.runpath())
        with Stage(tag, "audit", timings) as st:
            platform = proven_platform(p, {f"{p.import_name}/{p.library_file}": lib}, tag, tmp, st, tag,
                                       run.verdicts, p.platform_tag)
        flags = ctx.normalized(ctx.flags())
        lic = u.oeq_root / "LICENSE"
        lib_sha256, glibc = sha256_file(lib), elf.glibc_max_symbol(lib.read_bytes())
        rows = []
        # One library, one wheel per OpenEquivariance FastMACE may find beside it (pins: oeq_variants).
        for vp in p.ext_variants:
            who = tag if vp.name == "pypi" else f"{tag}-{vp.name}"
            manifest = assemble.make_manifest(
                vp, torch_git_version=tv["git_version"], torch_wheel=entry(torch_pin), python=tag,
                python_built_with=interp.full_version, platform=platform, sha256=lib_sha256, glibc_max_symbol=glibc,
                compiler=toolchain.release, flags=tuple(flags))
            with Stage(who, "wheel", timings):
                staged = assemble.stage(vp, tmp / who / "final", library=lib, manifest=manifest,
                                        oeq_license=lic, py_version=interp.version,
                                        tag=wheelfile.wheel_tag(tag, platform))
                whl = wheelfile.pack(staged, tmp / who / "out", p.source_date_epoch)
            check = lambda w: verify_wheel(w, p, expected_license=lic.read_bytes(), forbidden_paths=run.forbidden,
                                           memo_dir=run.verdicts, cache=run.cache)
            # PyPI's wheel goes to OUTDIR; a binary OEq line's goes beside that line's OEq wheels (its index).
            rows.append(verify_and_place(who, whl, check, "ELF, RECORD, auditwheel, twine check, licence, pins, "
                                         f"{p.consumer.label}", run.outdir if vp.name == "pypi" else
                                         extra_dir(run.outdir), run.force, platform, dict(timings), interp))
        return rows
