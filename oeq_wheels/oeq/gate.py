"""The binary openequivariance gate: the common checks (oeq_wheels.gate_common) plus the pinned sdist's tree, the build
record against the pins of the wheel's CUDA line, torch reached only through its stable C ABI, and CUDA: for a line
that links it, every versioned CUDA symbol present in the oldest NVIDIA wheels that line allows; for a line that binds
it at import (cuda_binding = "dispatch"), only through the shipped dispatch library: no NEEDED on a versioned CUDA
library, every CUDA function the modules call bound by it, its own imports libc's and libdl's alone, and every
function it binds present in the oldest pinned CUDA 12 and CUDA 13 libraries."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from fastmace_oeq_ext import cudaflags
from fastmace_oeq_ext.manifest import ManifestError
from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE, OeqBuild

from .. import proc
from .. import pins as pins_mod
from ..elf import dynamic_symbols, TORCH_CXX
from ..files import remembered
from ..gate_common import accounted, audit_and_twine, check_elf, check_wheel_file, default_forbidden_paths, field_differences, file_entry, open_wheel, python_of, Verdict
from ..tags import split_variant, tag_arch
from .stable import DISPATCH_VERSION


def verify_oeq_binary(wheel: Path, p: pins_mod.Pins, *, line: pins_mod.OeqLine | None = None,
                      sdist_root: Path | None = None, cuda_root: Path | None = None,
                      forbidden_paths: list[str] | None = None, twine: bool = True,
                      memo_dir: Path | None = None, variant: bool = False, cache: Path | None = None) -> Verdict:
    """Check a binary openequivariance wheel against the pins of its line (by its version) and the pinned sdist; a
    PEP 825 variant wheel (oeq/variants.py) against the line its label and platform name, as that line's wheel under
    the variants release's version, its variant.json the one the pins give that line. cache: where the sdist and the
    line's NVIDIA wheels are fetched when not given (None: the default cache; a build passes its own)."""
    from fastmace_oeq_ext.decision import OEQ_STABLE_MARKER

    from ..inputs import fetch, unpack
    from ..files import default_cache
    from . import variants, wheel as oeqpy
    kw = dict(sdist_root=sdist_root, cuda_root=cuda_root, forbidden_paths=forbidden_paths, twine=twine,
              memo_dir=memo_dir, cache=cache)
    base, label = split_variant(wheel.name)
    if label is not None and not variant:
        return _verify_variant(wheel, base, label, p, line, kw)
    v = Verdict(wheel)
    opened = open_wheel(wheel, v)
    if opened is None:
        return v
    name, version, tag, files = opened
    ob = line or p.line_of(version, tag_arch(tag.platform))
    of_version = line if variant else p.line_of(version)  # any architecture's build of the version
    line_version = (lambda l: variants.release_version(p)) if variant else (lambda l: l.version(p.oeq.version))
    want = list(dict.fromkeys(line_version(l) for l in ([line] if line else p.oeq_lines)))
    if name != "openequivariance" or of_version is None or (line and version != line_version(line)):
        v.problems.append(f"wheel is {name} {version}, pins build openequivariance {' or '.join(want)}")
        return v
    if ob is None or ob.arch.name != tag_arch(tag.platform):
        built = ", ".join(l.arch.platform_tag for l in p.line_builds(of_version.name))
        v.problems.append(f"wheel tag {tag.platform} is not a platform the pins build {version} for ({built})")
        return v
    want_version = line_version(ob)
    py_version = python_of(tag)
    if py_version not in ob.pythons:
        v.problems.append(f"wheel tag {tag} is not one of the pinned CPythons {', '.join(ob.pythons)}")
        return v
    if tag.abi != ob.abi_tag(py_version):  # the tag, the module's suffix and its API level agree (and abi3audit)
        v.problems.append(f"wheel tag {tag}: the pins build CPython {py_version}'s wheel with ABI "
                          f"{ob.abi_tag(py_version)}")
        return v
    cache = cache or default_cache()
    if sdist_root is None or cuda_root is None:
        got = fetch.ensure([p.oeq, *ob.nvidia], cache)
        sdist_root = sdist_root or unpack.oeq_tree(got[p.oeq.file], p.oeq, cache)
        cuda_root = cuda_root or unpack.cuda_tree([(n, got[n.file]) for n in ob.nvidia], cache)
    extlib = oeqpy.EXTLIB.as_posix()
    module = f"{extlib}/{ob.module_name}{ob.ext_suffix(py_version)}"
    aoti = f"{extlib}/{ob.aoti_library}"
    info = f"openequivariance-{want_version}.dist-info"
    tree = {f"openequivariance/{q.relative_to(sdist_root / 'openequivariance').as_posix()}": q
            for q in (sdist_root / "openequivariance").rglob("*") if q.is_file()}
    dispatch = f"{extlib}/{ob.dispatch_library}"
    expected = set(tree) | {module, aoti} | ({dispatch} if ob.dispatch else set()) | {f"{info}/{f}" for f in ("METADATA", "WHEEL", "RECORD",
                                                                     "licenses/LICENSE", OEQ_BUILD_FILE)}
    if variant:  # its one variant, as the pins give the line (the label, the JSON and the build record agree)
        expected.add(f"{info}/{variants.FILE_NAME}")
        if files.get(f"{info}/{variants.FILE_NAME}") != variants.wheel_json(p, ob):
            v.problems.append(f"{variants.FILE_NAME} is not the {variants.label(ob)} variant the pins give the "
                              f"{ob.name} line: {files.get(f'{info}/{variants.FILE_NAME}', b'(none)')[:200]!r}")
    accounted(v, v.facts.pop("names"), expected)
    changed = sorted(a for a, src in tree.items() if a in files and files[a] != src.read_bytes())
    if changed:
        v.problems.append(f"files differ from the pinned sdist: {changed[:10]}")
    if aoti.rsplit("/", 1)[1] != OEQ_STABLE_MARKER:
        v.problems.append(f"{aoti} is not the file OpenEquivariance looks for ({OEQ_STABLE_MARKER})")
    if files.get(f"{info}/METADATA", b"").decode(errors="replace") != \
            oeqpy.metadata_from_sdist((sdist_root / "PKG-INFO").read_text(), want_version):
        v.problems.append("METADATA is not the sdist's PKG-INFO with the binary version")
    if files.get(f"{info}/licenses/LICENSE") != (sdist_root / "LICENSE").read_bytes():
        v.problems.append("licence differs from the OpenEquivariance sdist's LICENSE")
    check_wheel_file(v, files, info, tag, purelib=False)
    try:
        record = OeqBuild.from_json(files.get(f"{info}/{OEQ_BUILD_FILE}", b"").decode(errors="replace"))
        v.problems += build_record_problems(record, p, ob, tag, files, want_version)
    except ManifestError as exc:
        v.problems.append(f"{OEQ_BUILD_FILE}: {exc}")
    cuda_needed = {ob.dispatch_library} if ob.dispatch else set(ob.cuda_sonames())
    needed = {f"lib{l}.so" for l in (*ob.torch_libs, ob.stub_library)} | cuda_needed | {cudaflags.DRIVER_SONAME}
    forbidden = default_forbidden_paths() if forbidden_paths is None else forbidden_paths
    oldest = {} if ob.dispatch else {s: _wheel_lib(cuda_root, ob.cuda_major, s) for s in ob.cuda_sonames()}
    bound = set()
    if ob.dispatch and dispatch in files:
        _, problems = check_elf(files[dispatch], required=DISPATCH_NEEDED, allowed=DISPATCH_NEEDED, runpath=None,
                                arch=ob.arch, forbidden_paths=forbidden)
        bound = dispatch_exports(files[dispatch])
        problems += dispatch_problems(bound, oldest_cuda_libraries(p, ob, cache))
        v.problems += [f"{ob.dispatch_library}: {q}" for q in problems]
    for arc in (module, aoti):
        data = files.get(arc)
        if data is None:
            continue
        facts, problems = check_elf(data, required=needed, allowed=needed, runpath=ob.runpath(), arch=ob.arch,
                                    forbidden_paths=forbidden)
        v.problems += [f"{arc.rsplit('/', 1)[1]}: {q}" for q in problems]
        v.problems += [f"{arc.rsplit('/', 1)[1]}: {q}" for q in abi_problems(data, oldest, bound if ob.dispatch else None)]
    if module in files:
        v.problems += free_threading_problems(files[module], ob.free_threaded(py_version), str(tag))
    if module in files and aoti in files:  # remembered by the build like auditwheel's verdict (verify.remembered)
        said = remembered("torch-abi-audit", wheel, lambda: dict(zip(("said", "problems"), torch_abi_audit(
            {a: files[a] for a in (module, aoti)}, ob))), memo_dir)
        v.facts["torch_abi_audit"] = said["said"]
        v.problems += said["problems"]
    if ob.is_abi3(py_version) and module in files and aoti in files:
        said = remembered("abi3audit", wheel, lambda: dict(zip(("said", "problems"), abi3audit(wheel))), memo_dir)
        v.facts["abi3audit"] = said["said"]
        v.problems += said["problems"]
    audit_and_twine(v, wheel, tag, p, twine, memo_dir)
    return v


def _verify_variant(wheel: Path, base: str, label: str, p: pins_mod.Pins, line: pins_mod.OeqLine | None,
                    kw: dict) -> Verdict:
    """A variant wheel's gate: the line its label and platform name (the module's CUDA libraries are checked against
    that line's), the whole gate run on a copy under the name without the label (auditwheel and twine read a wheel's
    tags from its name and know no label); the bytes are the same."""
    import shutil
    import tempfile

    from . import variants
    ob = variants.line_of(p, wheel.name)
    if ob is None or (line is not None and ob != line):
        v = Verdict(wheel)
        labels = ", ".join(f"{variants.label(l)} ({l.arch.name})" for l in p.oeq_lines)
        v.problems.append(f"{wheel.name}: variant label {label!r} names no line built for its platform; the pins "
                          f"give {labels}" + (f", and this build is {line.key}" if line else ""))
        return v
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-variant-gate-") as tmp:
        copy = Path(tmp) / base
        shutil.copyfile(wheel, copy)
        v = verify_oeq_binary(copy, p, line=ob, variant=True, **kw)
    v.subject = wheel
    return v


def abi3audit(wheel: Path) -> tuple[str, list[str]]:
    """abi3audit's verdict (pypa/abi3audit, hash-locked): every shared object of the wheel uses only the limited
    API of its tag's CPython (cp312-abi3: 3.12), read from its own symbol tables and abi3info's lists."""
    import json
    import sys
    import tempfile
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-abi3audit-") as tmp:
        report = Path(tmp) / "report.json"
        res = proc.run([sys.executable, "-m", "abi3audit", "--strict", "--report", "-o", str(report),
                        str(wheel)], capture_output=True, text=True)
        try:
            specs = json.loads(report.read_text())["specs"]
        except (OSError, ValueError, KeyError):
            return "no report", [f"abi3audit did not report (exit {res.returncode}): "
                                 f"{(res.stderr or res.stdout).strip()[-300:]}"]
    problems, seen = [], []
    for spec in specs.values():
        for obj in spec.get("wheel", []):
            r, name = obj.get("result") or {}, obj.get("name", "?")
            seen.append(f"{name.rsplit('/', 1)[-1]}: {r.get('computed')}")
            if not r.get("is_abi3") or not r.get("is_abi3_baseline_compatible") or r.get("non_abi3_symbols"):
                problems.append(f"abi3audit: {name.rsplit('/', 1)[-1]} is not abi3 {r.get('baseline')}: "
                                f"{', '.join(r.get('non_abi3_symbols') or []) or 'needs ' + str(r.get('computed'))}")
    if res.returncode != 0 and not problems:
        problems.append(f"abi3audit exit {res.returncode}: {(res.stderr or res.stdout).strip()[-300:]}")
    return "; ".join(seen) or "no shared object", problems


def torch_abi_audit(libs: dict[str, bytes], ob: pins_mod.OeqLine) -> tuple[str, list[str]]:
    """torch-abi-audit's verdict on the wheel's libraries, as its report says it, and any disagreement with the
    line: an independent reading (its own symbol tables and torch's shim version list) of our stable-ABI claim."""
    import importlib.metadata
    import tempfile

    from packaging.version import Version
    from torch_abi_audit import inspect_package
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-abi-") as tmp:
        for arc, data in libs.items():
            (Path(tmp) / arc).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / arc).write_bytes(data)
        try:
            report = inspect_package(Path(tmp) / "openequivariance")
        except (OSError, RuntimeError) as exc:  # e.g. no `nm` on PATH
            return "torch-abi-audit did not run", [f"torch-abi-audit: {exc}"]
        found = [(Path(lib.path).name, lib) for lib in (*report.extensions, *report.bundled_libs)]
    verdict, floor = report.torch_verdict, report.min_torch_version
    said = (f"torch-abi-audit {importlib.metadata.version('torch-abi-audit')}: Torch ABI "
            f"{verdict.removeprefix('torch-').upper()}, min torch {floor or 'n/a'}")
    problems = [f"torch-abi-audit: {name}: {lib.error or 'uses torch internals: ' + str(lib.torch.unstable_symbols[:5])}"
                for name, lib in found if lib.error or not lib.torch.stable]
    if sorted(n for n, _ in found) != sorted(Path(a).name for a in libs):
        problems.append(f"torch-abi-audit saw {sorted(n for n, _ in found)}, the wheel ships {sorted(libs)}")
    if verdict != "torch-stable":
        problems.append(f"torch-abi-audit says {verdict}, not torch-stable")
    elif floor is None or Version(floor) != Version(ob.torch_min):
        problems.append(f"torch-abi-audit's minimum torch is {floor}, the line's floor is {ob.torch_min}")
    return said, problems


# What only a module compiled with a free-threaded CPython's headers (Py_GIL_DISABLED) calls: its Py_DECREF's slow
# paths (Include/refcount.h). A GIL build's module never does; a free-threaded CPython's module always does.
FREE_THREADED_REFCOUNT = frozenset({"_Py_DecRefShared", "_Py_MergeZeroLocalRefcount"})


def free_threading_problems(module: bytes, free_threaded: bool, tag: str) -> list[str]:
    """The module's build agrees with its tag: a cpXYt wheel's was compiled for a free-threaded CPython (its
    reference counting says so), every other wheel's for a GIL build."""
    seen = sorted({n for n, _ in dynamic_symbols(module, defined=False)} & FREE_THREADED_REFCOUNT)
    if free_threaded and not seen:
        return [f"wheel tag {tag} is free-threaded, but its module was not compiled with a free-threaded CPython's "
                f"headers (it calls none of {', '.join(sorted(FREE_THREADED_REFCOUNT))})"]
    if not free_threaded and seen:
        return [f"wheel tag {tag} is for a GIL build, but its module calls {', '.join(seen)}: it was compiled with "
                "a free-threaded CPython's headers"]
    return []


def _wheel_lib(cuda_root: Path, cuda_major: str, soname: str) -> Path:
    """Where the line's NVIDIA wheels hold soname (in the layout's first directory if none does)."""
    dirs = [cuda_root / d for d in cudaflags.layout_lib_dirs(cuda_major)]
    return next((d / soname for d in dirs if (d / soname).exists()), dirs[0] / soname)


def build_record_problems(r: OeqBuild, p: pins_mod.Pins, ob: pins_mod.OeqLine, tag, files: dict,
                          version: str | None = None) -> list[str]:
    entry = file_entry
    want = {"package": "openequivariance", "version": version or ob.version(p.oeq.version), "oeq_sdist": entry(p.oeq),
            "torch_min": ob.torch_min, "cuda_major": ob.cuda_major, "built_against": entry(ob.torch),
            "python_tag": tag.interpreter, "platform_tag": tag.platform, "nanobind": entry(ob.nanobind),
            "cuda_wheels": tuple(entry(n) for n in ob.nvidia)}
    out = field_differences("build record", r, want, files=("oeq_sdist", "built_against", "nanobind"),
                            file_lists=("cuda_wheels",))
    for f in r.files:
        data = files.get(f.path)
        if data is None or hashlib.sha256(data).hexdigest() != f.sha256:
            out.append(f"build record's sha256 of {f.path} does not match the file")
    return out


def abi_problems(data: bytes, oldest: dict[str, Path], bound: set[str] | None = None) -> list[str]:
    """torch only through its stable C ABI. Linked (bound None): every versioned CUDA symbol present in the oldest
    pinned wheels. With the dispatch library (bound: what it binds): CUDA's runtime, NVRTC and cuBLAS only through it,
    every such function the library calls under its version node, and bound by it."""
    needs = dynamic_symbols(data, defined=False)
    out = []
    # C++ symbols of torch's namespaces (c10::, at::, torch::) would tie the binary to one torch build;
    # the standard library's (some bound unversioned, as torch's libraries also export them) do not.
    cxx = sorted(n for n, _ in needs if n.startswith("_Z") and TORCH_CXX.search(n))
    if cxx:
        out.append(f"imports C++ symbols, not torch's stable C ABI: {cxx[:5]}")
    if bound is None:
        return out + linked_problems(needs, oldest)
    cuda = {(n, ver) for n, ver in needs if CUDA_FUNCTION.match(n)}
    elsewhere = sorted(f"{n}@{ver}" if ver else n for n, ver in cuda if ver != DISPATCH_VERSION)
    if elsewhere:
        out.append(f"calls CUDA functions not through {DISPATCH_VERSION}: {elsewhere[:5]}")
    unbound = sorted(n for n, ver in cuda if ver == DISPATCH_VERSION and n not in bound)
    if unbound:
        out.append(f"calls {unbound[:5]}, which the dispatch library does not bind (add them to "
                   "oeq/dispatch/cuda_dispatch.c)")
    return out


def linked_problems(needs: set[tuple[str, str | None]], oldest: dict[str, Path]) -> list[str]:
    out = []
    for soname, path in oldest.items():
        wanted = {n for n, ver in needs if ver == soname}
        if not wanted:
            continue
        if not path.is_file():
            out.append(f"cannot check CUDA symbols: {path} missing")
            continue
        have = {n for n, ver in dynamic_symbols(path.read_bytes(), defined=True) if ver == soname}
        lacking = sorted(wanted - have)
        if lacking:
            out.append(f"needs {lacking[:5]} from {soname}, absent in the oldest pinned {soname}")
    return out


# The CUDA libraries the dispatch library stands in for, by the prefix of their functions' names (the driver's are
# cu<Upper>..., through libcuda.so.1, which is not versioned by CUDA release).
CUDA_FUNCTION = re.compile(r"(cuda|nvrtc|cublas)[A-Z_]")
CUDA_LIBRARY = {"cuda": "libcudart.so", "nvrtc": "libnvrtc.so", "cublas": "libcublas.so"}
DISPATCH_NEEDED = {"libc.so.6", "libdl.so.2"}
# The one function whose name the two majors spell differently (CUDA 12's headers call cudaGetDeviceProperties_v2,
# with 12's struct; CUDA 13 names it cudaGetDeviceProperties): the dispatch library adapts it (cuda_dispatch.c).
OTHER_NAME = {"cudaGetDeviceProperties_v2": "cudaGetDeviceProperties", "cudaGetDeviceProperties":
              "cudaGetDeviceProperties_v2"}


def dispatch_exports(data: bytes) -> set[str]:
    """The CUDA functions the dispatch library defines under its version node."""
    return {n for n, ver in dynamic_symbols(data, defined=True) if ver == DISPATCH_VERSION and CUDA_FUNCTION.match(n)}


def oldest_cuda_libraries(p: pins_mod.Pins, ob: pins_mod.OeqLine, cache: Path | None) -> dict[str, dict[str, Path]]:
    """By CUDA major, the oldest pinned library of each soname the dispatch library may bind: the NVIDIA wheels of that
    major that a build of the pins reads (any line's, any architecture's build), the wheel's architecture's where
    pinned, else another's (the exports are the same)."""
    from ..files import default_cache
    from ..inputs import fetch, unpack
    cache = cache or default_cache()
    by_major: dict[str, pins_mod.OeqLine] = {}
    for line in sorted(p.oeq_lines, key=lambda l: l.arch.name != ob.arch.name):  # the wheel's architecture first
        by_major.setdefault(line.cuda_major, line)
    out: dict[str, dict[str, Path]] = {}
    for major, line in by_major.items():
        got = fetch.ensure(list(line.nvidia), cache)
        root = unpack.cuda_tree([(n, got[n.file]) for n in line.nvidia], cache)
        for soname in line.cuda_sonames():
            out.setdefault(major, {})[soname] = _wheel_lib(root, major, soname)
    return out


def dispatch_problems(bound: set[str], oldest: dict[str, dict[str, Path]]) -> list[str]:
    """Every function the dispatch library binds is in the oldest pinned library of its kind, for each CUDA major
    (under the other major's name where the two differ)."""
    out = []
    if not bound:
        out.append(f"exports no CUDA function under {DISPATCH_VERSION}")
    out += [f"cannot check CUDA {m}: pins.toml pins no NVIDIA wheels of it" for m in pins_mod.DISPATCH_MAJORS
            if m not in oldest]
    for major, libs in sorted(oldest.items()):
        for stem in CUDA_LIBRARY.values():
            soname = f"{stem}.{major}"
            want = {n for n in bound if CUDA_LIBRARY[CUDA_FUNCTION.match(n).group(1)] == stem}
            path = libs.get(soname)
            if not want:
                continue
            if path is None or not path.is_file():
                out.append(f"cannot check CUDA {major}'s {soname}: {path or 'not pinned'}")
                continue
            have = {n for n, ver in dynamic_symbols(path.read_bytes(), defined=True) if ver == soname}
            lacking = sorted(n for n in want if n not in have and OTHER_NAME.get(n) not in have)
            if lacking:
                out.append(f"binds {lacking[:5]}, absent in the oldest pinned {soname}")
    return out
