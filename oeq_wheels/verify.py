"""Check a built wheel on its own: contents, RECORD, ELF, auditwheel's verdict, metadata, licence."""
from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from .link import RUNPATH

# __main__.py makes `python -m fastmace_oeq_ext` (the doctor) work.
PACKAGE_FILES = ("__init__.py", "__main__.py", "libtorch_tp_jit.so", "manifest.json", "LICENSE.openequivariance",
                 "BUILD_COMPILER.txt")
TORCH_NEEDED = {"libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so",
                "libtorch_python.so"}
CUDA_NEEDED = {"libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13", "libcuda.so.1"}
# Libraries every manylinux system has (auditwheel's policies whitelist them).
SYSTEM_NEEDED = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"}
# What the wheel may leave to torch, the NVIDIA wheels and the driver.
EXTERNAL_OK = TORCH_NEEDED | CUDA_NEEDED


@dataclass
class Verdict:
    wheel: Path
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


def audit(wheel: Path) -> dict:
    """auditwheel's analysis of the wheel (its JSON report)."""
    proc = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"auditwheel show failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def proven_tag(report: dict) -> tuple[str | None, list[str]]:
    """The manylinux tag auditwheel's symbol-version check proves, and any reasons it can't.

    auditwheel's overall tag is linux_x86_64 for every torch extension, because
    libtorch and the CUDA libraries come from other wheels (torch, nvidia-*), not
    from this one; like `auditwheel repair --exclude`, we accept exactly those as
    external and take the tag its symbol-version policy check proves.
    """
    problems = []
    extra = sorted(set(report.get("external_libs", {})) - EXTERNAL_OK)
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


def elf_facts(data: bytes) -> dict:
    elf = ELFFile(io.BytesIO(data))
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


def check_elf(data: bytes, forbidden_paths: list[str]) -> tuple[dict, list[str]]:
    facts, problems = elf_facts(data), []
    needed = set(facts["needed"])
    if any(n.startswith("libpython") for n in needed):
        problems.append(f"links libpython: {sorted(needed)}")
    missing = (TORCH_NEEDED | CUDA_NEEDED) - needed
    if missing:
        problems.append(f"NEEDED lacks {sorted(missing)}")
    unexpected = needed - TORCH_NEEDED - CUDA_NEEDED - SYSTEM_NEEDED
    if unexpected:
        problems.append(f"unexpected NEEDED {sorted(unexpected)}")
    if facts["runpath"] != RUNPATH:
        problems.append(f"RUNPATH is {facts['runpath']!r}, expected {RUNPATH!r}")
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


def verify_wheel(wheel: Path, *, expected_license: bytes | None = None,
                 forbidden_paths: list[str] | None = None, twine: bool = True) -> Verdict:
    v = Verdict(wheel)
    try:
        name, version, _, tags = parse_wheel_filename(wheel.name)
    except Exception as exc:  # packaging's InvalidWheelFilename
        v.problems.append(f"bad wheel file name: {exc}")
        return v
    (tag,) = tags
    try:
        with WheelFile(wheel) as wf:  # reading checks every file against RECORD
            files = {n: wf.read(n) for n in wf.namelist() if not n.endswith("/RECORD")}
    except Exception as exc:
        v.problems.append(f"RECORD check failed: {exc}")
        return v
    pkg = "fastmace_oeq_ext/"
    listed = sorted(n[len(pkg):] for n in files if n.startswith(pkg))
    if listed != sorted(PACKAGE_FILES):
        v.problems.append(f"package files are {listed}, expected {sorted(PACKAGE_FILES)}")
        return v
    lib = files[pkg + "libtorch_tp_jit.so"]
    try:
        manifest = json.loads(files[pkg + "manifest.json"])
    except ValueError as exc:
        v.problems.append(f"manifest.json is not JSON: {exc}")
        return v
    facts, problems = check_elf(lib, default_forbidden_paths() if forbidden_paths is None else forbidden_paths)
    v.problems += problems
    lib_sha = hashlib.sha256(lib).hexdigest()
    if manifest.get("library", {}).get("sha256") != lib_sha:
        v.problems.append("manifest's library sha256 does not match the library")
    if manifest.get("python", {}).get("tag") != tag.interpreter:
        v.problems.append(f"manifest Python tag {manifest.get('python', {}).get('tag')} != wheel tag {tag.interpreter}")
    if manifest.get("platform", {}).get("tag") != tag.platform:
        v.problems.append(f"manifest platform tag {manifest.get('platform', {}).get('tag')} != wheel tag {tag.platform}")
    if manifest.get("package", {}).get("version") != str(version):
        v.problems.append("manifest version differs from the wheel's")
    lic = files[pkg + "LICENSE.openequivariance"]
    dist_lic = [n for n in files if n.endswith(".dist-info/licenses/LICENSE.openequivariance")]
    if not dist_lic or files[dist_lic[0]] != lic:
        v.problems.append("dist-info licence differs from the package's LICENSE.openequivariance")
    if expected_license is not None and lic != expected_license:
        v.problems.append("LICENSE.openequivariance differs from the OpenEquivariance sdist's LICENSE")
    # auditwheel is the judge of the platform tag.
    try:
        report = audit(wheel)
        proven, problems = proven_tag(report)
        v.problems += problems
        v.facts["auditwheel_sym_tag"] = proven
        if proven and manylinux_version(tag.platform) is None:
            v.problems.append(f"platform tag {tag.platform} is not a manylinux tag")
        elif proven and manylinux_version(proven) > manylinux_version(tag.platform):
            v.problems.append(f"tagged {tag.platform} but auditwheel proves only {proven}")
    except (RuntimeError, ValueError) as exc:
        v.problems.append(str(exc))
    if twine:
        proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            v.problems.append(f"twine check failed: {(proc.stdout + proc.stderr).strip()[-1500:]}")
    v.facts.update(tag=str(tag), needed=facts["needed"], runpath=facts["runpath"],
                   size=wheel.stat().st_size, sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
    return v
