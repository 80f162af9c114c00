"""The two rules proposed to FastMACE (docs/fastmace-proposal.md), as code the owner can adopt.

Written against FastMACE 1.0.0's interfaces (``fastmace.kernels._oeq_runtime``: ``Prebuilt``, the
``fastmace-oeq-ext`` manifest keys, ``RuntimePlan.environment`` / ``.extension``, ``OEqRuntimeError``;
``fastmace.cli.doctor``: ``check_oeq`` and ``CHECKS``). Nothing of FastMACE's code is copied here: every
step FastMACE already has (the stand-in CUDA home, the preloaded libraries, the toolchain build) is
called from FastMACE's own module, and only the two decisions are ours.

Rule 1, ``prebuilt_extension()`` (a drop-in for 1.0.0's): fastmace-oeq-ext's library fits when the
manifest names the installed torch **release** (``2.14.1`` for both ``2.14.1`` from PyPI and
``2.14.1+cu130`` from PyTorch's index: the same binary) and torch's CUDA (``cuda`` in torch/version.py,
read as text: importing torch costs seconds and must not happen before the OEq runtime is prepared),
and the OpenEquivariance release likewise (``0.7.0+oeqwheels.cu13.1`` is a build of the 0.7.0 sources);
CPython and Linux x86_64 exactly, as before.

Rule 2, ``oeq_precompiled()``: OpenEquivariance has its own precompiled extension here
(``openequivariance/_torch/extlib/liboeq_stable_cuda_aoti.so``, found with ``find_spec``, never
imported) and it serves this torch: OEq 0.7.0's own conditions (a CUDA torch of release 2.10 or newer,
``OEQ_JIT_EXTENSION`` not set to 1 by the user) and, where the wheel carries a build record
(``oeq_wheels_build.json`` in its .dist-info, as this project's binary wheels do), its CUDA major and
torch floor. Then ``prepare_in_process()`` leaves ``OEQ_JIT_EXTENSION`` unset and builds nothing, and
``import openequivariance`` loads that extension.

``prepare_in_process()`` prefers a usable fastmace-oeq-ext (FastMACE's path today, unchanged), then
OEq's precompiled extension, then FastMACE's own toolchain build (unchanged). ``FASTMACE_OEQ_PREBUILT=1``
("refuse to build") accepts either of the first two and otherwise raises with both reasons.

``install()`` puts these over FastMACE 1.0.0's functions in the running process (nothing is written
into FastMACE's files); ``contrib/fastmace/launch.py`` runs a command with them installed.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
from importlib import metadata
from pathlib import Path

OEQ_STABLE_LIBRARY = "liboeq_stable_cuda_aoti.so"  # OEq 0.7.0 takes its precompiled path when this exists
OEQ_STABLE_FLOOR = (2, 10)  # OEq 0.7.0: "PyTorch version ... is < 2.10, minimum required for precompiled extension"
OEQ_BUILD_RECORD = "oeq_wheels_build.json"  # a binary wheel's record: cuda_majors (or cuda_major), torch_min
OEQ_PRECOMPILED_SOURCE = "oeq-precompiled"  # RuntimePlan.extension["source"] when rule 2 applies
FASTMACE_VERSION = "1.0.0"  # the FastMACE whose interfaces this is written against


def _runtime():
    from fastmace.kernels import _oeq_runtime
    return _oeq_runtime


def release(version: str | None) -> str | None:
    """A version without its local label: 2.14.1+cu130 -> 2.14.1."""
    return version.split("+", 1)[0] if version else version


def _release_tuple(version: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)", release(version) or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _package_dir(name: str) -> Path | None:
    """A package's directory, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def torch_build(package_dir=None) -> dict:
    """torch/version.py's ``__version__``, ``cuda`` and ``hip``, read as text; {} where torch is not found."""
    directory = _package_dir("torch") if package_dir is None else package_dir
    try:
        text = (Path(directory) / "version.py").read_text() if directory else ""
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"(__version__|cuda|hip)\s*(?::[^=]*)?=\s*(.+?)\s*$", line)
        if m:
            try:
                out[m.group(1)] = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError):
                out[m.group(1)] = None
    return out


def _cuda_of_local(torch_version: str | None) -> str | None:
    """cu130 -> 13.0, from a torch version's local label (manifests without a ``cuda`` key)."""
    m = re.search(r"\+cu(\d+)(\d)$", torch_version or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


# --------------------------------------------------------------------------- rule 1

def prebuilt_extension(environ=None, versions=None, package_directory=None, platform=None, torch_cuda=None):
    """FastMACE 1.0.0's ``prebuilt_extension`` with rule 1; same arguments and ``Prebuilt`` answer.

    ``torch_cuda``: torch's CUDA version (default: torch/version.py's ``cuda``, read as text).
    """
    rt = _runtime()
    environ = os.environ if environ is None else environ
    package_directory = package_directory or rt._package_directory
    platform = platform or rt._platform
    name = rt.PREBUILT_DISTRIBUTION
    if environ.get(rt.PREBUILT_SWITCH) == "0":
        return rt.Prebuilt(None, {}, f"{rt.PREBUILT_SWITCH}=0")
    directory = package_directory()
    if directory is None:
        return rt.Prebuilt(None, {}, f"{name} is not installed")
    try:
        manifest = json.loads((Path(directory) / rt.PREBUILT_MANIFEST).read_text())
    except (OSError, ValueError) as error:
        return rt.Prebuilt(None, {}, f"{name} has no readable {rt.PREBUILT_MANIFEST} ({error})")
    system, machine = platform()
    if not system.startswith("linux") or machine not in ("x86_64", "AMD64"):
        return rt.Prebuilt(None, manifest, f"{name} is for Linux x86_64, not {system} {machine}")
    versions = versions or {n: _distribution_version(n) for n in ("torch", "openequivariance")}
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if manifest.get("python") != python:
        return rt.Prebuilt(None, manifest, f"{name} was built for python {manifest.get('python')}, installed is {python}")
    for key in ("torch", "openequivariance"):  # the release: the local label names where a build came from
        if release(manifest.get(key)) != release(versions.get(key)) or not versions.get(key):
            return rt.Prebuilt(None, manifest, f"{name} was built for {key} {manifest.get(key)}, "
                                               f"installed is {versions.get(key)}")
    built_cuda = manifest.get("cuda") or _cuda_of_local(manifest.get("torch"))
    have_cuda = torch_build().get("cuda") if torch_cuda is None else torch_cuda
    if built_cuda is None or built_cuda != have_cuda:
        return rt.Prebuilt(None, manifest, f"{name} was built for torch {manifest.get('torch')} with CUDA {built_cuda}, "
                                           f"installed torch {versions.get('torch')} is built for CUDA {have_cuda}")
    library = Path(directory) / manifest.get("library", f"{rt.EXTENSION_NAME}{rt.LIBRARY_SUFFIX}")
    if not library.is_file():
        return rt.Prebuilt(None, manifest, f"{library} is missing")
    return rt.Prebuilt(library, manifest)


# --------------------------------------------------------------------------- rule 2

def _oeq_build_record() -> dict:
    try:
        text = metadata.distribution("openequivariance").read_text(OEQ_BUILD_RECORD)
        return json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, OSError, ValueError):
        return {}


def oeq_precompiled(environ=None, package_directory=None, torch=None, record=None):
    """Whether OpenEquivariance loads its own precompiled extension here, as a FastMACE ``Prebuilt``:
    ``library`` its liboeq_stable_cuda_aoti.so, ``manifest`` its build record ({} without one), else ``reason``.

    Reads files only (find_spec, torch/version.py, the distributions' metadata). ``torch``: the fields of
    ``torch_build()``; ``record``: the build record, for tests.
    """
    rt = _runtime()
    environ = os.environ if environ is None else environ
    directory = _package_dir("openequivariance") if package_directory is None else package_directory
    oeq = _distribution_version("openequivariance")
    if directory is None:
        return rt.Prebuilt(None, {}, "openequivariance is not installed")
    library = Path(directory) / "_torch" / "extlib" / OEQ_STABLE_LIBRARY
    if not library.is_file():
        return rt.Prebuilt(None, {}, f"openequivariance {oeq} has no precompiled extension ({library} is missing)")
    if environ.get("OEQ_JIT_EXTENSION") == "1":
        return rt.Prebuilt(None, {}, "OEQ_JIT_EXTENSION=1 is set: OpenEquivariance builds its JIT extension")
    torch = torch_build() if torch is None else torch
    record = _oeq_build_record() if record is None else record
    version = torch.get("__version__")
    if not version:
        return rt.Prebuilt(None, record, "torch is not installed")
    if torch.get("hip") or not torch.get("cuda"):
        return rt.Prebuilt(None, record, f"openequivariance {oeq}'s precompiled extension is for CUDA; torch {version} "
                                         f"is a {'HIP' if torch.get('hip') else 'CPU'} build")
    have = _release_tuple(version)
    # the CUDA majors it serves: schema 3's cuda_majors (one build for CUDA 12 and 13), schema 2's one cuda_major
    majors = [str(m) for m in record.get("cuda_majors") or ([record["cuda_major"]] if record.get("cuda_major") else [])]
    if majors and torch["cuda"].split(".")[0] not in majors:
        return rt.Prebuilt(None, record, f"openequivariance {oeq} is built for CUDA {' and '.join(majors)}, torch "
                                         f"{version} is built for CUDA {torch['cuda']}")
    floor = _release_tuple(record.get("torch_min")) or OEQ_STABLE_FLOOR
    if have is None or have < max(floor, OEQ_STABLE_FLOOR):
        wanted = ".".join(map(str, max(floor, OEQ_STABLE_FLOOR)))
        return rt.Prebuilt(None, record, f"openequivariance {oeq}'s precompiled extension needs torch >= {wanted}, "
                                         f"torch {version} is installed")
    return rt.Prebuilt(library, record)


# --------------------------------------------------------------------------- where the rules act

def prepare_in_process(cache, preload=True, environ=None, build=None, *, lock_wait=None):
    """FastMACE 1.0.0's ``prepare_in_process`` with rule 2: same arguments and (plan, handles) answer.

    fastmace-oeq-ext usable (rule 1) or OEq's precompiled extension not usable: FastMACE's own function,
    unchanged (it calls the module's ``prebuilt_extension``, rule 1 once installed). Else FastMACE's plan
    (stand-in CUDA home, preloaded libraries) without ``OEQ_JIT_EXTENSION`` and nothing built; the plan's
    ``extension`` says ``source: "oeq-precompiled"`` and the library.
    """
    rt = _runtime()
    environ = os.environ if environ is None else environ
    lock_wait = rt.LOCK_WAIT if lock_wait is None else lock_wait
    original = getattr(prepare_in_process, "fastmace_original", None)
    if original is None:
        raise RuntimeError("install() the rules first, or call FastMACE's prepare_in_process")
    rt._check_not_too_late()
    prebuilt = rt.prebuilt_extension(environ)
    precompiled = oeq_precompiled(environ)
    if prebuilt.usable or not precompiled.usable:
        if not prebuilt.usable and environ.get(rt.PREBUILT_SWITCH) == "1":
            raise rt.OEqRuntimeError(
                f"OEq unavailable: prebuilt extension not usable: {prebuilt.reason}; OpenEquivariance's precompiled "
                f"extension not usable: {precompiled.reason}",
                why=f"{rt.PREBUILT_SWITCH}=1 forbids the host-toolchain build",
                next_step="install openequivariance's binary wheel for torch's CUDA (CUDA 13 torch >= 2.11), or "
                          f"fastmace-oeq-ext for this torch release, or unset {rt.PREBUILT_SWITCH}.")
        return original(cache, preload, environ, build, lock_wait=lock_wait)
    start = time.perf_counter()
    try:
        rt.find_runtime()
    except rt.OEqRuntimeError:  # no CUDA 13 runtime wheel (a CUDA 12 torch): FastMACE's stand-in CUDA home and its
        # preloads serve its JIT build alone; OEq's precompiled extension binds the CUDA libraries torch loaded
        runtime_plan = rt.RuntimePlan(root=Path(os.path.realpath(os.path.expanduser(cache))))
    else:
        runtime_plan = rt._plan_for(cache, environ)
    environment = {k: v for k, v in runtime_plan.environment.items() if k != "OEQ_JIT_EXTENSION"}
    extension = {"key": None, "path": str(precompiled.library), "source": OEQ_PRECOMPILED_SOURCE, "error": None,
                 "version": _distribution_version("openequivariance"), "prebuilt_skipped": prebuilt.reason}
    runtime_plan = dataclasses.replace(runtime_plan, environment=environment, extension=extension)
    rt.materialize(runtime_plan)
    environ.update(environment)
    extension["seconds"] = round(time.perf_counter() - start, 3)
    handles = rt.preload_libraries(runtime_plan) if preload else []
    return runtime_plan, handles


PRECOMPILED_LINE = "host extension: OpenEquivariance precompiled ({library}); no compiler needed"
TOOLCHAIN_LINE = "host extension: built with the host toolchain"
# What FastMACE's doctor asks for its JIT build alone (a CUDA 12 torch has no CUDA 13 runtime wheel, and needs none here)
NOT_NEEDED = ("missing: g++ not found", "missing: ninja not found", "extension not built yet:", "extension built before:",
              "missing: no CUDA 13 runtime wheel")


def check_oeq(context):
    """FastMACE 1.0.0's doctor check ``check_oeq`` with rule 2: its own answer, where OEq's precompiled
    extension is used the toolchain line becomes PRECOMPILED_LINE (g++ and ninja are not needed); else
    the reason it is not used is added."""
    original = getattr(check_oeq, "fastmace_original", None)
    if original is None:
        from fastmace.cli import doctor
        original = doctor.check_oeq
    item = original(context)
    lines = item.detail.splitlines()
    if not any(line.startswith(TOOLCHAIN_LINE) for line in lines):
        return item  # not installed, or fastmace-oeq-ext is used: FastMACE's answer
    precompiled = oeq_precompiled(context.environ)
    if not precompiled.usable:
        return dataclasses.replace(item, detail="\n".join(
            lines + [f"OpenEquivariance precompiled not used: {precompiled.reason}"]))
    reason = _runtime().prebuilt_extension(context.environ).reason
    kept = []
    for line in lines:
        if line.startswith(TOOLCHAIN_LINE):
            kept.append(PRECOMPILED_LINE.format(library=precompiled.library))
            kept.append(f"fastmace-oeq-ext not used: {reason}")
        elif not line.startswith(NOT_NEEDED):
            kept.append(line)
    ok = not any(line.startswith(("missing: ", "stale build lock: ")) for line in kept)
    return dataclasses.replace(item, ok=ok, detail="\n".join(kept), fix=None if ok else item.fix)


def install():
    """Put the rules over FastMACE 1.0.0's ``prebuilt_extension``, ``prepare_in_process`` and doctor
    ``check_oeq`` in this process; idempotent. Refuses another FastMACE (its interfaces may differ)."""
    import fastmace
    if fastmace.__version__ != FASTMACE_VERSION:
        raise RuntimeError(f"these rules are written against FastMACE {FASTMACE_VERSION}, not {fastmace.__version__}")
    rt = _runtime()
    for name, ours in (("prebuilt_extension", prebuilt_extension), ("prepare_in_process", prepare_in_process)):
        current = getattr(rt, name)
        if current is not ours:
            ours.fastmace_original = current
            setattr(rt, name, ours)
    from fastmace.cli import doctor
    if doctor.check_oeq is not check_oeq:
        check_oeq.fastmace_original = doctor.check_oeq
        doctor.CHECKS = tuple(check_oeq if c is doctor.check_oeq else c for c in doctor.CHECKS)
        doctor.check_oeq = check_oeq


check_oeq.title, check_oeq.required = "OpenEquivariance", False  # what FastMACE's doctor reads of a check
