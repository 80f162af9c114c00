"""Compiler and linker flags for building against the pip NVIDIA CUDA wheels.

Written from the behaviour described for OEq's proposed `wheel_build_flags()`:
no CUDA toolkit and no CUDA_HOME, only the wheels torch itself installs. Each
library is linked by its soname (-l:libcudart.so.13), so a stray libcudart.so
of another CUDA major version on a -L path can never be picked. Stdlib only:
fastmace_oeq_ext carries a copy of this logic for its toolkit-less fallback.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# CUDA 13 wheels share one prefix; CUDA 12 wheels have one directory per component.
CU13_LIBS = ("libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13")
CU12_COMPONENTS = (("cuda_runtime", "libcudart.so.12"), ("cuda_nvrtc", "libnvrtc.so.12"),
                   ("cublas", "libcublas.so.12"))
DRIVER_SONAME = "libcuda.so.1"
DRIVER_DIRS = ("/usr/lib/wsl/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib64-nvidia",
               "/usr/local/nvidia/lib64", "/usr/lib")


class CudaWheelError(RuntimeError):
    pass


@dataclass
class CudaWheelFlags:
    include_dirs: list[str]
    library_dirs: list[str]          # one per directory, the driver's last
    sonames: list[str]               # linked as -l:<soname>, the driver's last
    layout: str                      # "cu13" or "cu12"
    lib_dirs_for_runpath: list[str] = field(default_factory=list)

    def link_args(self) -> list[str]:
        args = [f"-L{d}" for d in self.library_dirs]
        return args + [f"-l:{s}" for s in self.sonames]


def find_driver_dir(env: dict | None = None) -> str | None:
    """Directory holding libcuda.so.1: OEQ_CUDA_DRIVER_DIR, else the usual places."""
    env = os.environ if env is None else env
    override = env.get("OEQ_CUDA_DRIVER_DIR")
    if override:
        return override if (Path(override) / DRIVER_SONAME).exists() else None
    for d in DRIVER_DIRS:
        if (Path(d) / DRIVER_SONAME).exists():
            return d
    return None


def wheel_build_flags(site_packages: str | os.PathLike, driver_dir: str | None = None,
                      require_driver: bool = True) -> CudaWheelFlags | None:
    """Flags for the NVIDIA wheels under site_packages, or None if a wheel or library is missing.

    driver_dir: where libcuda.so.1 lies (a stub for a link-only build); when None
    it is searched (find_driver_dir). The driver is always linked last.
    """
    sp = Path(site_packages)
    cu13 = sp / "nvidia" / "cu13"
    if (cu13 / "include" / "cuda_runtime_api.h").is_file():
        lib = cu13 / "lib"
        if not all((lib / s).exists() for s in CU13_LIBS):
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
    runpath = list(dict.fromkeys(lib_dirs))
    lib_dirs = list(dict.fromkeys(lib_dirs))
    if driver is not None:
        lib_dirs = [d for d in lib_dirs if d != driver] + [driver]
        sonames = sonames + [DRIVER_SONAME]
    return CudaWheelFlags(includes, lib_dirs, sonames, layout, runpath)
