"""The binary openequivariance recipe (the Product protocol, oeq_wheels/product.py): per OEq line (on one
architecture) its stable extension's Python-independent part once (the AOTI library, the link stubs and the CUDA
dispatch library), then per CPython the module and one wheel of the unmodified sdist with those libraries; each gated
and placed beside the line's others (OUTDIR-extra)."""
from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fastmace_oeq_ext.oeq_build import FileHash, OeqBuild

from .. import pins as pins_mod, tags, toolchain as tc, wheelfile
from ..files import sha256_file
from ..inputs import pythons, unpack
from ..output import extra_dir
from ..product import Compile, Part, Run, Wheel, checked_torch, entry, proven_platform, verify_and_place
from ..progress import Stage
from . import stable, wheel as oeqpy
from .gate import verify_oeq_binary

NAME = "openequivariance"
STAGE_PREFIX = "oeq-"  # its parts' names in progress lines


@dataclass
class LineBuild:
    """One OEq line's Python-independent parts: its unpacked inputs, AOTI library and link stubs."""

    line: pins_mod.OeqLine
    trees: stable.StableTrees
    toolchain: tc.Toolchain      # the line's architecture's compilers (a cross toolchain on another host)
    objects: tc.ObjectCache
    oeq_root: Path               # the unpacked sdist the wheel carries
    aoti: Path | None = None
    stubs: Path | None = None
    dispatch: Path | None = None   # liboeq_cuda_dispatch.so (its folder is the modules' link path for it)

    @property
    def who(self) -> str:
        return f"{STAGE_PREFIX}{self.line.key}"

    def recipe(self, python_include: str | None = None, limited_api: bool = False,
               free_threaded: bool = False) -> stable.Recipe:
        ob = self.line
        return stable.Recipe(self.trees, tags.manylinux_version(ob.arch.platform_tag) < (2, 32),
                             python_include=python_include, torch_label=f"torch-{ob.torch.version}",
                             tls_gnu2=self.toolchain.accepts("-mtls-dialect=gnu2"), limited_api=limited_api,
                             free_threaded=free_threaded, module_name=ob.module_name, dispatch=ob.dispatch)

    def python_recipe(self, interp: pythons.Interpreter) -> stable.Recipe:
        # CPython's headers are the same on every 64-bit Linux architecture but pyconfig.h's few
        # machine-specific macros (x87/x64 assembler probes), which nanobind does not read: this
        # host's CPython serves a cross build (release.yml compares a native aarch64 build's checks).
        return self.recipe(python_include=os.path.realpath(interp.include), limited_api=self.line.is_abi3(interp.version),
                           free_threaded=self.line.free_threaded(interp.version))


def parts(pins: pins_mod.Pins, pythons_: list[str], arches: list[str]) -> list[Part]:
    """One part per line whose architecture is built; its wheels: the asked-for CPythons it serves (a line with none
    still has its trees made, as it always had)."""
    return [Part(l.key, l.arch.name, tuple(Wheel(f"openequivariance {l.key} {pins_mod.cp_tag(v)}", v)
                                           for v in pythons_ if v in l.pythons),
                 f"{STAGE_PREFIX}{l.key}", prepared=True, what=l)
            for l in pins.oeq_lines if l.arch.name in arches]


def inputs(pins: pins_mod.Pins, parts_: list[Part]) -> list[pins_mod.Pinned]:
    return list(dict.fromkeys(i for part in parts_ for i in part.what.inputs(pins.oeq)))


def common(run: Run, parts_: list[Part]) -> Path | None:
    """The unpacked sdist (every line's wheel carries it)."""
    p = run.pins
    return unpack.oeq_tree(run.files[p.oeq.file], p.oeq, run.cache).resolve() if parts_ else None


def stable_trees(pins: pins_mod.Pins, line: pins_mod.OeqLine, files: dict[str, Path], cache: Path) -> stable.StableTrees:
    """The unpacked inputs of one line's stable extension (resolved: the compiler records real paths)."""
    trees = stable.StableTrees(
        unpack.oeq_tree(files[pins.oeq.file], pins.oeq, cache).resolve(),
        unpack.torch_tree(files[line.torch.file], line.torch, cache,
                          frozenset(f"lib{l}.so" for l in line.torch_libs)).resolve(),
        unpack.cuda_tree([(n, files[n.file]) for n in line.nvidia], cache).resolve(),
        unpack.nanobind_tree(files[line.nanobind.file], line.nanobind, cache).resolve())
    checked_torch(trees.torch_root, line.torch, line.torch_local, line.cuda)
    return trees


def trees(run: Run, part: Part) -> stable.StableTrees:
    return stable_trees(run.pins, part.what, run.files, run.cache)


def setup(run: Run, part: Part, trees_: stable.StableTrees) -> LineBuild:
    return LineBuild(part.what, trees_, run.toolchains[part.arch], run.objects_for(part.arch), run.unpacked[NAME])


def compiles(run: Run, lb: LineBuild, interp: pythons.Interpreter | None) -> list[Compile]:
    """The AOTI library's sources and the stream stub (interp None), or one Python's module and nanobind sources."""
    ext, nb = lb.trees.ext, lb.trees.nanobind
    if interp is None:
        recipe = lb.recipe()
        return [*(Compile(lb.objects, ext / s, recipe.aoti(), "aoti") for s in stable.SOURCES),
                Compile(lb.objects, ext / "stubs" / "stream.cpp", recipe.stream_stub(), "stream")]
    recipe = lb.python_recipe(interp)
    return [*(Compile(lb.objects, ext / s, recipe.module(), "module") for s in stable.SOURCES),
            *([Compile(lb.objects, stable.IMPORT_GUARD, recipe.import_guard(), "module")] if recipe.dispatch else []),
            *(Compile(lb.objects, nb / "src" / s, recipe.nanobind(), "nanobind")
              for s in stable.nanobind_sources(recipe.free_threaded))]


def compile_all(jobs: list[Compile], pool) -> dict[str, list[Path]]:
    """Each kind's objects, in the order of jobs; "hits": those that came from the cache."""
    results = list(pool.map(lambda c: (c.kind, *c.objects.compile(c.source, c.flags)), jobs))
    out: dict[str, list[Path]] = {}
    for kind, obj, _hit in results:
        out.setdefault(kind, []).append(obj)
    out["hits"] = [o for _k, o, hit in results if hit]
    return out


def prepare(run: Run, lb: LineBuild) -> None:
    """The Python-independent part of one line's stable extension: the AOTI library and the link stubs."""
    ob, trees_ = lb.line, lb.trees
    with Stage(lb.who, "aoti"):
        jobs = compiles(run, lb, None)
        with ThreadPoolExecutor(run.jobs) as pool:
            objs = compile_all([c for c in jobs if c.kind == "aoti"], pool)["aoti"]
        tmp = Path(tempfile.mkdtemp(prefix=f"oeq-wheels-{lb.who}-"))
        run.later.callback(shutil.rmtree, tmp, ignore_errors=True)  # holds aoti and stubs until the run ends
        (stream,) = [c for c in jobs if c.kind == "stream"]
        lb.stubs = stable.build_support(ob, stream, lb.toolchain, objs, tmp / "stubs")
        if ob.dispatch:
            lb.dispatch = stable.build_dispatch(ob, lb.recipe(), lb.toolchain, tmp / "dispatch" / ob.dispatch_library)
        lb.aoti = stable.link_aoti(ob, trees_, objs, lb.stubs, lb.dispatch and lb.dispatch.parent,
                                   tmp / ob.aoti_library, lb.toolchain)


def build(run: Run, lb: LineBuild, interp: pythons.Interpreter) -> list[dict]:
    """One line's binary openequivariance wheel for one Python: its stable extension, built once for every
    torch of the line's CUDA major; the stable-ABI build (the line's abi3 CPython) serves every later CPython too."""
    p, ob, tag = run.pins, lb.line, interp.cp_tag
    outdir = extra_dir(run.outdir)
    py_tag = pins_mod.interpreter_tag(interp.version)  # cp314 for 3.14t too: the ABI tag says free-threaded
    abi3 = ob.is_abi3(interp.version)
    who = f"{lb.who}-{tag}" + ("-abi3" if abi3 else "")
    timings: dict = {}
    version = ob.version(p.oeq.version)
    with tempfile.TemporaryDirectory(prefix=f"oeq-wheels-{who}-") as tmp_s:
        tmp = Path(tmp_s)
        with Stage(who, "compile", timings) as st:
            with ThreadPoolExecutor(4) as pool:
                objs = compile_all(compiles(run, lb, interp), pool)
            st.note = f"{len(objs['hits'])}/{len(objs['module']) + len(objs['nanobind'])} from cache"
        module_name = ob.module_name + ob.ext_suffix(interp.version)
        with Stage(who, "link", timings):
            module = stable.link_module(ob, lb.trees, objs["module"], objs["nanobind"], lb.stubs,
                                        lb.dispatch and lb.dispatch.parent, tmp / module_name, lb.toolchain)
        libs = {module_name: module, ob.aoti_library: lb.aoti, **({ob.dispatch_library: lb.dispatch} if lb.dispatch else {})}
        with Stage(who, "audit", timings) as st:
            platform = proven_platform(p, {f"{oeqpy.EXTLIB}/{n}": f for n, f in libs.items()}, tag, tmp, st, who,
                                       run.verdicts, ob.arch.platform_tag)
        record = OeqBuild(
            package="openequivariance", version=version, oeq_sdist=entry(p.oeq), torch_min=ob.torch_min,
            cuda_majors=ob.cuda_majors, built_against=entry(ob.torch), python_tag=py_tag, platform_tag=platform,
            files=tuple(FileHash(f"{oeqpy.EXTLIB}/{n}", sha256_file(f)) for n, f in sorted(libs.items())),
            cuda_wheels=tuple(entry(n) for n in ob.nvidia), nanobind=entry(ob.nanobind), compiler=lb.toolchain.version)
        with Stage(who, "wheel", timings):
            staged = oeqpy.stage(p, lb.oeq_root, tmp / "stage", version=version,
                                 tag=wheelfile.wheel_tag(py_tag, platform, ob.abi_tag(interp.version)), purelib=False,
                                 extlib_files=libs,
                                 build_record=record.to_json())
            whl = wheelfile.pack(staged, tmp / "out", p.source_date_epoch)
        check = lambda w: verify_oeq_binary(w, p, line=ob, sdist_root=lb.oeq_root, cuda_root=lb.trees.cuda_root,
                                            memo_dir=run.verdicts, forbidden_paths=run.forbidden, cache=run.cache)
        gates = ("ELF, RECORD, auditwheel, twine check, sdist tree, CUDA symbols, stable ABI"
                 + (", abi3audit" if abi3 else "") + (", free-threaded" if ob.free_threaded(interp.version) else ""))
        return [verify_and_place(who, whl, check, gates, outdir, run.force, platform, timings, interp)]
