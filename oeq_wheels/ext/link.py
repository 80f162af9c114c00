"""Link the objects into libtorch_tp_jit.so and strip it.

NEEDED: torch's libraries (the ones torch.utils.cpp_extension links), the CUDA
runtime, NVRTC and cuBLAS by soname, and libcuda.so.1 (satisfied here by the
stub, at run time by the driver). No libpython: Python extension modules get
Python's symbols from the interpreter (OEq's JIT build links libpython only for
its AOTI path). RUNPATH points from site-packages/fastmace_oeq_ext to the torch
and nvidia wheels that torch already installed beside it.
"""
from __future__ import annotations

from pathlib import Path

from fastmace_oeq_ext.cudaflags import CudaWheelFlags

from ..toolchain import Toolchain, link_stripped


def link(objects: list[Path], out: Path, torch_lib: Path, cuda: CudaWheelFlags, toolchain: Toolchain,
         torch_libs: tuple[str, ...], runpath: str) -> Path:
    return link_stripped(toolchain, ["-shared", *map(str, objects), "-Wl,--no-as-needed", f"-L{torch_lib}",
                                     *[f"-l{lib}" for lib in torch_libs], *cuda.link_args(), "-Wl,--enable-new-dtags",
                                     f"-Wl,-rpath,{runpath}"], out, "linking")
