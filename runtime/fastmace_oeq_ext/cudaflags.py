"""Include and link flags for building against the pip NVIDIA CUDA wheels (no toolkit, no nvcc).

Each library is linked by soname (-l:libcudart.so.13), so a stray libcudart.so of
another CUDA major on a -L path can never be picked. The release pipeline uses this
same module for its own builds; the wheel ships it for the toolkit-less fallback.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CU13_LIBS = ("libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13")
CU12_COMPONENTS = (("cuda_runtime", "libcudart.so.12"), ("cuda_nvrtc", "libnvrtc.so.12"),
                   ("cublas", "libcublas.so.12"))
# CUDA 12 header-only wheels, added when present: cccl (nv/target, which cuda_fp16.h includes) and
# nvcc, whose include/crt/host_defines.h cuda_runtime_api.h includes (its headers only; nvcc never runs).
CU12_HEADER_COMPONENTS = ("cuda_cccl", "cuda_nvcc")
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


def layout_lib_dirs(cuda_major) -> list:
    """Where a CUDA major's NVIDIA wheels put their libraries, relative to site-packages (for RUNPATHs)."""
    if str(cuda_major) == "13":
        return ["nvidia/cu13/lib"]
    if str(cuda_major) == "12":
        return [f"nvidia/{comp}/lib" for comp, _ in CU12_COMPONENTS]
    raise ValueError(f"no NVIDIA wheel layout known for CUDA {cuda_major}")


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
        includes += [str(sp / "nvidia" / c / "include") for c in CU12_HEADER_COMPONENTS
                     if (sp / "nvidia" / c / "include").is_dir()]
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
