"""Prebuilt OpenEquivariance host extension (libtorch_tp_jit) for one torch/CUDA/CPython build.

check() decides, from manifest.json and the installed distributions alone (no
torch or OEq import), whether the shipped library matches this environment.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
ENV_PREBUILT = "FASTMACE_OEQ_PREBUILT"


@dataclass(frozen=True)
class Decision:
    usable: bool
    reason: str           # one line
    library: str | None   # path of the prebuilt library when usable

    def __bool__(self) -> bool:
        return self.usable


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch_build() -> dict | None:
    """torch's version.py, read as text from its distribution (importing torch costs seconds)."""
    try:
        files = metadata.distribution("torch").files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/") == "torch/version.py":
            text = Path(f.locate()).read_text()
            out = {}
            for line in text.splitlines():
                for key in ("__version__", "cuda", "git_version"):
                    if line.startswith(key) and "=" in line:
                        val = line.split("=", 1)[1].strip()
                        out[key] = val.strip("'\"") if val != "None" else None
            return out
    return None


def _torch_cxx11_abi() -> int | None:
    """The C++ ABI torch was built with: only known once torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))


def load_manifest(path: Path = MANIFEST) -> dict:
    return json.loads(path.read_text())


def check(manifest_path: Path | None = None, environment: dict | None = None) -> Decision:
    """Does the prebuilt library match this environment exactly? Returns the decision and why.

    environment (for tests and callers that already know): keys torch_version,
    torch_cuda, cxx11_abi, oeq_version, python_tag, system, machine.
    """
    path = manifest_path or MANIFEST
    try:
        m = load_manifest(path)
        want_torch, want_cuda = m["torch"]["version"], m["torch"]["cuda"]
        want_abi, want_oeq = int(m["torch"]["cxx11_abi"]), m["openequivariance"]["version"]
        want_py, lib = m["python"]["tag"], m["library"]
    except FileNotFoundError:
        return Decision(False, f"manifest missing: {path}", None)
    except (ValueError, KeyError, TypeError) as exc:
        return Decision(False, f"manifest unreadable ({path}): {type(exc).__name__}: {exc}", None)
    env = dict(environment or {})
    if "torch_version" not in env:
        build = _torch_build()
        if build is None:
            return Decision(False, "torch is not installed", None)
        env.setdefault("torch_version", build.get("__version__"))
        env.setdefault("torch_cuda", build.get("cuda"))
    env.setdefault("cxx11_abi", _torch_cxx11_abi())
    env.setdefault("oeq_version", _dist_version("openequivariance"))
    env.setdefault("python_tag", f"cp{sys.version_info[0]}{sys.version_info[1]}")
    env.setdefault("system", platform.system())
    env.setdefault("machine", platform.machine())

    tv = env["torch_version"] or ""
    release, _, local = tv.partition("+")
    if release != want_torch:
        return Decision(False, f"torch {tv} installed, library built for torch {want_torch}", None)
    # PyPI's CUDA 13.0 build says 2.14.1+cu130 in version.py while its distribution
    # version is plain 2.14.1: both are the same binary. The local tag must agree with cuda.
    if env["torch_cuda"] != want_cuda:
        return Decision(False, f"torch is built for CUDA {env['torch_cuda']}, library for CUDA {want_cuda}", None)
    if local and local != "cu" + want_cuda.replace(".", ""):
        return Decision(False, f"torch {tv} is a {local} build, library built for cu{want_cuda.replace('.', '')}", None)
    if env["cxx11_abi"] is not None and int(env["cxx11_abi"]) != want_abi:
        return Decision(False, f"torch uses C++11 ABI={env['cxx11_abi']}, library built with ABI={want_abi}", None)
    if env["oeq_version"] is None:
        return Decision(False, "openequivariance is not installed", None)
    if env["oeq_version"] != want_oeq:
        return Decision(False, f"openequivariance {env['oeq_version']} installed, library built for {want_oeq}", None)
    if env["python_tag"] != want_py:
        return Decision(False, f"Python {env['python_tag']} running, library built for {want_py}", None)
    if (env["system"], env["machine"]) != ("Linux", "x86_64"):
        return Decision(False, f"platform {env['system']} {env['machine']}, library built for Linux x86_64", None)
    so = path.parent / lib["file"]
    if not so.is_file():
        return Decision(False, f"library missing: {so}", None)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    if digest != lib["sha256"]:
        return Decision(False, f"library {so.name} sha256 {digest[:12]}... differs from the manifest's "
                               f"{lib['sha256'][:12]}... (damaged or replaced)", None)
    return Decision(True, f"matches torch {tv}, openequivariance {want_oeq}, {want_py}, Linux x86_64", str(so))




def library_path() -> str:
    return str(HERE / load_manifest()["library"]["file"])


# ---------------------------------------------------------------- CUDA wheel flags
# Building against the pip NVIDIA wheels without a toolkit (no CUDA_HOME, no nvcc).
# Each library is linked by soname (-l:libcudart.so.13): a stray libcudart.so of
# another CUDA major on a -L path can never be picked. The release pipeline
# (oeq_wheels.cudaflags) uses this same code.

CU13_LIBS = ("libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13")
CU12_COMPONENTS = (("cuda_runtime", "libcudart.so.12"), ("cuda_nvrtc", "libnvrtc.so.12"),
                   ("cublas", "libcublas.so.12"))
DRIVER_SONAME = "libcuda.so.1"
DRIVER_DIRS = ("/usr/lib/wsl/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib64-nvidia",
               "/usr/local/nvidia/lib64", "/usr/lib")


@dataclass
class CudaWheelFlags:
    include_dirs: list
    library_dirs: list   # one per directory, the driver's last
    sonames: list        # linked as -l:<soname>, the driver's last
    layout: str          # "cu13" or "cu12"
    runtime_dirs: list   # where the CUDA libraries are found at run time (RUNPATH)

    def link_args(self) -> list:
        return [f"-L{d}" for d in self.library_dirs] + [f"-l:{s}" for s in self.sonames]


# What each part of the cu13 layout needs; torch's own requirements install the
# runtime, nvrtc and cublas wheels but not crt (crt/host_defines.h, which
# cuda_runtime_api.h includes) nor cccl (nv/target, which cuda_fp16.h includes),
# so a toolkit-less build may need those two added.
CU13_PARTS = (("include/cuda_runtime_api.h", "nvidia-cuda-runtime"), ("include/crt/host_defines.h", "nvidia-cuda-crt"),
              ("include/nv/target", "nvidia-cuda-cccl"),
              ("lib/libcudart.so.13", "nvidia-cuda-runtime"), ("lib/libnvrtc.so.13", "nvidia-cuda-nvrtc"),
              ("lib/libcublas.so.13", "nvidia-cublas"))


def missing_cu13_parts(site_packages) -> list:
    """(file, wheel) pairs of the cu13 layout that are not installed under site_packages."""
    cu13 = Path(site_packages) / "nvidia" / "cu13"
    return [(f, dist) for f, dist in CU13_PARTS if not (cu13 / f).exists()]


def find_driver_dir(env=None):
    """Directory holding libcuda.so.1: OEQ_CUDA_DRIVER_DIR, else the usual places."""
    env = os.environ if env is None else env
    override = env.get("OEQ_CUDA_DRIVER_DIR")
    if override:
        return override if (Path(override) / DRIVER_SONAME).exists() else None
    for d in DRIVER_DIRS:
        if (Path(d) / DRIVER_SONAME).exists():
            return d
    return None


def wheel_build_flags(site_packages, driver_dir=None, require_driver=True):
    """Include and link flags for the NVIDIA wheels under site_packages; None if something is missing.

    driver_dir: where libcuda.so.1 lies (a stub for link-only builds); searched when None.
    """
    sp = Path(site_packages)
    cu13 = sp / "nvidia" / "cu13"
    if (cu13 / "include" / "cuda_runtime_api.h").is_file():
        lib = cu13 / "lib"
        if missing_cu13_parts(sp):
            return None
        includes = [str(cu13 / "include")]
        if (cu13 / "include" / "cccl").is_dir():
            includes.append(str(cu13 / "include" / "cccl"))
        lib_dirs, sonames, layout = [str(lib)], list(CU13_LIBS), "cu13"
    else:
        includes, lib_dirs, sonames = [], [], []
        for comp, soname in CU12_COMPONENTS:
            base = sp / "nvidia" / comp
            if not (base / "include").is_dir() or not (base / "lib" / soname).exists():
                return None
            includes.append(str(base / "include"))
            lib_dirs.append(str(base / "lib"))
            sonames.append(soname)
        cccl = sp / "nvidia" / "cuda_cccl" / "include"
        if cccl.is_dir():
            includes.append(str(cccl))
        layout = "cu12"
    driver = driver_dir if driver_dir is not None else find_driver_dir()
    if driver is None or not (Path(driver) / DRIVER_SONAME).exists():
        if require_driver:
            return None
        driver = None
    runtime_dirs = list(dict.fromkeys(lib_dirs))
    lib_dirs = list(runtime_dirs)
    if driver is not None:
        lib_dirs = [d for d in lib_dirs if d != driver] + [driver]
        sonames = sonames + [DRIVER_SONAME]
    return CudaWheelFlags(includes, lib_dirs, sonames, layout, runtime_dirs)


# ---------------------------------------------------------------- activation
EXTENSION = "libtorch_tp_jit"
ENV_FROM_WHEELS = "OEQ_CUDA_FROM_WHEELS"
_STATUS = {"state": "inactive", "path": None, "reason": "activate() not called"}
_MODULE = None


class PrebuiltUnavailable(RuntimeError):
    """FASTMACE_OEQ_PREBUILT=1 and the prebuilt library cannot be used."""


def _mode() -> str:
    val = os.environ.get(ENV_PREBUILT, "")
    if val not in ("", "0", "1"):
        raise ValueError(f"{ENV_PREBUILT}={val!r}: use 1 (require the prebuilt), 0 (never use it) or leave it unset")
    return {"": "auto", "0": "never", "1": "require"}[val]


def status() -> dict:
    """What happened in this process: state is prebuilt, built, reused, skipped, oeq-precompiled,
    fallback-armed or inactive; path and reason say more."""
    return dict(_STATUS)


def _set(state, reason, path=None):
    _STATUS.update(state=state, reason=reason, path=path)


def _oeq_dir():
    import importlib.util
    spec = importlib.util.find_spec("openequivariance")
    return Path(spec.origin).parent if spec and spec.origin else None


def _oeq_uses_own_precompiled(torch) -> bool:
    """OEq 0.7.0 loads its stable AOTI extension (no JIT) under exactly these conditions."""
    d = _oeq_dir()
    if d is None or os.environ.get("OEQ_JIT_EXTENSION", "0") == "1" or torch.version.hip:
        return False
    release = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return release >= (2, 10) and (d / "_torch" / "extlib" / "liboeq_stable_cuda_aoti.so").exists()


def _import_prebuilt(path: str):
    global _MODULE
    if _MODULE is None:
        import importlib.util
        spec = importlib.util.spec_from_file_location(EXTENSION, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULE = mod
    return _MODULE


class _Hooks:
    """Wraps torch.utils.cpp_extension so that only OEq's extension name is intercepted."""

    def __init__(self, cpp_extension):
        self.ce = cpp_extension
        self.saved = {}

    def patch(self, name, make):
        if name not in self.saved:
            self.saved[name] = getattr(self.ce, name)
            setattr(self.ce, name, make(self.saved[name]))

    def restore(self):
        for name, fn in self.saved.items():
            setattr(self.ce, name, fn)
        self.saved.clear()


_HOOKS = None


def _install_prebuilt(ce, path):
    def load(orig):
        def wrapped(name, *args, **kwargs):
            if name != EXTENSION:
                return orig(name, *args, **kwargs)
            return _import_prebuilt(path)  # nothing compiled, no build directory, no lock
        return wrapped

    _HOOKS.patch("load", load)
    # load() above never reaches torch, so every build-directory question is OEq's lock check.
    _HOOKS.patch("_get_build_directory", _lock_free_build_dir(threading.local()))


def _lock_free_build_dir(inside_load):
    """Wrap torch's _get_build_directory for OEq's extension name.

    torch serialises builds with an advisory lock on <build dir>/lock and leaves the
    file behind (a killed build does too); OEq 0.7.0 waits while that file merely
    exists (5 minutes, then an error). Outside torch's own load() (inside_load.active
    unset) we answer with a directory that holds no lock file, which also keeps torch
    from creating a build directory that the prebuilt never uses.
    """
    def make(orig):
        def wrapped(name, verbose=False, *args, **kwargs):
            if name == EXTENSION and not getattr(inside_load, "active", False):
                return str(HERE)
            return orig(name, verbose, *args, **kwargs)
        return wrapped
    return make


def _site_packages_of(module) -> str:
    return str(Path(module.__file__).resolve().parent.parent)


def _torch_cuda_home_usable(ce) -> bool:
    home = getattr(ce, "CUDA_HOME", None)
    return bool(home) and (Path(home) / "include" / "cuda_runtime_api.h").is_file()


def _install_wheel_fallback(ce, torch, flags):
    """Make OEq's JIT build use the NVIDIA wheels (include_paths('cpu') plus the wheel's)."""
    cuda_libs = {"-lcuda", "-lcudart", "-lnvrtc", "-lcublas"}

    def include_paths(orig):
        def wrapped(device_type="cpu", *args, **kwargs):
            if device_type == "cuda" and not torch.version.hip:
                return orig("cpu", *args, **kwargs) + list(flags.include_dirs)
            return orig(device_type, *args, **kwargs)
        return wrapped

    def library_paths(orig):
        def wrapped(device_type="cpu", *args, **kwargs):
            if device_type == "cuda" and not torch.version.hip:
                return orig("cpu", *args, **kwargs)[:1] + flags.runtime_dirs[:1]
            return orig(device_type, *args, **kwargs)
        return wrapped

    inside_load = threading.local()

    def load(orig):
        def wrapped(name, *args, **kwargs):
            if name != EXTENSION:
                return orig(name, *args, **kwargs)
            ld = [a for a in kwargs.get("extra_ldflags") or [] if a not in cuda_libs]
            ld += flags.link_args() + [f"-Wl,-rpath,{d}" for d in flags.runtime_dirs]
            kwargs["extra_ldflags"] = ld
            before = _built_mtime(orig_build_dir, name)
            inside_load.active = True
            try:
                mod = orig(name, *args, **kwargs)
            finally:
                inside_load.active = False
            after = _built_mtime(orig_build_dir, name)
            _set("reused" if before is not None and before == after else "built", _STATUS["reason"], mod.__file__)
            return mod
        return wrapped

    orig_build_dir = ce._get_build_directory
    _HOOKS.patch("include_paths", include_paths)
    _HOOKS.patch("library_paths", library_paths)
    _HOOKS.patch("load", load)
    _HOOKS.patch("_get_build_directory", _lock_free_build_dir(inside_load))


def _missing_message(site) -> str:
    """Why the NVIDIA-wheel build cannot run, naming the wheels (pinned versions) to install."""
    missing = missing_cu13_parts(site)
    if not missing:
        return "libcuda.so.1 (the NVIDIA driver) was not found; set OEQ_CUDA_DRIVER_DIR"
    try:
        pins = {w["name"]: w["version"] for w in load_manifest()["cuda_wheels"]}
    except (OSError, ValueError, KeyError):
        pins = {}
    dists = sorted({d for _, d in missing})
    reqs = " ".join(f"{d}=={pins[d]}" if d in pins else d for d in dists)
    return (f"the NVIDIA CUDA wheels lack {', '.join(f for f, _ in missing)}; "
            f"install them with: pip install {reqs}")


def _built_mtime(build_dir, name):
    try:
        return os.stat(os.path.join(build_dir(name, False), f"{name}.so")).st_mtime_ns
    except OSError:
        return None


def activate():
    """Hand the prebuilt library to OpenEquivariance's JIT path; call before importing it.

    Returns status(). FASTMACE_OEQ_PREBUILT=1 raises PrebuiltUnavailable when the
    prebuilt cannot be used (and nothing is compiled); =0 never uses it. When the
    prebuilt is not used, OEQ_CUDA_FROM_WHEELS (auto: only when torch has no usable
    CUDA_HOME; 1: always; 0: never) lets OEq's own build use the NVIDIA wheels.
    """
    global _HOOKS
    mode = _mode()
    if "openequivariance._torch.extlib" in sys.modules:
        reason = "openequivariance was imported before activate(); call activate() first"
        if mode == "require":
            raise PrebuiltUnavailable(reason)
        _set("skipped", reason)
        return status()
    import torch
    import torch.utils.cpp_extension as ce
    if _HOOKS is None:
        _HOOKS = _Hooks(ce)
    if _oeq_uses_own_precompiled(torch):
        _set("oeq-precompiled", "OpenEquivariance loads its own precompiled stable extension; nothing to do")
        return status()
    decision = check() if mode != "never" else Decision(False, f"{ENV_PREBUILT}=0", None)
    if decision.usable:
        _install_prebuilt(ce, decision.library)
        _set("prebuilt", decision.reason, decision.library)
        return status()
    if mode == "require":
        raise PrebuiltUnavailable(f"{ENV_PREBUILT}=1 but the prebuilt library cannot be used: {decision.reason}")
    wheels = os.environ.get(ENV_FROM_WHEELS, "auto")
    if wheels not in ("auto", "0", "1"):
        raise ValueError(f"{ENV_FROM_WHEELS}={wheels!r}: use auto, 1 or 0")
    if wheels == "0" or (wheels == "auto" and _torch_cuda_home_usable(ce)):
        _set("skipped", f"prebuilt not used: {decision.reason}; OEq builds with torch's CUDA_HOME")
        return status()
    site = _site_packages_of(torch)
    flags = wheel_build_flags(site)
    if flags is None:
        msg = _missing_message(site)
        if wheels == "1":
            raise RuntimeError(f"{ENV_FROM_WHEELS}=1 but {msg}")
        _set("skipped", f"prebuilt not used: {decision.reason}; {msg}")
        return status()
    _install_wheel_fallback(ce, torch, flags)
    _set("fallback-armed", f"prebuilt not used: {decision.reason}; building from the NVIDIA wheels ({flags.layout})")
    return status()


def deactivate():
    """Undo activate()'s wrapping of torch.utils.cpp_extension."""
    if _HOOKS is not None:
        _HOOKS.restore()


class activated:
    """Context-manager form: `with fastmace_oeq_ext.activated(): import openequivariance`."""

    def __enter__(self):
        return activate()

    def __exit__(self, *exc):
        deactivate()
        return False


# ---------------------------------------------------------------- doctor
def doctor(out=None) -> int:
    """Print how OEq's host extension will be provided here; 0 when it is usable."""
    import shutil
    out = out or sys.stdout
    try:
        mode = _mode()
    except ValueError as exc:
        print(f"host extension: unusable; {exc}", file=out)
        return 1
    m = None
    try:
        m = load_manifest()
    except (OSError, ValueError):
        pass
    name = f"{m['package']['name']} {m['package']['version']}" if m else "fastmace-oeq-ext"
    decision = check() if mode != "never" else Decision(False, f"{ENV_PREBUILT}=0", None)
    if decision.usable:
        print(f"host extension: prebuilt ({name}, {decision.library}); no compiler needed", file=out)
        return 0
    if mode == "require":
        print(f"host extension: unusable; {ENV_PREBUILT}=1 but prebuilt not used: {decision.reason}", file=out)
        return 1
    tools = {t: shutil.which(t) for t in ("g++", "ninja")}
    found = ", ".join(f"{t} {p}" for t, p in tools.items() if p)
    print(f"host extension: built with the host toolchain ({found or 'no g++/ninja found'}); "
          f"prebuilt not used: {decision.reason}", file=out)
    missing = [t for t, p in tools.items() if not p]
    if missing:
        print(f"missing: {', '.join(missing)} (install them, or install the fastmace-oeq-ext wheel "
              "that matches this environment)", file=out)
        return 1
    return 0
