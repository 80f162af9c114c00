"""The gate: a wheel is checked on its own against the pins, whole.

Both packages: RECORD, exactly the expected files (nothing else: no .pth, no path
outside the package), METADATA equal to what the pins give, ELF facts (NEEDED,
RUNPATH, stripped, no build-host paths), auditwheel's verdict on the platform tag,
`twine check --strict`. fastmace-oeq-ext: every manifest field against the pins.
openequivariance (binary): the package tree byte-equal to the pinned sdist's, the build
record against the pins, torch reached only through its stable C ABI, and every
versioned CUDA symbol present in the oldest NVIDIA wheels the pins allow.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from wheel.wheelfile import WheelFile

from fastmace_oeq_ext import cudaflags
from fastmace_oeq_ext.manifest import FILE_NAME as MANIFEST_FILE, OEQ_BUILD_FILE, Manifest, ManifestError, OeqBuild

from . import pins as pins_mod, proc
from .errors import OeqWheelsError
from .files import write_atomic

# Libraries every manylinux system has (auditwheel's policies whitelist them).
# Mangled names of torch's C++ namespaces: c10::, at::, torch::.
TORCH_CXX = re.compile(r"(?:^_ZN|[0-9])(?:3c10|2at|5torch)")
SYSTEM_NEEDED = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"}


@dataclass
class Verdict:
    """The outcome of a check: ok when no problem was found; facts say what was seen."""

    subject: Path
    problems: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def manylinux_version(tag: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}
    return legacy.get(tag)


def external_ok(p: pins_mod.Pins) -> frozenset[str]:
    """What a wheel may leave to torch, the NVIDIA wheels and the driver."""
    return (p.torch_needed | p.cuda_needed
            | {f"lib{l}.so" for ob in p.oeq_lines for l in (*ob.torch_libs, ob.stub_library)}
            | {s for ob in p.oeq_lines for s in ob.cuda_sonames()})


def _remembered(tool: str, wheel: Path, ask, memo_dir: Path | None) -> dict:
    """ask() -> a JSON-able verdict; with memo_dir, remembered under the wheel's sha256 and the tool's version.

    Starting auditwheel and twine takes most of a no-change rebuild, whose wheels are byte-identical
    to the last ones. Only the build passes memo_dir: `verify` and `publish` always ask afresh.
    """
    if memo_dir is None:
        return ask()
    key = hashlib.sha256(f"{tool} {importlib.metadata.version(tool)} ".encode() + wheel.read_bytes()).hexdigest()
    memo = memo_dir / f"{tool}-{key}.json"
    try:
        return json.loads(memo.read_text())
    except (OSError, ValueError):
        pass
    verdict = ask()
    memo_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(memo, json.dumps(verdict))
    return verdict


def audit(wheel: Path, memo_dir: Path | None = None) -> dict:
    """auditwheel's analysis of the wheel (its JSON report)."""
    def ask() -> dict:
        res = proc.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)],
                       capture_output=True, text=True)
        if res.returncode != 0:
            raise OeqWheelsError(f"auditwheel show failed: {res.stderr.strip()[-2000:]}")
        return json.loads(res.stdout)
    return _remembered("auditwheel", wheel, ask, memo_dir)


def twine_check(wheel: Path, memo_dir: Path | None = None) -> str | None:
    """Why `twine check --strict` refuses the wheel, or None."""
    def ask() -> dict:
        res = proc.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                       capture_output=True, text=True)
        return {"problem": None if res.returncode == 0 else (res.stdout + res.stderr).strip()[-1500:]}
    return _remembered("twine", wheel, ask, memo_dir)["problem"]


def proven_tag(report: dict, allowed: frozenset[str]) -> tuple[str | None, list[str]]:
    """The manylinux tag auditwheel's symbol-version check proves, and any reasons it can't.

    auditwheel's overall tag is linux_x86_64 for every torch extension, because
    libtorch and the CUDA libraries come from other wheels (torch, nvidia-*), not
    from this one; like `auditwheel repair --exclude`, we accept exactly those as
    external and take the tag its symbol-version policy check proves.
    """
    problems = []
    extra = sorted(set(report.get("external_libs", {})) - allowed)
    if extra:
        problems.append(f"auditwheel: unexpected external libraries {extra}")
    if report.get("unsupported_isa"):
        problems.append(f"auditwheel: unsupported ISA extensions {report['unsupported_isa']}")
    tag = report.get("sym_tag")
    if not tag or manylinux_version(tag) is None:
        problems.append(f"auditwheel proves no manylinux tag (symbol policy: {tag})")
        return None, problems
    return tag, problems


def choose_tag(target: str, proven: str) -> str:
    """The target tag if the binary fits it, else the (newer) tag that is proven."""
    return target if manylinux_version(proven) <= manylinux_version(target) else proven


# ---------------------------------------------------------------- ELF
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
    return {"needed": needed, "runpath": runpath, "rpath": rpath,
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


def check_elf(data: bytes, *, required: set[str], allowed: set[str], runpath: str,
              forbidden_paths: list[str]) -> tuple[dict, list[str]]:
    facts, problems = elf_facts(data), []
    needed = set(facts["needed"])
    if any(n.startswith("libpython") for n in needed):
        problems.append(f"links libpython: {sorted(needed)}")
    missing = required - needed
    if missing:
        problems.append(f"NEEDED lacks {sorted(missing)}")
    unexpected = needed - allowed - SYSTEM_NEEDED
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


# ---------------------------------------------------------------- common wheel checks
def _open(wheel: Path, v: Verdict):
    """(name, version, tag, files) of a wheel, or None with the problem recorded."""
    try:
        name, version, _, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        v.problems.append(f"bad wheel file name: {exc}")
        return None
    if len(tags) != 1:
        v.problems.append(f"{wheel.name} carries {len(tags)} tags; exactly one (cpXY-cpXY-<platform>) is expected")
        return None
    try:
        with WheelFile(wheel) as wf:  # reading checks every file against RECORD
            files = {n: wf.read(n) for n in wf.namelist() if not n.endswith("/RECORD")}
            names = set(wf.namelist())
    except Exception as exc:  # a damaged zip or RECORD: any error here is the wheel's
        v.problems.append(f"RECORD check failed: {exc}")
        return None
    links = [i.filename for i in zip_infos(wheel) if (i.external_attr >> 16) & 0o170000 == 0o120000]
    if links:
        v.problems.append(f"symbolic links in the archive: {links}")
    v.facts["names"] = names
    return canonicalize_name(name), str(version), next(iter(tags)), files


def zip_infos(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        return zf.infolist()


def _accounted(v: Verdict, names: set[str], expected: set[str]) -> None:
    """Every file in the archive is one we expect, and every expected one is there."""
    extra, missing = sorted(names - expected), sorted(expected - names)
    if extra:
        v.problems.append(f"files that do not belong in the wheel: {extra[:10]}")
    if missing:
        v.problems.append(f"files missing from the wheel: {missing[:10]}")


def _wheel_file(v: Verdict, files: dict, info: str, tag, purelib: bool) -> None:
    want = "Wheel-Version: 1.0\nGenerator: "
    text = files.get(f"{info}/WHEEL", b"").decode(errors="replace")
    if not text.startswith(want) or f"Root-Is-Purelib: {'true' if purelib else 'false'}" not in text \
            or f"Tag: {tag}" not in text:
        v.problems.append(f"{info}/WHEEL does not describe this wheel (tag {tag})")


def _audit_and_twine(v: Verdict, wheel: Path, tag, p: pins_mod.Pins, twine: bool, memo_dir: Path | None) -> None:
    try:
        proven, problems = proven_tag(audit(wheel, memo_dir), external_ok(p))
        v.problems += problems
        v.facts["auditwheel_sym_tag"] = proven
        if proven and manylinux_version(tag.platform) is None:
            v.problems.append(f"platform tag {tag.platform} is not a manylinux tag")
        elif proven and manylinux_version(proven) > manylinux_version(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel proves only {proven}")
    except (OeqWheelsError, ValueError) as exc:
        v.problems.append(str(exc))
    if twine:
        problem = twine_check(wheel, memo_dir)
        if problem:
            v.problems.append(f"twine check failed: {problem}")
    v.facts.update(tag=str(tag), size=wheel.stat().st_size, sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())


def _pins_for_manifest(matrix: str, v: Verdict) -> pins_mod.Pins | None:
    try:
        return pins_mod.load(matrix)
    except pins_mod.PinsError as exc:
        v.problems.append(f"manifest names matrix {matrix!r}: {exc}")
        return None


# ---------------------------------------------------------------- fastmace-oeq-ext
def verify_wheel(wheel: Path, p: pins_mod.Pins | None = None, *, expected_license: bytes | None = None,
                 forbidden_paths: list[str] | None = None, twine: bool = True,
                 memo_dir: Path | None = None) -> Verdict:
    """Check a fastmace-oeq-ext wheel against the pins (those of its manifest's matrix unless given)."""
    from . import assemble
    v = Verdict(wheel)
    opened = _open(wheel, v)
    if opened is None:
        return v
    name, version, tag, files = opened
    pkg = "fastmace_oeq_ext/"
    try:
        manifest = Manifest.from_json(files.get(pkg + MANIFEST_FILE, b"").decode(errors="replace"))
    except ManifestError as exc:
        v.problems.append(f"{MANIFEST_FILE}: {exc}")
        return v
    p = p or _pins_for_manifest(manifest.matrix, v)
    if p is None:
        return v
    if name != canonicalize_name(p.package_name):
        v.problems.append(f"wheel is {name}, pins release {p.package_name}")
        return v
    info = assemble.dist_info_name(p)
    expected = {pkg + f for f in assemble.package_files(p)}
    expected |= {f"{info}/{f}" for f in ("METADATA", "WHEEL", "RECORD", "licenses/LICENSE",
                                         "licenses/LICENSE.openequivariance")}
    _accounted(v, v.facts.pop("names"), expected)
    if version != p.version:
        v.problems.append(f"wheel version {version}, pins say {p.version}")
    cp = tag.interpreter
    py_version = f"{cp[2]}.{cp[3:]}" if re.fullmatch(r"cp3\d+", cp) else None
    if py_version not in p.matrix.pythons or tag.abi != cp:
        v.problems.append(f"wheel tag {tag} is not one of the pinned CPythons {', '.join(p.matrix.pythons)}")
    elif files.get(f"{info}/METADATA", b"").decode(errors="replace") != assemble.metadata_text(p, py_version):
        v.problems.append("METADATA differs from what the pins give (name, version, Requires-Dist, "
                          "Requires-Python, licence or description)")
    _wheel_file(v, files, info, tag, purelib=False)
    lib = files.get(pkg + p.library_file)
    if lib is not None:
        facts, problems = check_elf(lib, required=set(p.torch_needed | p.cuda_needed),
                                    allowed=set(p.torch_needed | p.cuda_needed), runpath=p.runpath(),
                                    forbidden_paths=default_forbidden_paths() if forbidden_paths is None
                                    else forbidden_paths)
        v.problems += problems
        v.facts.update(needed=facts["needed"], runpath=facts["runpath"])
        if manifest.library_sha256 != hashlib.sha256(lib).hexdigest():
            v.problems.append("manifest's library sha256 does not match the library")
    v.problems += manifest_problems(manifest, p, tag)
    lic = files.get(pkg + "LICENSE.openequivariance")
    if lic is None or files.get(f"{info}/licenses/LICENSE.openequivariance") != lic:
        v.problems.append("dist-info licence differs from the package's LICENSE.openequivariance")
    if expected_license is not None and lic != expected_license:
        v.problems.append("LICENSE.openequivariance differs from the OpenEquivariance sdist's LICENSE")
    _audit_and_twine(v, wheel, tag, p, twine, memo_dir)
    return v


def _file_entry(x) -> tuple[str, str, str, str]:
    """A pinned file (pins.Pinned) or a recorded one (manifest.Input), comparable with each other."""
    return (x.name, x.version, x.file, x.sha256)


def manifest_problems(m: Manifest, p: pins_mod.Pins, tag) -> list[str]:
    """Every manifest field that the pins decide, compared with them (one line per difference)."""
    entry = as_tuple = _file_entry
    cp = tag.interpreter
    want = {
        "package": p.package_name, "version": p.version, "oeq_version": p.oeq.version,
        "oeq_sdist": entry(p.oeq), "torch_version": p.matrix.torch_version, "torch_local": p.matrix.torch_local,
        "cuda": p.matrix.cuda, "python_tag": cp, "platform_tag": tag.platform, "library": p.library_file,
        "extension_name": p.oeq_extension_name, "pybind11": entry(p.pybind11), "matrix": p.matrix.name,
        "cuda_wheels": tuple(entry(n) for n in p.matrix.nvidia),
    }
    got = {k: getattr(m, k) for k in want}
    got.update(oeq_sdist=as_tuple(m.oeq_sdist), pybind11=as_tuple(m.pybind11),
               cuda_wheels=tuple(as_tuple(i) for i in m.cuda_wheels))
    out = [f"manifest {k} is {got[k]!r}, pins say {want[k]!r}" for k in want if got[k] != want[k]]
    if cp in p.matrix.torch_wheels and as_tuple(m.torch_wheel) != entry(p.matrix.torch_wheel(cp)):
        out.append(f"manifest torch_wheel {m.torch_wheel.file} is not the pinned {p.matrix.torch_wheel(cp).file}")
    if m.cxx11_abi not in (0, 1):
        out.append(f"manifest cxx11_abi is {m.cxx11_abi}, expected 0 or 1")
    return out


# ---------------------------------------------------------------- binary openequivariance
def line_of(version: str, p: pins_mod.Pins) -> pins_mod.OeqLine | None:
    """The OEq line whose version this is."""
    return next((l for l in p.oeq_lines if l.version(p.oeq.version) == version), None)


def verify_oeq_binary(wheel: Path, p: pins_mod.Pins, *, line: pins_mod.OeqLine | None = None,
                      sdist_root: Path | None = None, cuda_root: Path | None = None,
                      forbidden_paths: list[str] | None = None, twine: bool = True,
                      memo_dir: Path | None = None) -> Verdict:
    """Check a binary openequivariance wheel against the pins of its line (by its version) and the pinned sdist."""
    from fastmace_oeq_ext.decision import OEQ_STABLE_MARKER
    from . import fetch, inputs, oeqpy, stable
    from .files import default_cache
    v = Verdict(wheel)
    opened = _open(wheel, v)
    if opened is None:
        return v
    name, version, tag, files = opened
    ob = line or line_of(version, p)
    want = [l.version(p.oeq.version) for l in ([line] if line else p.oeq_lines)]
    if name != "openequivariance" or ob is None or version != ob.version(p.oeq.version):
        v.problems.append(f"wheel is {name} {version}, pins build openequivariance {' or '.join(want)}")
        return v
    want_version = ob.version(p.oeq.version)
    cp = tag.interpreter
    py_version = f"{cp[2]}.{cp[3:]}" if re.fullmatch(r"cp3\d+", cp) else None
    if py_version not in ob.pythons or tag.abi != cp:
        v.problems.append(f"wheel tag {tag} is not one of the pinned CPythons {', '.join(ob.pythons)}")
        return v
    cache = default_cache()
    if sdist_root is None or cuda_root is None:
        got = fetch.ensure([p.oeq, *ob.nvidia], cache)
        sdist_root = sdist_root or inputs.oeq_tree(got[p.oeq.file], p.oeq, cache)
        cuda_root = cuda_root or inputs.cuda_tree([(n, got[n.file]) for n in ob.nvidia], cache)
    extlib = oeqpy.EXTLIB.as_posix()
    module = f"{extlib}/{ob.module_name}{stable.ext_suffix(py_version)}"
    aoti = f"{extlib}/{ob.aoti_library}"
    info = f"openequivariance-{want_version}.dist-info"
    tree = {f"openequivariance/{q.relative_to(sdist_root / 'openequivariance').as_posix()}": q
            for q in (sdist_root / "openequivariance").rglob("*") if q.is_file()}
    expected = set(tree) | {module, aoti} | {f"{info}/{f}" for f in ("METADATA", "WHEEL", "RECORD",
                                                                     "licenses/LICENSE", OEQ_BUILD_FILE)}
    _accounted(v, v.facts.pop("names"), expected)
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
    _wheel_file(v, files, info, tag, purelib=False)
    try:
        record = OeqBuild.from_json(files.get(f"{info}/{OEQ_BUILD_FILE}", b"").decode(errors="replace"))
        v.problems += build_record_problems(record, p, ob, tag, files)
    except ManifestError as exc:
        v.problems.append(f"{OEQ_BUILD_FILE}: {exc}")
    needed = {f"lib{l}.so" for l in (*ob.torch_libs, ob.stub_library)} | set(ob.cuda_sonames()) \
        | {pins_mod.DRIVER_SONAME}
    oldest = {s: _wheel_lib(cuda_root, ob.cuda_major, s) for s in ob.cuda_sonames()}
    for arc in (module, aoti):
        data = files.get(arc)
        if data is None:
            continue
        facts, problems = check_elf(data, required=needed, allowed=needed, runpath=ob.runpath(),
                                    forbidden_paths=default_forbidden_paths() if forbidden_paths is None
                                    else forbidden_paths)
        v.problems += [f"{arc.rsplit('/', 1)[1]}: {q}" for q in problems]
        v.problems += [f"{arc.rsplit('/', 1)[1]}: {q}" for q in abi_problems(data, oldest)]
    _audit_and_twine(v, wheel, tag, p, twine, memo_dir)
    return v


def _wheel_lib(cuda_root: Path, cuda_major: str, soname: str) -> Path:
    """Where the line's NVIDIA wheels hold soname (in the layout's first directory if none does)."""
    dirs = [cuda_root / d for d in cudaflags.layout_lib_dirs(cuda_major)]
    return next((d / soname for d in dirs if (d / soname).exists()), dirs[0] / soname)


def build_record_problems(r: OeqBuild, p: pins_mod.Pins, ob: pins_mod.OeqLine, tag, files: dict) -> list[str]:
    entry = as_tuple = _file_entry
    want = {"package": "openequivariance", "version": ob.version(p.oeq.version), "oeq_sdist": entry(p.oeq),
            "torch_min": ob.torch_min, "cuda_major": ob.cuda_major, "built_against": entry(ob.torch),
            "python_tag": tag.interpreter, "platform_tag": tag.platform, "nanobind": entry(ob.nanobind),
            "cuda_wheels": tuple(entry(n) for n in ob.nvidia)}
    got = {k: getattr(r, k) for k in want}
    got.update(oeq_sdist=as_tuple(r.oeq_sdist), built_against=as_tuple(r.built_against),
               nanobind=as_tuple(r.nanobind), cuda_wheels=tuple(as_tuple(i) for i in r.cuda_wheels))
    out = [f"build record {k} is {got[k]!r}, pins say {want[k]!r}" for k in want if got[k] != want[k]]
    for f in r.files:
        data = files.get(f.path)
        if data is None or hashlib.sha256(data).hexdigest() != f.sha256:
            out.append(f"build record's sha256 of {f.path} does not match the file")
    return out


def abi_problems(data: bytes, oldest: dict[str, Path]) -> list[str]:
    """torch only through its stable C ABI; every versioned CUDA symbol present in the oldest pinned wheels."""
    needs = dynamic_symbols(data, defined=False)
    out = []
    # C++ symbols of torch's namespaces (c10::, at::, torch::) would tie the binary to one torch build;
    # the standard library's (some bound unversioned, as torch's libraries also export them) do not.
    cxx = sorted(n for n, _ in needs if n.startswith("_Z") and TORCH_CXX.search(n))
    if cxx:
        out.append(f"imports C++ symbols, not torch's stable C ABI: {cxx[:5]}")
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
