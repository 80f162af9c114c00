"""The plain-install matrix: no compiler at install time either.

For each OEq line (cu130, cu128), each torch release it is tested on and each installer
(pip, uv): a fresh venv; g++, gcc, c++, cc, ninja, nvcc and cmake replaced by failing
sentinels BEFORE the install; then a plain `pip install torch==X openequivariance==0.7.0`
(or, for FastMACE's torch, `pip install torch==2.14.1 fastmace-oeq-ext`) from the registry
plus the line's index of the site (oeq_wheels.release.site, served on loopback) and OUTDIR as
find-links (or, with --from-index, fastmace-oeq-ext from the index it was uploaded to).
OpenEquivariance must then import with its precompiled stable extension (the line's binary
wheel, never the sdist), its operators registered, torch a build of the line's CUDA major,
the doctor (where fastmace-oeq-ext is installed) saying no compiler is needed, and the
sentinel log empty. One more case mixes the lines on purpose (a CUDA 13 torch and the cu128
index): the doctor must refuse in one line, OEq must fail to load without building anything.
On a machine without a GPU a stub libcuda.so.1 stands in for the driver.

A line's build for another architecture than this host's (aarch64 here) gets the same rows, installed for
that platform into a target directory (pip --platform, uv --python-platform) and checked by that
architecture's CPython under emulation (oeq_wheels.checks.emulated), with a stub libcuda.so.1 of it.

The machine's pip configuration is left out (PIP_CONFIG_FILE=/dev/null): a user's
machine has none of this one's local wheel directory or constraints, and the check
asserts the CUDA build it got rather than trusting the resolver.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import parse_wheel_filename

from .. import pins as pins_mod, proc, driver_stub
from ..inputs import freethreaded, pythons
from . import sentinels, venvs
from ..errors import OeqWheelsError, UsageError
from ..toolchain import cross_toolchain, host_arch
from ..files import default_cache, keep_dir
from ..oeq.gate import CUDA_LIBRARY
from ..output import extra_dir
from ..tags import wheel_arch
from ..release import site as site_mod
from . import emulated, hosts, loader_stubs, run_records
from .cleaninstall import has_gpu

INSTALL_SENTINELS = ("g++", "gcc", "c++", "cc", "ninja", "nvcc", "cmake")

CHECK = r"""
import json, importlib.metadata as md, os, platform, sys, sysconfig
gil = getattr(sys, "_is_gil_enabled", lambda: True)
import torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
       "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")), "gil_after_torch": gil()}
from openequivariance._torch import extlib
out.update(gil_after_oeq=gil(), precompiled=extlib.USE_PRECOMPILED_EXTENSION, built=extlib.BUILT_EXTENSION,
           error=str(extlib.BUILT_EXTENSION_ERROR) if extlib.BUILT_EXTENSION_ERROR else None,
           module=getattr(extlib.extension_module, "__file__", None), oeq_version=md.version("openequivariance"),
           ext_version=next((d.version for d in md.distributions() if d.metadata["Name"] == "fastmace-oeq-ext"), None),
           ops=[n for n in ("jit_tp_forward", "jit_tp_backward", "jit_conv_forward")
                if hasattr(torch.ops.libtorch_tp_jit, n)])
if out["built"] and out["module"]:  # the binding forced (no GPU calls it here): what the dispatch library bound
    import ctypes
    d = ctypes.CDLL(os.path.join(os.path.dirname(out["module"]), "liboeq_cuda_dispatch.so"))
    d.oeq_cuda_dispatch_path.restype = ctypes.c_char_p
    out["dispatch"] = {"major": d.oeq_cuda_dispatch_major(),
                       "paths": [os.path.realpath((d.oeq_cuda_dispatch_path(i) or b"").decode()) for i in range(3)]}
out["mapped"] = sorted({l.split()[-1] for l in open("/proc/self/maps") if l.split()[-1].rsplit("/", 1)[-1].startswith(
    {CUDA_SONAMES})})
print("MATRIX " + json.dumps(out))
""".replace("{CUDA_SONAMES}", repr(tuple(f"{stem}." for stem in CUDA_LIBRARY.values())))


@dataclass
class Case:
    torch: str
    installer: str
    line: pins_mod.OeqLine      # the line whose index the install is given
    mix: bool = False           # torch of a CUDA major the line does not serve: a refusal is the pass
    python: str = ""            # the CPython X.Y of a Debian root file system (another architecture's, emulated; or
                                # this host's, natively: a CPython no build here has), X.Yt a free-threaded CPython
                                # built here (inputs/freethreaded.py), else this host's
    path: str = "-"
    result: str = "not run"
    ok: bool = False
    installed: dict = field(default_factory=dict)  # what the check found installed: distribution -> version, and the
                                                   # CPython's wheel ABI tag (cp311, cp314t) under "abi"

    @property
    def foreign(self) -> bool:
        """A build for another architecture than this host's: installed for it, run under emulation."""
        return self.line.arch.name != host_arch()

    @property
    def free_threaded(self) -> bool:
        """A free-threaded CPython built here, on this host (pip and uv in a venv of it)."""
        return pins_mod.free_threaded(self.python)

    @property
    def rooted(self) -> bool:
        """This host's architecture, in a Debian root of a newer CPython (pip and uv run there, through bubblewrap)."""
        return bool(self.python) and not self.foreign and not self.free_threaded

    @property
    def index(self) -> str:
        where = f" {self.line.arch.name} py{self.python}" if self.foreign else \
            f" py{self.python} (Debian {emulated.suite(self.line.arch, self.python)})" if self.rooted else \
            f" py{self.python} (free-threaded, built here)" if self.free_threaded else ""
        return self.line.name + where + (" (mix)" if self.mix else "")

    @property
    def label(self) -> str:
        return f"{self.torch or 'torch'} {self.index} {self.installer}"


def requirements(torch: str, with_fastmace: bool, pins: pins_mod.Pins) -> list[str]:
    if with_fastmace:
        return [f"torch=={torch}", pins.package_name]
    return [f"torch=={torch}", f"openequivariance=={pins.oeq.version}"]


def dispatch_problems(check: dict, stubs: Path | None) -> list[str]:
    """The binding, forced: the dispatch library bound the CUDA runtime, NVRTC and cuBLAS of torch's own CUDA major,
    the libraries the process has mapped are exactly those (/proc/self/maps: no other CUDA runtime), and each comes
    from the install's NVIDIA wheels (its site-packages), or from the load stubs that stand in for them."""
    major = (check["cuda"] or "").split(".")[0]
    bound = check.get("dispatch") or {}
    if str(bound.get("major")) != major:
        return [f"the dispatch library bound CUDA {bound.get('major') or 'nothing'}, not torch's CUDA {major}"]
    wanted = [f"{stem}.{major}" for stem in CUDA_LIBRARY.values()]  # the dispatch library's order of its paths
    if [Path(p).name for p in bound["paths"]] != wanted or sorted(check["mapped"]) != sorted(bound["paths"]):
        return [f"bound {bound['paths']}, mapped {check['mapped']}: not exactly {', '.join(wanted)}"]
    site = Path(os.path.realpath(check["module"])).parents[3]  # <site>/openequivariance/_torch/extlib/<module>
    homes = [str(site / "nvidia") + os.sep] + ([os.path.realpath(stubs) + os.sep] if stubs else [])
    strays = [p for p in bound["paths"] if not p.startswith(tuple(homes))]
    return [f"bound {', '.join(strays)}: not from the install's NVIDIA wheels"] if strays else []


def judge(case: Case, check: dict | None, doctor: tuple[int, str] | None, log: str, pins: pins_mod.Pins,
          stubs: Path | None = None) -> list[str]:
    """Why the case failed; empty when it holds."""
    if check is None:
        return ["the check did not run"]
    why = []
    line = case.line
    # A mix pairs a line with FastMACE's torch, of a CUDA major the line does not serve.
    majors = (pins.matrix.cuda_major,) if case.mix else line.cuda_majors
    if not check["torch"].startswith(case.torch) or (check["cuda"] or "").split(".")[0] not in majors:
        why.append(f"got torch {check['torch']} (CUDA {check['cuda']}), not a CUDA {' or '.join(majors)} build of "
                   f"{case.torch or 'torch'}")
    if case.python and not check.get("python", "").startswith(case.python.removesuffix("t") + "."):
        why.append(f"ran on CPython {check.get('python')}, not {case.python}")
    if case.free_threaded and not check.get("free_threaded"):
        why.append(f"ran on a GIL build of CPython {check.get('python')}, not a free-threaded one")
    if check.get("gil_after_oeq") and not check.get("gil_after_torch"):  # CPython's RuntimeWarning alone says so
        why.append("importing OpenEquivariance turned the GIL back on (its module does not declare Py_MOD_GIL_NOT_USED)")
    if check["oeq_version"] != line.version(pins.oeq.version):
        why.append(f"installed openequivariance {check['oeq_version']}, not our {line.name} binary wheel")
    if log.strip():
        why.append(f"a build tool was called: {log.strip()[:200]}")
    if case.mix:  # OEq tries its (wrong-CUDA) library, fails to load it and builds nothing; the doctor refuses
        if check["built"] or not check["precompiled"]:
            why.append(f"OEq loaded an extension beside the wrong CUDA (precompiled={check['precompiled']}, "
                       f"built={check['built']})")
        lines = doctor[1].strip().splitlines() if doctor else []
        if doctor is None or doctor[0] == 0 or not lines or f"built for CUDA {' and '.join(line.cuda_majors)}" not in lines[0]:
            why.append(f"the doctor did not refuse the mix in its first line: {lines[:1] or doctor}")
        return why
    if not (check["precompiled"] and check["built"]):
        why.append(f"OEq did not load its precompiled extension: {check['error']}")
    else:
        why += dispatch_problems(check, stubs)
    if len(check["ops"]) != 3:
        why.append(f"operators missing: {check['ops']}")
    if doctor is not None and (doctor[0] != 0 or not doctor[1].startswith("host extension: OpenEquivariance precompiled")):
        why.append(f"doctor: {doctor[1].splitlines()[0] if doctor[1] else doctor[0]}")
    return why


def _install_command(case: Case, pins: pins_mod.Pins, args: list[str], base_python: str, work: Path,
                     env: dict) -> tuple[list[str], list[str], Path | None]:
    """(the install command, the interpreter that runs the check, the install's directory or None for a venv's).

    This host's architecture: a fresh venv and its pip, or uv into it. Another architecture: a target directory
    filled for that platform and the emulated CPython's version (pip takes exactly the --platform tags it is
    given), checked by that CPython under qemu."""
    fresh = [a for name in (pins.package_name, "openequivariance") for a in ("--refresh-package", name)]
    if case.rooted:  # inside the root: its CPython's own venv and pip, or uv (the pinned tools' binary) with it
        py = case.python
        box = emulated.sandbox(emulated.rootfs(case.line.arch, py, default_cache()))
        venv, interpreter = work / "venv", f"/usr/bin/python{py}"  # the judge checks the venv's CPython is py
        vpy = str(venv / "bin" / "python")
        if case.installer == "uv":  # uv's own choice of CPython (no --python): the root's only one
            from uv import find_uv_bin
            uv = find_uv_bin()
            proc.run([*box, uv, "venv", "-q", str(venv)], env=env, check=True, capture_output=True)
            return [*box, uv, "pip", "install", "-q", "--python", vpy, *fresh, *args], [*box, vpy], None
        proc.run([*box, interpreter, "-m", "venv", str(venv)], env=env, check=True, capture_output=True)
        return [*box, vpy, "-m", "pip", "install", "-q", *args], [*box, vpy], None
    if case.foreign:
        arch, py, target = case.line.arch, case.python, work / "target"
        runner = emulated.command(arch, py, emulated.rootfs(arch, py, default_cache()))
        if case.installer == "uv":
            return ([sys.executable, "-m", "uv", "pip", "install", "-q", "--target", str(target), "--python-platform",
                     f"{arch.name}-{arch.platform_tag.rsplit('_', 1)[0]}", "--python-version", py, *fresh, *args],
                    runner, target)
        plats = [a for tag in manylinux_tags(arch.platform_tag) for a in ("--platform", tag)]
        return ([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *plats, "--implementation",
                 "cp", "--python-version", py, "--abi", pins_mod.cp_tag(py), "--only-binary", ":all:", *args],
                runner, target)
    venv = work / "venv"
    vpy = str(venv / "bin" / "python")
    if case.installer == "uv":
        proc.run([sys.executable, "-m", "uv", "venv", "-q", "--python", base_python, str(venv)],
                 env=env, check=True, capture_output=True)
        # uv takes wheel file names as immutable; a rebuilt wheel of the same name must not come from its cache.
        return [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", vpy, *fresh, *args], [vpy], None
    proc.run([base_python, "-m", "venv", str(venv)], env=env, check=True, capture_output=True)
    return [vpy, "-m", "pip", "install", "-q", *args], [vpy], None


def run_case(case: Case, pins: pins_mod.Pins, args: list[str], base_python: str, keep: bool, say,
             with_fastmace: bool, env_extra: dict | None = None, standins: bool = False,
             path_extra: Path | None = None) -> Case:
    """One fresh install of ARGS (pip or uv), compilers hidden before it; then the checks.

    env_extra: variables for the installer (e.g. a stand-in for PyPI's index), set last.
    standins: PyPI through the session mirror's stand-in index (venvs.standin_url; tests/support/pypi_mirror.py:
    NVIDIA's library wheels and Triton as their metadata alone, resolved as PyPI's), and load stubs for the libraries
    they leave out; no GPU is called either way. Without a mirror (a run outside the suite), PyPI's wheels whole.
    """
    # Where a failed or --keep case stays (files.keep_dir), outside the run's own temporary directory.
    work = Path(tempfile.mkdtemp(prefix=f"oeq-matrix-{case.torch}-{case.line.key}-{case.python or 'venv'}-"
                                        f"{case.installer}-", dir=keep_dir()))
    log = work / "sentinel.log"
    sbin = sentinels.make(work / "sentinels", log, INSTALL_SENTINELS)
    env = {k: v for k, v in venvs.pip_env().items() if not k.startswith("UV_") and k not in
           ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "VIRTUAL_ENV")}
    # In a Debian root, its own PATH: this host's CPythons (bound in with its folders) are not that system's.
    path = "/usr/local/bin:/usr/bin:/bin" if case.rooted else env["PATH"]
    asked, standins = standins, standins and venvs.standin_url() is not None
    path = f"{path_extra}{os.pathsep}{path}" if path_extra else path  # after the sentinels: a stand-in nvidia-smi
    env.update(venvs.index_env(standins), PATH=f"{sbin}{os.pathsep}{path}", UV_NO_CONFIG="1",
               TORCH_EXTENSIONS_DIR=str(work / "ext"))
    env.update(env_extra or {})
    try:
        cmd, runner, site = _install_command(case, pins, args, base_python, work, env)
        shown = cmd[max(i for i, a in enumerate(cmd) if a == "--bind") + 3:] if case.rooted else cmd  # not bwrap's
        say(f"{case.label}: {' '.join(Path(shown[0]).name if i == 0 else c for i, c in enumerate(shown))}")
        r = proc.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            case.result = f"install failed: {(r.stderr or r.stdout).strip().splitlines()[-1][:300]}"
            return case
        run_env = dict(env, PYTHONPATH=str(site)) if site else dict(env)
        site = site or Path(proc.run([*runner, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                     capture_output=True, text=True, check=True).stdout.strip())
        mods = sorted((site / "openequivariance" / "_torch" / "extlib").glob("oeq_stable_cuda*.so"))
        cc, stub_dir, stubbed = cross_toolchain(case.line.arch).cc if case.foreign else "gcc", work / "libcuda-stub", []
        if mods and (case.foreign or not has_gpu()):  # a stub driver of the library's architecture
            driver_stub.stub_for_library(mods[0], stub_dir, cc)
        if standins:  # NVIDIA's libraries the stand-ins left out: load stubs of what the install takes from them
            root = emulated.rootfs(case.line.arch, case.python, default_cache()) if case.rooted or case.foreign else None
            interpreter = root / "usr" / "bin" / f"python{case.python}" if root else Path(runner[-1])
            stubbed = loader_stubs.make(site, interpreter, stub_dir, cc, sysroot=root)
        if stub_dir.is_dir():
            run_env["LD_LIBRARY_PATH"] = driver_stub.loader_path(stub_dir, run_env)
        if with_fastmace:
            run_env["FASTMACE_OEQ_PREBUILT"] = "1"  # nothing may be compiled
        t0 = time.monotonic()
        c = proc.run([*runner, "-W", "ignore", "-c", CHECK], env=run_env, capture_output=True, text=True, cwd=work)
        took = time.monotonic() - t0
        lines = [l for l in c.stdout.splitlines() if l.startswith("MATRIX ")]
        check = json.loads(lines[-1][7:]) if lines else None
        if check:
            major, minor = check["python"].split(".")[:2]
            case.installed = {"openequivariance": check["oeq_version"], "fastmace-oeq-ext": check.get("ext_version"),
                              "abi": f"cp{major}{minor}{'t' if check['free_threaded'] else ''}"}
        doctor = None
        if with_fastmace:
            d = proc.run([*runner, "-m", "fastmace_oeq_ext"], env=run_env, capture_output=True, text=True, cwd=work)
            doctor = (d.returncode, d.stdout)
            if case.mix and d.stdout:
                case.path = "refused: " + d.stdout.splitlines()[0][:110]
        if not case.mix:
            whose = f"our {case.line.arch.name} wheel; emulated import {took:.0f} s" if case.foreign else \
                f"our {Path(check['module']).name}" if (case.rooted or case.free_threaded) and check and check["module"] \
                else "our binary wheel"
            if check and (check.get("dispatch") or {}).get("major"):
                whose += f"; CUDA {check['dispatch']['major']} bound"
            if case.free_threaded and check:
                whose += "; the GIL " + ("stays off" if not check["gil_after_oeq"] else
                                         "was on before OEq" if check["gil_after_torch"] else "came back on")
            case.path = (f"OEq precompiled ({whose})" if check and check["precompiled"] else
                         f"JIT ({check['error'][:60] if check and check['error'] else 'no check'})")
            if standins:  # the exact set: loader_stubs.make holds it to what the install's files NEED and lack
                case.path += f"; NVIDIA's wheels stand-ins, load stubs: {', '.join(sorted(p.name for p in stubbed)) or 'none'}"
            elif asked:  # no stand-in index (OEQ_WHEELS_PYPI_MIRROR=off): the stronger run, PyPI's wheels whole
                case.path += f"; {WHOLE_SHOWN}"
        why = judge(case, check, doctor, log.read_text() if log.exists() else "", pins,
                    stub_dir if stubbed else None)
        if check is None:
            why.append(c.stderr.strip()[-500:])
        elif mods and check["built"] and not (check["module"] or "").startswith(str(site)):
            why.append(f"OEq loaded {check['module']}, not the installed wheel's library")
        elif case.python and not case.mix and case.python not in case.line.pythons and \
                not (check["module"] or "").endswith(case.line.ext_suffix(case.line.abi3 or "")):
            why.append(f"CPython {case.python} loaded {check['module']}, not the line's stable-ABI module")
        elif case.free_threaded and not case.mix and not (check["module"] or "").endswith(case.line.ext_suffix(case.python)):
            why.append(f"CPython {case.python} loaded {check['module']}, not the line's free-threaded module")
        case.ok = not why
        case.result = "PASS" if case.ok else "FAIL: " + "; ".join(why)
        return case
    finally:
        if (keep or not case.ok) and sys.exc_info()[0] is None:  # an interrupted case keeps nothing
            say(f"{case.label}: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def manylinux_tags(target: str) -> list[str]:
    """Every manylinux tag a system of `target` (manylinux_2_28_aarch64) runs, newest first, down to
    manylinux2014 (glibc 2.17): NVIDIA's aarch64 wheels are tagged 2_27 and 2_17."""
    major, minor, arch = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", target).groups()
    return [f"manylinux_{major}_{m}_{arch}" for m in range(int(minor), 16, -1)] + [f"manylinux2014_{arch}"]


WHOLE_SHOWN = "NVIDIA's wheels whole, no load stubs"
# What run_case appends to a stand-in case's path: its load stubs by soname ("none" for none), or WHOLE_SHOWN.
STUBS_SHOWN = re.compile(r"NVIDIA's wheels stand-ins, load stubs: (none|lib[\w.+-]+(?:, lib[\w.+-]+)*)|"
                         + re.escape(WHOLE_SHOWN))


def stubs_shown(printed: str) -> list[list[str]]:
    """Each stand-in case's load stubs as the table printed them (its exact sonames; [] for a case run with
    NVIDIA's wheels whole, the stronger run): for a caller that reads the table, as the tests do."""
    return [m.group(1).split(", ") if m.group(1) not in (None, "none") else [] for m in STUBS_SHOWN.finditer(printed)]


def table(cases: list[Case]) -> str:
    rows = [("torch", "index", "installer", "path taken", "result")] + [
        (c.torch or "any", c.index, c.installer, c.path, c.result) for c in cases]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join([*(r[i].ljust(widths[i]) for i in range(4)), r[4]]) for r in rows)


def plan(pins: pins_mod.Pins, torches: list[str] | None, installers: list[str],
         arches: list[str] | None = None, emulated_pythons: list[str] | None = None,
         plain: bool = True) -> list[Case]:
    """Every line's tested torches with each installer, for each architecture it is built for (another than this
    host's with each of its emulated CPythons), then the mixed pair (a CUDA 13 torch, the cu12 index)."""
    bad = [i for i in installers if i not in ("pip", "uv")]
    if bad or not installers:
        raise UsageError(f"--installer takes pip and/or uv, not {', '.join(bad) or 'nothing'}")
    built = list(dict.fromkeys(l.arch.name for l in pins.oeq_lines))
    if arches is not None and (not arches or set(arches) - set(built)):
        raise UsageError(f"--arch {','.join(arches) or '(empty)'}: the OEq lines are built for {', '.join(built)}")
    known = {t for l in pins.oeq_lines for t in l.tested_torch}
    unknown = [t for t in torches or [] if t not in known]
    if unknown:
        raise UsageError(f"--torch {', '.join(unknown)}: no OEq line is tested on it; pinned: {', '.join(sorted(known))}")
    def rows(line):  # (torch, CPython of a Debian root or "") of the line
        if line.arch.name != host_arch():
            return [(t, v) for t in line.tested_torch for v in line.arch.emulated_pythons
                    if emulated_pythons is None or v in emulated_pythons]
        newer = [(t, v) for v, d in line.arch.debian_pythons.items() if line.serves(v) for t in d["torch"]
                 if t in line.tested_torch and (emulated_pythons is None or v in emulated_pythons)]
        threaded = [(t, v) for v, ft in pins.freethreaded.items() if v in line.pythons for t in ft.torch
                    if t in line.tested_torch and (emulated_pythons is None or v in emulated_pythons)]
        return [(t, "") for t in line.tested_torch if plain] + newer + threaded
    cases = [Case(t, i, line, python=v) for line in pins.oeq_lines for t, v in rows(line)
             if (torches is None or t in torches) and (arches is None or line.arch.name in arches)
             for i in installers]
    other = [l for l in pins.oeq_lines if not l.serves_cuda(pins.matrix.cuda_major) and l.arch.name == host_arch()]
    fastmace_torch = pins.matrix.torch_version  # the torch fastmace-oeq-ext requires
    if plain and other and (torches is None or fastmace_torch in torches) and (arches is None or host_arch() in arches):
        cases.append(Case(fastmace_torch, installers[0], other[0], mix=True))
    return cases


def installed_by(case: Case, filename: str) -> bool:
    """Whether the case's check found this wheel installed: its distribution at its version, for the case's
    architecture and CPython (an abi3 wheel: a GIL CPython at least its version)."""
    dist, version, _, tags = parse_wheel_filename(filename)
    if case.installed.get(str(dist)) != str(version) or wheel_arch(filename) != case.line.arch.name:
        return False
    tag, want = next(iter(tags)), case.installed["abi"]
    if tag.abi == "abi3":
        return not want.endswith("t") and int(want[3:]) >= int(tag.interpreter[3:])
    return tag.abi == want


def write_record(record: Path, commit: str, cases: list[Case], wheels: list[site_mod.Wheel], fastmace: list[Path],
                 python: str, pins: pins_mod.Pins) -> run_records.RunRecord:
    """The run's record (checks/run_records.py): each case's result and path, the sha256 of each wheel a case's check
    found installed (of those served, wheels, and fastmace-oeq-ext's in the OUTDIR, fastmace), the torches, the
    venvs' CPython."""
    used = sorted({p for p in [*(w.path for w in wheels), *fastmace] if any(installed_by(c, p.name) for c in cases)})
    return run_records.write(
        record, "make install-matrix " + " ".join(sys.argv[2:]), commit,
        {"device": "none (no GPU: installs and imports, every compiler a sentinel)", "driver": "none",
         "python": pythons.find(python).full_version, "torch": ", ".join(sorted({c.torch for c in cases if c.torch}))},
        used, all(c.ok for c in cases),
        {"cases": [{"case": c.label, "line": c.line.key, "python": c.python or python, "ok": c.ok, "path": c.path,
                    "result": c.result}
                   for c in cases]}, [])


def run(outdir: Path, torches: list[str] | None, installers: list[str], python: str, keep: bool = False,
        from_index: str | None = None, arches: list[str] | None = None,
        emulated_pythons: list[str] | None = None, uv_cache: Path | None = None, plain: bool = True,
        standins: bool = False, record: Path | None = None) -> int:
    """from_index: take fastmace-oeq-ext from this index (e.g. TestPyPI after an upload), not from OUTDIR.
    uv_cache: uv's cache for the uv cases (default: uv's own, as a user's uv install uses).
    plain: the rows of this host's own CPython too (False: only those of CPythons in a Debian root).
    standins: NVIDIA's library wheels and Triton as stand-ins (run_case).
    record: write the run's record there (checks/run_records.py), failed or not."""
    pins = pins_mod.load()
    commit = run_records.checkout_commit() if record else ""
    cases = plan(pins, torches, installers, arches, emulated_pythons, plain)
    outdir = Path(outdir).resolve()
    extra = extra_dir(outdir)
    wheels = site_mod.from_outdir(extra, pins) if extra.is_dir() else []
    built = {(line.name, wheel_arch(w.name)) for w in wheels
             if w.name.startswith("openequivariance-") and (line := site_mod.line_of_file(w.name, pins))}
    missing = sorted({c.line.key for c in cases if (c.line.name, c.line.arch.name) not in built})
    if missing:
        raise UsageError(f"no openequivariance wheel of {', '.join(missing)} in {extra}; build first (make wheels)")
    base = pythons.find(python).executable
    say = lambda m: print(f"install-matrix: {m}", file=sys.stderr, flush=True)
    threaded = {v: freethreaded.interpreter(pins.freethreaded[v], default_cache(), say).executable
                for v in dict.fromkeys(c.python for c in cases if c.free_threaded)}
    with tempfile.TemporaryDirectory(prefix="oeq-matrix-site-") as tmp:
        site = site_mod.write_site(Path(tmp) / "site", wheels, pins)
        fastmace_src = ["--extra-index-url", from_index] if from_index else ["--find-links", str(outdir)]
        with hosts.pages(site, pins.repository.split("/")[1]) as root:  # served as the release serves it
            for case in cases:
                # fastmace-oeq-ext: x86_64 only, for the CPythons of its matrix
                with_fastmace = case.torch == pins.matrix.torch_version and not case.python
                args = [*requirements(case.torch, with_fastmace, pins), "--extra-index-url",
                        f"{root}{case.line.index_paths[0]}/", *(fastmace_src if with_fastmace else [])]
                run_case(case, pins, args, threaded.get(case.python, base), keep, say, with_fastmace,
                         {"UV_CACHE_DIR": str(uv_cache)} if uv_cache else None, standins)
                say(f"{case.label}: {case.result}")
    print(table(cases))
    if record:
        write_record(record, commit, cases, wheels, [] if from_index else sorted(outdir.glob("*.whl")), python, pins)
        say(f"wrote the run record {record}")
    if not all(c.ok for c in cases):
        raise OeqWheelsError(f"{sum(not c.ok for c in cases)} of {len(cases)} install cases failed")
    return 0
