"""The host build: inputs -> objects -> library -> audited, verified wheel in OUTDIR, per Python."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import assemble, compile as cc, fetch, inputs, link, pins as pins_mod, pythons, stub, verify
from .cudaflags import wheel_build_flags
from .report import Stage, say, table


class BuildError(RuntimeError):
    pass


def default_cache() -> Path:
    env = os.environ.get("OEQ_WHEELS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oeq-wheels"


def prepare_outdir(outdir: Path) -> Path:
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create output directory {outdir}: {exc.strerror}; choose another OUTDIR") from exc
    try:
        tempfile.TemporaryFile(dir=outdir).close()
    except OSError as exc:
        raise BuildError(f"output directory {outdir} is not writable ({exc.strerror}); "
                         "fix its permissions or choose another OUTDIR") from exc
    return outdir


@dataclass
class Shared:
    """Inputs common to every Python of one build."""

    pins: pins_mod.Pins
    cache: Path
    files: dict[str, Path]
    oeq_root: Path
    cuda_root: Path
    pybind11_include: Path
    toolchain: cc.Toolchain
    objects: cc.ObjectCache
    forbidden: list[str] = field(default_factory=list)


def compile_contexts(p: pins_mod.Pins, interp: pythons.Interpreter, torch_root: Path, oeq_root: Path,
                     cuda_root: Path, pybind11_include: Path) -> tuple[cc.CompileContext, cc.CompileContext]:
    """The compiler context for libtorch_tp_jit.cpp (one Python) and for json11.cpp (every Python).

    All paths must be resolved: the compiler records real paths, which -ffile-prefix-map must match.
    """
    cuda = wheel_build_flags(cuda_root, require_driver=False)  # includes only; the link adds the driver
    if cuda is None:
        raise BuildError(f"the NVIDIA wheels in {cuda_root} lack a header or library")
    ext = oeq_root / "openequivariance" / "extension"
    python_include = os.path.realpath(interp.include)
    common_map = {str(ext): "openequivariance/extension", str(cc.SHIM_DIR): "oeq-wheels-shim"}
    prefix_map = {**common_map, str(torch_root): f"torch-{p.matrix.torch_version}", str(cuda_root): "nvidia",
                  str(pybind11_include): "pybind11/include", python_include: f"python{interp.version}"}
    glibc_shim = verify.manylinux_version(p.platform_tag) < (2, 32)
    ctx = cc.CompileContext(ext, torch_root, cuda.include_dirs, pybind11_include, python_include,
                            p.oeq_extension_name, cc.torch_cxx_std(torch_root), cc.torch_cxx11_abi(torch_root),
                            glibc_shim, prefix_map)
    # json11 includes only the C++ standard library, so the torch, CUDA and Python
    # include directories cannot change its object: without them one object serves every Python.
    shared = cc.CompileContext(**{**ctx.__dict__, "python_include": None, "torch_root": None,
                                  "cuda_includes": [], "prefix_map": common_map})
    return ctx, shared


def build_one(sh: Shared, interp: pythons.Interpreter, outdir: Path, force: bool) -> dict:
    p, tag = sh.pins, interp.cp_tag
    timings: dict = {}
    torch_pin = p.matrix.torch_wheel(tag)
    with tempfile.TemporaryDirectory(prefix=f"oeq-wheels-{tag}-") as tmp_s:
        tmp = Path(tmp_s)
        with Stage(tag, "inputs", timings):
            # Resolved paths: the compiler records real paths, which -ffile-prefix-map must match.
            torch_root = inputs.torch_tree(sh.files[torch_pin.file], torch_pin, sh.cache).resolve()
            tv = cc.torch_version_info(torch_root)
            expect = f"{p.matrix.torch_version}+{p.matrix.torch_local}"
            if tv["__version__"] != expect or tv["cuda"] != p.matrix.cuda:
                raise BuildError(f"torch wheel names itself {tv['__version__']} (CUDA {tv['cuda']}), "
                                 f"pins say {expect} (CUDA {p.matrix.cuda})")
            ctx, ctx_shared = compile_contexts(p, interp, torch_root, sh.oeq_root, sh.cuda_root, sh.pybind11_include)
        ext = ctx.oeq_ext
        with Stage(tag, "compile", timings) as st:
            jobs = [(ext / src, (ctx if src == "libtorch_tp_jit.cpp" else ctx_shared).flags())
                    for src in p.oeq_sources]
            with ThreadPoolExecutor(len(jobs)) as pool:
                results = list(pool.map(lambda j: sh.objects.compile(*j), jobs))
            objs = [o for o, _ in results]
            st.note = f"{sum(hit for _, hit in results)}/{len(results)} from cache"
        with Stage(tag, "link", timings):
            stub.make_stub(stub.undefined_driver_symbols(objs), tmp / "stub", sh.toolchain.cc)
            cuda = wheel_build_flags(sh.cuda_root, driver_dir=str(tmp / "stub"))
            lib = link.link(objs, tmp / f"{p.oeq_extension_name}.so", torch_root / "torch" / "lib", cuda,
                            sh.toolchain.cxx, sh.toolchain.strip)
        manifest = make_manifest(sh, interp, torch_pin, tv, lib, ctx)
        compiler_text = (f"{sh.toolchain.version}\nC++ standard: {ctx.cxx_std}\n_GLIBCXX_USE_CXX11_ABI={ctx.cxx11_abi}\n"
                         f"flags: {' '.join(ctx.normalized(ctx.flags()))}\n")
        lic = ext.parent.parent / "LICENSE"
        with Stage(tag, "audit", timings) as st:
            # Pack once with the generic tag so auditwheel can judge the binary.
            probe_tag = assemble.wheel_tag(tag, "linux_x86_64")
            manifest["platform"]["tag"] = probe_tag.platform
            staged = assemble.stage(p, tmp / "probe", library=lib, manifest=manifest, compiler_text=compiler_text,
                                    oeq_license=lic, py_version=interp.version, tag=probe_tag)
            probe = assemble.pack(staged, tmp / "probe-out", p.source_date_epoch)
            proven, problems = verify.proven_tag(verify.audit(probe))
            if problems:
                raise BuildError("; ".join(problems))
            platform = verify.choose_tag(p.platform_tag, proven)
            st.note = f"auditwheel: symbols fit {proven} -> tag {platform}"
            if platform != p.platform_tag:
                say(f"[{tag}] NOTE: the binary needs {proven}; tagging {platform}, not the target "
                    f"{p.platform_tag} (build in the manylinux_2_28 container for the target)")
        with Stage(tag, "wheel", timings):
            manifest["platform"]["tag"] = platform
            staged = assemble.stage(p, tmp / "final", library=lib, manifest=manifest, compiler_text=compiler_text,
                                    oeq_license=lic, py_version=interp.version,
                                    tag=assemble.wheel_tag(tag, platform))
            whl = assemble.pack(staged, tmp / "out", p.source_date_epoch)
        with Stage(tag, "verify", timings) as st:
            verdict = verify.verify_wheel(whl, expected_license=lic.read_bytes(), forbidden_paths=sh.forbidden)
            if not verdict.ok:
                raise BuildError("verification failed: " + "; ".join(verdict.problems))
            st.note = "ELF, RECORD, auditwheel, twine check, licence"
        dest = outdir / whl.name
        if dest.exists() and fetch.sha256_file(dest) != verdict.facts["sha256"]:
            if not force:
                raise BuildError(f"{dest} already exists with different content; a released file name "
                                 "can never be re-uploaded, so bump the .postN version in oeq_wheels/pins.toml "
                                 "(or pass --force to overwrite a local build)")
        shutil.move(str(whl), str(dest.with_name(dest.name + ".part")))
        os.replace(dest.with_name(dest.name + ".part"), dest)
        return {"wheel": dest.name, "tag": platform, "size": dest.stat().st_size,
                "sha256": verdict.facts["sha256"], "timings": timings, "python": interp.full_version}


def make_manifest(sh: Shared, interp, torch_pin, tv, lib: Path, ctx: cc.CompileContext) -> dict:
    p = sh.pins
    entry = lambda pin: {"name": pin.name, "version": pin.version, "file": pin.file, "sha256": pin.sha256}
    return {
        "schema": 1,
        "package": {"name": p.package_name, "version": p.version},
        "openequivariance": {"version": p.oeq.version, "sdist": p.oeq.file, "sha256": p.oeq.sha256},
        "torch": {"version": p.matrix.torch_version, "local": p.matrix.torch_local, "cuda": p.matrix.cuda,
                  "cxx11_abi": ctx.cxx11_abi, "git_version": tv["git_version"], "wheel": torch_pin.file,
                  "sha256": torch_pin.sha256},
        "python": {"tag": interp.cp_tag, "version": interp.version, "built_with": interp.full_version},
        "platform": {"system": "Linux", "machine": "x86_64", "tag": None},
        "library": {"file": lib.name, "sha256": fetch.sha256_file(lib), "extension_name": p.oeq_extension_name},
        "cuda_wheels": [entry(n) for n in p.matrix.nvidia],
        "pybind11": entry(p.pybind11),
        "compiler": {"version": sh.toolchain.version, "cxx_std": ctx.cxx_std,
                     "flags": ctx.normalized(ctx.flags())},
        "matrix": p.matrix.name,
    }


def run(outdir: Path, versions: list[str] | None = None, matrix: str | None = None, force: bool = False,
        jobs: int | None = None, cache: Path | None = None) -> tuple[list[dict], dict[str, str]]:
    """Build wheels for the requested Pythons; return (built rows, failures by tag)."""
    t0 = time.monotonic()
    pins = pins_mod.load(matrix)
    wanted = pins_mod.select_pythons(pins, versions)
    interps = pythons.find_all(wanted)
    outdir = prepare_outdir(outdir)
    cache = cache or default_cache()
    toolchain = cc.Toolchain.detect()
    jobs = jobs or os.cpu_count() or 1
    say(f"oeq-wheels: {pins.package_name} {pins.version}, matrix {pins.matrix.name}, "
        f"Pythons {', '.join(wanted)}, {toolchain.version}, {jobs} jobs, cache {cache}")
    with Stage("all", "fetch"):
        files = fetch.ensure(pins.all_inputs([pins_mod.cp_tag(v) for v in wanted]), cache, say)
    with Stage("all", "unpack"):
        oeq_root = inputs.oeq_tree(files[pins.oeq.file], pins.oeq, cache).resolve()
        nvidia = [(n, files[n.file]) for n in pins.matrix.nvidia]
        cuda_root = inputs.cuda_tree(nvidia, cache).resolve()
        pyb = inputs.pybind11_include(files[pins.pybind11.file], pins.pybind11, cache).resolve()
    sh = Shared(pins, cache, files, oeq_root, cuda_root, pyb, toolchain,
                cc.ObjectCache(cache / "objects", toolchain, jobs),
                forbidden=sorted({str(cache), str(cache.resolve()), str(outdir.resolve()),
                                  *verify.default_forbidden_paths()}))
    rows, failures = [], {}
    with ThreadPoolExecutor(len(wanted)) as pool:
        futs = {pool.submit(build_one, sh, interps[v], outdir, force): v for v in wanted}
        for fut, v in futs.items():
            try:
                rows.append(fut.result())
            except Exception as exc:  # report every Python, then fail
                failures[pins_mod.cp_tag(v)] = str(exc)
    rows.sort(key=lambda r: r["wheel"])
    elapsed = time.monotonic() - t0
    write_report(outdir, pins, rows, failures, elapsed, toolchain)
    say(f"\nbuilt {len(rows)} wheel(s) in {elapsed:.1f}s into {outdir}")
    if rows:
        print(table(rows))
    for tag, why in failures.items():
        say(f"\n[{tag}] FAILED, no wheel written: {why}")
    return rows, failures


def write_report(outdir: Path, pins, rows: list[dict], failures: dict, elapsed: float, toolchain) -> None:
    """REPORT.json and REPORT.md beside the wheels: what was built from what, and how long it took."""
    import json
    entry = lambda p: {"name": p.name, "version": p.version, "file": p.file, "sha256": p.sha256}
    inputs_ = [entry(p) for p in pins.all_inputs([r["wheel"].split("-")[2] for r in rows])]
    data = {"package": pins.package_name, "version": pins.version, "matrix": pins.matrix.name,
            "compiler": toolchain.version, "elapsed_s": round(elapsed, 1), "wheels": rows,
            "failures": failures, "inputs": inputs_}
    (outdir / "REPORT.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [f"# {pins.package_name} {pins.version} (matrix {pins.matrix.name})", "",
             f"Built with {toolchain.version} in {elapsed:.1f} s.", "",
             "| wheel | tag (proven by auditwheel) | size | sha256 | seconds per stage |", "|---|---|---|---|---|"]
    for r in rows:
        stages = ", ".join(f"{k} {v}" for k, v in r["timings"].items())
        lines.append(f"| {r['wheel']} | {r['tag']} | {r['size'] / 1024:.0f} KiB | `{r['sha256']}` | {stages} |")
    for tag, why in failures.items():
        lines.append(f"| {tag}: FAILED | | | | {why.splitlines()[0][:200]} |")
    lines += ["", "## Inputs", "", "| file | sha256 |", "|---|---|"]
    lines += [f"| {i['file']} | `{i['sha256']}` |" for i in inputs_]
    (outdir / "REPORT.md").write_text("\n".join(lines) + "\n")
