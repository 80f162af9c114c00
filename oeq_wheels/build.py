"""The host build, per Python: inputs -> objects -> libraries -> audited, verified wheels.

Two packages come out of one run:
  OUTDIR/         fastmace-oeq-ext wheels (the PyPI release: `twine upload OUTDIR/*`)
  OUTDIR-extra/   binary openequivariance wheels, the fastmace-oeq-ext builds that name them
                  (both never for PyPI: each line's index serves them) and REPORT.{md,json}
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fastmace_oeq_ext.cudaflags import wheel_build_flags
from fastmace_oeq_ext.manifest import Input
from fastmace_oeq_ext.oeq_build import FileHash, OeqBuild

from . import buildroot, pins as pins_mod, driver_stub, elf, gate_common, tags
from .inputs import fetch, freethreaded, unpack, pythons
from . import toolchain as tc, wheelfile
from .ext import assemble, compile as cc, link
from .ext.gate import verify_wheel
from .oeq import stable, wheel as oeqpy
from .oeq import variants
from .oeq.gate import verify_oeq_binary
from .errors import OeqWheelsError, UsageError
from .files import default_cache, sha256_file, sweep_stale
from .output import extra_dir, place, variants_dir
from .stop import Interrupted, stop_if_cancelled
from .progress import Stage, say, table, warn
from .report import write_report


class BuildError(OeqWheelsError):
    pass


def prepare_outdir(outdir: Path) -> Path:
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {outdir}: {exc.strerror}; choose another OUTDIR") from exc
    try:
        tempfile.TemporaryFile(dir=outdir).close()
    except OSError as exc:
        raise UsageError(f"output directory {outdir} is not writable ({exc.strerror}); "
                         "fix its permissions or choose another OUTDIR") from exc
    return outdir


@dataclass
class Shared:
    """Inputs common to every Python of one build."""

    pins: pins_mod.Pins
    cache: Path
    files: dict[str, Path]
    oeq_root: Path
    cuda_root: Path | None          # fastmace-oeq-ext's inputs (None: no x86_64 build)
    pybind11_include: Path | None
    toolchain: tc.Toolchain
    objects: tc.ObjectCache
    lines: dict[str, "LineBuild"] = field(default_factory=dict)  # the OEq lines, by name
    forbidden: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> Path:
        """Where the build remembers auditwheel's and twine's verdicts by wheel sha256 (tags.audit)."""
        return self.cache / "verdicts"


@dataclass
class LineBuild:
    """One OEq line's Python-independent parts: its unpacked inputs, AOTI library and link stubs."""

    line: pins_mod.OeqLine
    trees: stable.StableTrees
    toolchain: tc.Toolchain      # the line's architecture's compilers (a cross toolchain on another host)
    objects: tc.ObjectCache
    tmp: Path | None = None      # holds aoti and stubs; removed when the run ends
    aoti: Path | None = None
    stubs: Path | None = None

    @property
    def who(self) -> str:
        return f"oeq-{self.line.key}"

    def recipe(self, python_include: str | None = None, limited_api: bool = False,
               free_threaded: bool = False) -> stable.Recipe:
        ob = self.line
        return stable.Recipe(self.trees, tags.manylinux_version(ob.arch.platform_tag) < (2, 32),
                             python_include=python_include, torch_label=f"torch-{ob.torch.version}",
                             tls_gnu2=self.toolchain.accepts("-mtls-dialect=gnu2"), limited_api=limited_api,
                             free_threaded=free_threaded)


def entry(pin: pins_mod.Pinned) -> Input:
    return Input(pin.name, pin.version, pin.file, pin.sha256)


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


def _proven_platform(p: pins_mod.Pins, libs: dict[str, Path], cp: str, tmp: Path, st: Stage, who: str,
                     memo_dir: Path, target: str) -> str:
    """Pack the libraries alone with the generic tag, let auditwheel judge them, and choose the tag."""
    probe = wheelfile.probe_wheel(libs, cp, tmp / "probe", p.source_date_epoch, arch=tags.tag_arch(target))
    proven, problems = tags.proven_tag(tags.audit(probe, memo_dir), tags.external_ok(p))
    if problems:
        raise BuildError("; ".join(problems))
    platform = tags.choose_tag(target, proven)
    st.note = f"auditwheel: symbols fit {proven} -> tag {platform}"
    if platform != target:
        say(f"[{who}] NOTE: the binary needs {proven}; tagging {platform}, not the target "
            f"{target} (build in the manylinux_2_28 container for the target)")
    return platform


def _when_made(tree, fn, *args):
    """fn(*args) once the background download of its tree (a future) has ended; its error is this wheel's."""
    tree.result()
    return fn(*args)


def build_one(sh: Shared, interp: pythons.Interpreter, outdir: Path, force: bool) -> dict:
    """The fastmace-oeq-ext wheel of one Python."""
    p, tag = sh.pins, interp.cp_tag
    timings: dict = {}
    torch_pin = p.matrix.torch_wheel(tag)
    with tempfile.TemporaryDirectory(prefix=f"oeq-wheels-{tag}-") as tmp_s:
        tmp = Path(tmp_s)
        with Stage(tag, "inputs", timings):
            # Resolved paths: the compiler records real paths, which -ffile-prefix-map must match.
            torch_root = unpack.torch_tree(sh.files[torch_pin.file], torch_pin, sh.cache, p.torch_needed).resolve()
            tv = checked_torch(torch_root, torch_pin, p.matrix.torch_local, p.matrix.cuda)
            ctx, ctx_shared = compile_contexts(p, interp, torch_root, sh.oeq_root, sh.cuda_root, sh.pybind11_include)
        ext = ctx.oeq_ext
        with Stage(tag, "compile", timings) as st:
            jobs = [(ext / src, (ctx if src == p.oeq_python_source else ctx_shared).flags())
                    for src in p.oeq_sources]
            with ThreadPoolExecutor(len(jobs)) as pool:
                results = list(pool.map(lambda j: sh.objects.compile(*j), jobs))
            objs = [o for o, _ in results]
            st.note = f"{sum(hit for _, hit in results)}/{len(results)} from cache"
        with Stage(tag, "link", timings):
            driver_stub.make_stub(driver_stub.undefined_driver_symbols(objs), tmp / "stub", sh.toolchain.cc)
            cuda = wheel_build_flags(sh.cuda_root, driver_dir=str(tmp / "stub"))
            lib = link.link(objs, tmp / p.library_file, torch_root / "torch" / "lib", cuda, sh.toolchain,
                            p.torch_libs, p.runpath())
        with Stage(tag, "audit", timings) as st:
            platform = _proven_platform(p, {f"{p.import_name}/{p.library_file}": lib}, tag, tmp, st, tag, sh.verdicts,
                                        p.platform_tag)
        flags = ctx.normalized(ctx.flags())
        lic = sh.oeq_root / "LICENSE"
        lib_sha256, glibc = sha256_file(lib), elf.glibc_max_symbol(lib.read_bytes())
        rows = []
        # One library, one wheel per OpenEquivariance FastMACE may find beside it (pins: oeq_variants).
        for vp in p.ext_variants:
            who = tag if vp.name == "pypi" else f"{tag}-{vp.name}"
            manifest = assemble.make_manifest(
                vp, torch_git_version=tv["git_version"], torch_wheel=entry(torch_pin), python=tag,
                python_built_with=interp.full_version, platform=platform, sha256=lib_sha256, glibc_max_symbol=glibc,
                compiler=sh.toolchain.release, flags=tuple(flags))
            with Stage(who, "wheel", timings):
                staged = assemble.stage(vp, tmp / who / "final", library=lib, manifest=manifest,
                                        oeq_license=lic, py_version=interp.version,
                                        tag=wheelfile.wheel_tag(tag, platform))
                whl = wheelfile.pack(staged, tmp / who / "out", p.source_date_epoch)
            check = lambda w: verify_wheel(w, p, expected_license=lic.read_bytes(), forbidden_paths=sh.forbidden,
                                           memo_dir=sh.verdicts, cache=sh.cache)
            # PyPI's wheel goes to OUTDIR; a binary OEq line's goes beside that line's OEq wheels (its index).
            rows.append(_verify_and_place(who, whl, check, "ELF, RECORD, auditwheel, twine check, licence, pins, "
                                          f"{p.consumer.label}", outdir if vp.name == "pypi" else extra_dir(outdir),
                                          force, platform, dict(timings), interp))
        return rows


def _verify_and_place(who: str, whl: Path, check, note: str, outdir: Path, force: bool, platform: str,
                      timings: dict, interp: pythons.Interpreter) -> dict:
    """The gate on the packed wheel, then its no-clobber placement in outdir; the report's row."""
    with Stage(who, "verify", timings) as st:
        verdict = check(whl)
        if not verdict.ok:
            raise BuildError("verification failed: " + "; ".join(verdict.problems))
        st.note = note
    dest = place(whl, outdir, force, verdict.facts["sha256"])
    return {"wheel": dest.name, "tag": platform, "size": dest.stat().st_size,
            "sha256": verdict.facts["sha256"], "timings": timings, "python": interp.full_version}


def prepare_line(sh: Shared, lb: LineBuild, pool_size: int) -> None:
    """The Python-independent part of one line's stable extension: the AOTI library and the link stubs."""
    ob, trees = lb.line, lb.trees
    recipe = lb.recipe()
    with Stage(lb.who, "aoti"):
        with ThreadPoolExecutor(pool_size) as pool:
            objs = stable.compile_all(recipe, lb.objects, pool, python=False)["aoti"]
        tmp = lb.tmp = Path(tempfile.mkdtemp(prefix=f"oeq-wheels-{lb.who}-"))
        lb.stubs = stable.build_support(ob, recipe, lb.objects, lb.toolchain, objs, tmp / "stubs")
        lb.aoti = stable.link_aoti(ob, trees, objs, lb.stubs, tmp / ob.aoti_library, lb.toolchain)


def build_oeq_binary(sh: Shared, lb: LineBuild, interp: pythons.Interpreter, outdir: Path, force: bool) -> dict:
    """One line's binary openequivariance wheel for one Python: its stable extension, built once for every
    torch of the line's CUDA major; the stable-ABI build (the line's abi3 CPython) serves every later CPython too."""
    p, ob, tag = sh.pins, lb.line, interp.cp_tag
    py_tag = pins_mod.interpreter_tag(interp.version)  # cp314 for 3.14t too: the ABI tag says free-threaded
    abi3 = ob.is_abi3(interp.version)
    who = f"{lb.who}-{tag}" + ("-abi3" if abi3 else "")
    timings: dict = {}
    version = ob.version(p.oeq.version)
    with tempfile.TemporaryDirectory(prefix=f"oeq-wheels-{who}-") as tmp_s:
        tmp = Path(tmp_s)
        # CPython's headers are the same on every 64-bit Linux architecture but pyconfig.h's few
        # machine-specific macros (x87/x64 assembler probes), which nanobind does not read: this
        # host's CPython serves a cross build (release.yml compares a native aarch64 build's checks).
        recipe = lb.recipe(python_include=os.path.realpath(interp.include), limited_api=abi3,
                           free_threaded=ob.free_threaded(interp.version))
        with Stage(who, "compile", timings) as st:
            with ThreadPoolExecutor(4) as pool:
                objs = stable.compile_all(recipe, lb.objects, pool, python=True)
            st.note = f"{len(objs['hits'])}/{len(objs['module']) + len(objs['nanobind'])} from cache"
        module_name = ob.module_name + ob.ext_suffix(interp.version)
        with Stage(who, "link", timings):
            module = stable.link_module(ob, lb.trees, objs["module"], objs["nanobind"], lb.stubs,
                                        tmp / module_name, lb.toolchain)
        libs = {module_name: module, ob.aoti_library: lb.aoti}
        with Stage(who, "audit", timings) as st:
            platform = _proven_platform(p, {f"{oeqpy.EXTLIB}/{n}": f for n, f in libs.items()}, tag, tmp, st, who,
                                        sh.verdicts, ob.arch.platform_tag)
        record = OeqBuild(
            package="openequivariance", version=version, oeq_sdist=entry(p.oeq), torch_min=ob.torch_min,
            cuda_major=ob.cuda_major, built_against=entry(ob.torch), python_tag=py_tag, platform_tag=platform,
            files=tuple(FileHash(f"{oeqpy.EXTLIB}/{n}", sha256_file(f)) for n, f in sorted(libs.items())),
            cuda_wheels=tuple(entry(n) for n in ob.nvidia), nanobind=entry(ob.nanobind), compiler=lb.toolchain.version)
        with Stage(who, "wheel", timings):
            staged = oeqpy.stage(p, sh.oeq_root, tmp / "stage", version=version,
                                 tag=wheelfile.wheel_tag(py_tag, platform, ob.abi_tag(interp.version)), purelib=False,
                                 extlib_files=libs,
                                 build_record=record.to_json())
            whl = wheelfile.pack(staged, tmp / "out", p.source_date_epoch)
        check = lambda w: verify_oeq_binary(w, p, line=ob, sdist_root=sh.oeq_root, cuda_root=lb.trees.cuda_root,
                                                   memo_dir=sh.verdicts, forbidden_paths=sh.forbidden, cache=sh.cache)
        gates = ("ELF, RECORD, auditwheel, twine check, sdist tree, CUDA symbols, stable ABI"
                 + (", abi3audit" if abi3 else "") + (", free-threaded" if ob.free_threaded(interp.version) else ""))
        row = _verify_and_place(who, whl, check, gates, outdir, force, platform, timings, interp)
        # The same build as a PEP 825 variant of the one release of every line (oeq/variants.py), beside the others.
        vtimings: dict = {}
        with Stage(who, "variant", vtimings):
            variant = variants.make(whl, ob, p, tmp / "variant")
        vrow = _verify_and_place(f"{who}-{variants.label(ob)}", variant, check, gates + ", variant.json",
                                 variants_dir(outdir), force, platform, vtimings, interp)
        return [row, vrow]


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


def checked_torch(torch_root: Path, pin: pins_mod.Pinned, local: str, cuda: str) -> dict:
    """torch/version.py of an unpacked torch wheel, refused unless it names the pinned version and CUDA."""
    tv = cc.torch_version_info(torch_root)
    expect = f"{pin.version}+{local}"
    if tv["__version__"] != expect or tv["cuda"] != cuda:
        raise BuildError(f"torch wheel {pin.file} names itself {tv['__version__']} (CUDA {tv['cuda']}), "
                         f"pins say {expect} (CUDA {cuda})")
    return tv


def check_arch_names(pins: pins_mod.Pins, requested: list[str] | None) -> list[str]:
    """Every architecture pins.toml builds for, after refusing an --arch that names another."""
    known = list(dict.fromkeys([pins.ext_arch.name, *(l.arch.name for l in pins.oeq_lines)]))
    if requested is not None and (not requested or [a for a in requested if a not in known]):
        raise UsageError(f"--arch {','.join(requested) or '(empty)'}: pins.toml builds for {', '.join(known)}; "
                         "name one or more of those, or leave --arch out to build all")
    return known


def toolchain_maker(pins: pins_mod.Pins, mode: str, cache: Path):
    """A function arch -> Toolchain for --toolchain pinned (the default) or host, and the line that says which.

    pinned: the pinned build root's compilers, run through bubblewrap; where bubblewrap cannot run (in a container)
    this host's own, if they are the pinned packages, unchanged (a container made of them); else one line naming
    both reasons. host: whatever compilers this host has (CXX, or g++): its wheels are not the released bytes.
    """
    if mode == "host":
        return tc.cross_toolchain, ("--toolchain host: this host's compilers, not the pinned toolchain; its wheels "
                                    "are not the released bytes")
    set_by_user = [v for v in ("CXX", "CC", "STRIP", "AR") if os.environ.get(v)]
    if set_by_user:
        say(f"oeq-wheels: NOTE: {', '.join(set_by_user)} ignored: the pinned toolchain builds (--toolchain host "
            "builds with them)")
    debs = pins.toolchain.for_host(tc.host_arch())
    cannot = buildroot.bwrap_problem()
    if cannot is not None:
        differs = buildroot.host_difference(debs)
        if differs is None:
            return tc.pinned_host_toolchain, f"this host's toolchain is the pinned one (no build root: {cannot})"
        raise BuildError(f"the pinned toolchain cannot build here: bubblewrap cannot run its build root ({cannot}), "
                         f"and this host's toolchain is not the pinned one ({differs}); allow user namespaces "
                         "(Ubuntu 24.04: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or build "
                         "with --toolchain host (wheels that are not the released bytes)")
    items = [pins_mod.Pinned(d.name, d.version, Path(d.file).name, d.sha256, url=pins.toolchain.archive + d.file)
             for d in debs]
    with Stage("all", "toolchain") as st:
        files = fetch.ensure(items, cache, say, stage=st)
        root = buildroot.ensure(pins.toolchain, debs, files, cache, say)
    key = buildroot.key(debs)
    where = cache / "buildroot" / f"{key}.shims"  # beside the root they run: same for every build, never left in /tmp

    def make(arch: pins_mod.Arch) -> tc.Toolchain:
        t = tc.root_toolchain(arch, root, key, where / arch.name)
        pinned = pins.toolchain.compiler(tc.host_arch(), arch.name)
        if t.version != pinned:
            raise BuildError(f"the build root's {arch.name} compiler says {t.version!r}, pins.toml [toolchain] "
                             f"compilers {pinned!r}; re-pin the toolchain")
        return t
    return make, f"the pinned build root {key} (Debian {pins.toolchain.debian} packages, run by bubblewrap)"


def select_arches(pins: pins_mod.Pins, requested: list[str] | None, make=None) -> tuple[dict[str, tc.Toolchain], list[str]]:
    """The architectures to build and each one's toolchain (make: arch -> Toolchain), and notes on those left out.

    This host's own architecture, and any asked for by name (--arch), fail the build without a working
    compiler; by default, another architecture whose cross compiler this host lacks and cannot install (a
    manylinux container) is left out with a note: publish refuses a release that lacks its wheels.
    """
    known = check_arch_names(pins, requested)
    make = make or tc.cross_toolchain
    toolchains, notes = {}, []
    for name in requested or known:
        try:
            toolchains[name] = make(pins.arches[name])
        except tc.CompileError as exc:
            if requested is not None or name == tc.host_arch():  # only a missing cross compiler is a note
                raise
            notes.append(f"{name} left out: {exc}")
    if not toolchains:
        raise BuildError("; ".join(notes))
    return toolchains, notes


def pythons_with_headers(pins: pins_mod.Pins, interps: dict[str, pythons.Interpreter], cache: Path,
                         toolchain: str = "pinned") -> dict[str, pythons.Interpreter]:
    """Each interpreter with its C headers copied into the cache (the build root sees them there). Headers that are
    not the pinned ones ([toolchain.pythons]) are an input the pins do not name: they stop a build of the pinned
    toolchain, whose wheels are to be the released bytes. They are a note with --toolchain host, and on a build host
    of another architecture than the pinned headers' (pyconfig.h differs by architecture): neither makes those."""
    out = {}
    strict = toolchain == "pinned" and \
        buildroot.DEBIAN_ARCH.get(tc.host_arch(), tc.host_arch()) == pins.toolchain.pythons_host
    for v, interp in interps.items():
        include, digest = pythons.headers(interp, cache)
        version, pinned = pins.toolchain.pythons.get(v, ("(none)", ""))
        if digest != pinned:
            differs = (f"CPython {interp.full_version}'s headers ({interp.executable}: {digest[:12]}) are not the "
                       f"pinned ones ({version}: {pinned[:12] or 'none pinned'})")
            if strict and pins_mod.free_threaded(v):  # made here from its pinned source: no other to install
                raise BuildError(f"{differs}, so its wheels would not be the released bytes; this host's configure "
                                 "gave another pyconfig.h where Python.h reads it: pin these headers in "
                                 "oeq_wheels/pins.toml [toolchain.pythons] (and record the new bytes), or build with "
                                 "--toolchain host (not the released bytes)")
            if strict:
                raise BuildError(f"{differs}, so its wheels would not be the released bytes; install CPython "
                                 f"{version} where the build finds it first (/opt/python/{interp.cp_tag}-"
                                 f"{interp.cp_tag}, pyenv's newest {v}, python{v} on PATH; `oeq-wheels pythons` "
                                 "lists them), pin these headers in oeq_wheels/pins.toml [toolchain.pythons] (and "
                                 "record the new bytes), or build with --toolchain host (not the released bytes)")
            why = "--toolchain host" if toolchain != "pinned" else \
                f"a {tc.host_arch()} build host; the pinned headers are a {pins.toolchain.pythons_host} one's"
            say(f"oeq-wheels: NOTE: {differs} ({why}): its wheels may differ from the released bytes")
        out[v] = dataclasses.replace(interp, include=str(include))
    return out


def pythons_per_package(pins: pins_mod.Pins, versions: list[str] | None) -> tuple[list[str], list[str]]:
    """(every CPython to build, those of fastmace-oeq-ext). Each package has its own: a release torch without a
    cp310 wheel narrows fastmace-oeq-ext, never the OEq lines, which build against their own (floor) torch."""
    wanted = pins_mod.select_pythons(pins.pythons, versions, f"matrix {pins.matrix.name!r} or the OEq lines")
    return wanted, [v for v in wanted if v in pins.matrix.pythons]


def run(outdir: Path, versions: list[str] | None = None, matrix: str | None = None, force: bool = False,
        jobs: int | None = None, cache: Path | None = None,
        arches: list[str] | None = None, toolchain: str = "pinned") -> tuple[list[dict], dict[str, str]]:
    """Build both packages' wheels for the requested Pythons and architectures; return (built rows, failures by wheel)."""
    t0 = time.monotonic()
    pins = pins_mod.load(matrix)
    wanted, ext_wanted = pythons_per_package(pins, versions)
    check_arch_names(pins, arches)
    cache = cache or default_cache()
    # Before the toolchain, whose root may download: an OUTDIR that cannot be written is one line, nothing fetched.
    outdir = prepare_outdir(outdir)
    extra = prepare_outdir(extra_dir(outdir))
    prepare_outdir(variants_dir(extra))
    make, which = toolchain_maker(pins, toolchain, cache)
    say(f"oeq-wheels: toolchain: {which}")
    toolchains, arch_notes = select_arches(pins, arches, make)
    # fastmace-oeq-ext is x86_64 only (FastMACE 1.0.0 limits it by marker and by its platform check).
    ext_wanted = ext_wanted if pins.ext_arch.name in toolchains else []
    oeq_lines = [l for l in pins.oeq_lines if l.arch.name in toolchains]
    # A free-threaded CPython's headers come from its pinned source (configured here once), the others' from the
    # CPython found on this machine.
    found = pythons.find_all([v for v in wanted if not pins_mod.free_threaded(v)])
    found.update({v: freethreaded.headers(pins.freethreaded[v], cache, say) for v in wanted if pins_mod.free_threaded(v)})
    interps = pythons_with_headers(pins, found, cache, toolchain)
    toolchain = toolchains.get(pins.ext_arch.name) or next(iter(toolchains.values()))
    jobs = jobs or os.cpu_count() or 1
    lines = ", ".join(dict.fromkeys(l.version(pins.oeq.version) for l in oeq_lines))
    say(f"oeq-wheels: {pins.package_name} {pins.version} and openequivariance {lines}, "
        f"matrix {pins.matrix.name}, Pythons {', '.join(wanted)}, {', '.join(toolchains)} "
        f"({'; '.join(t.version for t in toolchains.values())}), {jobs} jobs, cache {cache}")
    for note in arch_notes:
        say(f"oeq-wheels: NOTE: {note}")
    sweep_stale(outdir, extra, variants_dir(extra), cache / "extract", cache / "extract" / "blobs")  # what killed runs left
    with Stage("all", "fetch") as st:
        files = fetch.ensure((pins.all_inputs([pins_mod.cp_tag(v) for v in ext_wanted]) if ext_wanted else [])
                             + list(dict.fromkeys(i for l in oeq_lines for i in l.inputs(pins.oeq))),
                             cache, say, stage=st)
    objects = tc.ObjectCache(cache / "objects", toolchain, jobs)
    with Stage("all", "unpack"):
        oeq_root = unpack.oeq_tree(files[pins.oeq.file], pins.oeq, cache).resolve()
        cuda_root = unpack.cuda_tree([(n, files[n.file]) for n in pins.matrix.nvidia], cache).resolve() \
            if ext_wanted else None
        pyb = unpack.pybind11_include(files[pins.pybind11.file], pins.pybind11, cache).resolve() \
            if ext_wanted else None
    # The torch trees (the large fetches: a library's stub needs it whole once) are made one after another in the
    # background, the OEq lines' first and then fastmace-oeq-ext's, so that the compilers start on the first line
    # while the rest downloads; on a slow network the download would otherwise idle them (bench/run.py --throttle).
    # Each wheel waits for its own trees only; an error is raised where a tree is used.
    downloads = ThreadPoolExecutor(1, thread_name_prefix="trees")
    line_trees = {l.key: downloads.submit(stable_trees, pins, l, files, cache) for l in oeq_lines}
    ext_trees = {v: downloads.submit(unpack.torch_tree, files[pin.file], pin, cache, pins.torch_needed)
                 for v in ext_wanted for pin in [pins.matrix.torch_wheel(pins_mod.cp_tag(v))]}
    sh = Shared(pins, cache, files, oeq_root, cuda_root, pyb, toolchain, objects, {},
                forbidden=sorted({str(cache), str(cache.resolve()), str(outdir.resolve()),
                                  *gate_common.default_forbidden_paths()}))
    rows, failures = [], {}
    oeq_pythons = {l.key: [v for v in wanted if v in l.pythons] for l in oeq_lines}
    try:
        # Each wheel starts as soon as its inputs are there: a line's wheels once its AOTI library is linked (the
        # next line's trees download meanwhile); fastmace-oeq-ext's once its torch tree is made. ObjectCache holds
        # the compilers to `jobs` at a time.
        with ThreadPoolExecutor(max(1, len(ext_wanted) + sum(map(len, oeq_pythons.values())))) as pool:
            futs = {pool.submit(_when_made, ext_trees[v], build_one, sh, interps[v], outdir, force):
                    f"{pins.package_name} {pins_mod.cp_tag(v)}" for v in ext_wanted}
            for l in oeq_lines:
                line_wanted = oeq_pythons[l.key]
                try:
                    with Stage(f"oeq-{l.key}", "unpack"):
                        trees = line_trees[l.key].result()
                    lb = sh.lines[l.key] = LineBuild(l, trees, toolchains[l.arch.name],
                                                     objects.with_toolchain(toolchains[l.arch.name]))
                    if not line_wanted:
                        continue
                    prepare_line(sh, lb, jobs)
                except Interrupted:
                    raise
                except OeqWheelsError as exc:
                    for v in line_wanted:
                        failures[f"openequivariance {l.key} {pins_mod.cp_tag(v)}"] = str(exc)
                    continue
                futs.update({pool.submit(build_oeq_binary, sh, lb, interps[v], extra, force):
                             f"openequivariance {l.key} {pins_mod.cp_tag(v)}" for v in line_wanted})
            for fut, who in futs.items():
                try:
                    result = fut.result()
                    rows += result if isinstance(result, list) else [result]
                except Interrupted:
                    raise
                except OeqWheelsError as exc:  # report every wheel, then fail
                    failures[who] = str(exc)
    finally:
        downloads.shutdown(cancel_futures=True)  # a stopped run: the one download under way ends (members checks)
        for lb in sh.lines.values():
            if lb.tmp is not None:
                shutil.rmtree(lb.tmp, ignore_errors=True)
    stop_if_cancelled()
    rows.sort(key=lambda r: r["wheel"])
    elapsed = time.monotonic() - t0
    # A failed build keeps the last good REPORT (it describes the wheels still there) and writes its own beside it.
    report = write_report(extra, pins, rows, failures, elapsed, toolchain, "REPORT-failed" if failures else "REPORT")
    if not failures:  # an earlier failure's report no longer describes this directory
        for stale in ("REPORT-failed.md", "REPORT-failed.json"):
            (extra / stale).unlink(missing_ok=True)
    say(f"\nbuilt {len(rows)} wheel(s) in {elapsed:.1f}s: {pins.package_name} for PyPI into {outdir}; "
        f"openequivariance and its lines' {pins.package_name} into {extra}")
    if rows:
        print(table(rows))
    for who, why in failures.items():
        warn(f"\n[{who}] FAILED, no wheel written: {why}")
    if failures:
        warn(f"the failures are in {report}; the previous REPORT.md, if any, is unchanged")
    return rows, failures
