"""The gate's common part: what every wheel of ours is checked for, whichever the product.

RECORD, exactly the expected files (nothing else: no .pth, no path outside the package),
the WHEEL file, ELF facts (NEEDED, RUNPATH, stripped, no build-host paths), auditwheel's
verdict on the platform tag, `twine check --strict`. The products add their own checks:
oeq_wheels.ext.verify (fastmace-oeq-ext: every manifest field against the pins) and
oeq_wheels.oeq.verify (binary openequivariance: the sdist's tree, the build record, the
stable C ABI, every versioned CUDA symbol in its line's oldest wheels); oeq_wheels.gate picks one
by the wheel's name. This module imports neither: the products build on it, never the reverse.
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

from . import pins as pins_mod, proc
from .errors import OeqWheelsError
from .files import write_atomic

# Libraries every manylinux system has (auditwheel's policies whitelist them).
# Mangled names of torch's C++ namespaces: c10::, at::, torch::.
TORCH_CXX = re.compile(r"(?:^_ZN|[0-9])(?:3c10|2at|5torch)")
# The architecture's dynamic loader joins these (pins: [arch.NAME] loader).
SYSTEM_NEEDED = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6"}


@dataclass
class Verdict:
    """The outcome of a check: ok when no problem was found; facts say what was seen."""

    subject: Path
    problems: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


ARCH_SUFFIX = r"(x86_64|aarch64)"  # the architectures whose manylinux tags we read


def manylinux_version(tag: str) -> tuple[int, int] | None:
    """The glibc of a manylinux tag of x86_64 or aarch64 (None for any other tag)."""
    m = re.fullmatch(rf"manylinux_(\d+)_(\d+)_{ARCH_SUFFIX}", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17),
              "manylinux2014_aarch64": (2, 17)}
    return legacy.get(tag)


def tag_arch(tag: str) -> str | None:
    """x86_64 or aarch64 for a manylinux or linux platform tag."""
    m = re.search(rf"_{ARCH_SUFFIX}$", tag)
    return m.group(1) if m else None


def wheel_arch(filename: str) -> str | None:
    """The architecture of a (single-tag) wheel, by its file name."""
    return tag_arch(next(iter(parse_wheel_filename(filename)[3])).platform)


def external_ok(p: pins_mod.Pins) -> frozenset[str]:
    """What a wheel may leave to torch, the NVIDIA wheels and the driver."""
    return (p.torch_needed | p.cuda_needed
            | {f"lib{l}.so" for ob in p.oeq_lines for l in (*ob.torch_libs, ob.stub_library)}
            | {s for ob in p.oeq_lines for s in ob.cuda_sonames()})


def remembered(tool: str, wheel: Path, ask, memo_dir: Path | None) -> dict:
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
    return remembered("auditwheel", wheel, ask, memo_dir)


def twine_check(wheel: Path, memo_dir: Path | None = None) -> str | None:
    """Why `twine check --strict` refuses the wheel, or None."""
    def ask() -> dict:
        res = proc.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                       capture_output=True, text=True)
        return {"problem": None if res.returncode == 0 else (res.stdout + res.stderr).strip()[-1500:]}
    return remembered("twine", wheel, ask, memo_dir)["problem"]


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
    if tag_arch(proven) != tag_arch(target):
        raise OeqWheelsError(f"auditwheel proves {proven} for a build that targets {target}: the binary is of "
                             "another architecture than its pins")
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


def check_elf(data: bytes, *, required: set[str], allowed: set[str], runpath: str,
              forbidden_paths: list[str], arch: pins_mod.Arch) -> tuple[dict, list[str]]:
    facts, problems = elf_facts(data), []
    if facts["machine"] != arch.elf_machine:
        problems.append(f"is an {facts['machine']} binary, the wheel's tag says {arch.name} ({arch.elf_machine})")
    needed = set(facts["needed"])
    if any(n.startswith("libpython") for n in needed):
        problems.append(f"links libpython: {sorted(needed)}")
    missing = required - needed
    if missing:
        problems.append(f"NEEDED lacks {sorted(missing)}")
    unexpected = needed - allowed - SYSTEM_NEEDED - {arch.loader}
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
def open_wheel(wheel: Path, v: Verdict):
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


def python_of(tag) -> str | None:
    """'3.11' for a cp311-cp311 wheel tag, '3.12' for cp312-abi3 (the oldest CPython it serves); None for any other
    interpreter or ABI."""
    cp = tag.interpreter
    return f"{cp[2]}.{cp[3:]}" if re.fullmatch(r"cp3\d+", cp) and tag.abi in (cp, "abi3") else None


def zip_infos(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        return zf.infolist()


def accounted(v: Verdict, names: set[str], expected: set[str]) -> None:
    """Every file in the archive is one we expect, and every expected one is there."""
    extra, missing = sorted(names - expected), sorted(expected - names)
    if extra:
        v.problems.append(f"files that do not belong in the wheel: {extra[:10]}")
    if missing:
        v.problems.append(f"files missing from the wheel: {missing[:10]}")


def check_wheel_file(v: Verdict, files: dict, info: str, tag, purelib: bool) -> None:
    want = "Wheel-Version: 1.0\nGenerator: "
    text = files.get(f"{info}/WHEEL", b"").decode(errors="replace")
    if not text.startswith(want) or f"Root-Is-Purelib: {'true' if purelib else 'false'}" not in text \
            or f"Tag: {tag}" not in text:
        v.problems.append(f"{info}/WHEEL does not describe this wheel (tag {tag})")


def audit_and_twine(v: Verdict, wheel: Path, tag, p: pins_mod.Pins, twine: bool, memo_dir: Path | None) -> None:
    try:
        proven, problems = proven_tag(audit(wheel, memo_dir), external_ok(p))
        v.problems += problems
        v.facts["auditwheel_sym_tag"] = proven
        if proven and manylinux_version(tag.platform) is None:
            v.problems.append(f"platform tag {tag.platform} is not a manylinux tag")
        elif proven and tag_arch(proven) != tag_arch(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel sees {tag_arch(proven)} binaries ({proven})")
        elif proven and manylinux_version(proven) > manylinux_version(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel proves only {proven}")
    except (OeqWheelsError, ValueError) as exc:
        v.problems.append(str(exc))
    if twine:
        problem = twine_check(wheel, memo_dir)
        if problem:
            v.problems.append(f"twine check failed: {problem}")
    v.facts.update(tag=str(tag), size=wheel.stat().st_size, sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())


def file_entry(x) -> tuple[str, str, str, str]:
    """A pinned file (pins.Pinned) or a recorded one (manifest.Input), comparable with each other."""
    return (x.name, x.version, x.file, x.sha256)


def field_differences(what: str, record, want: dict, files: tuple[str, ...] = (),
                      file_lists: tuple[str, ...] = ()) -> list[str]:
    """One line for each field of a record (a manifest, a build record) that is not what the pins say. The fields
    in `files` are one recorded file each, those in `file_lists` a tuple of them: both compared as file_entry."""
    got = {k: getattr(record, k) for k in want}
    got.update({k: file_entry(got[k]) for k in files})
    got.update({k: tuple(file_entry(i) for i in got[k]) for k in file_lists})
    return [f"{what} {k} is {got[k]!r}, pins say {want[k]!r}" for k in want if got[k] != want[k]]
