"""Link the objects into libtorch_tp_jit.so and strip it.

NEEDED: torch's libraries (the ones torch.utils.cpp_extension links), the CUDA
runtime, NVRTC and cuBLAS by soname, and libcuda.so.1 (satisfied here by the
stub, at run time by the driver). No libpython: Python extension modules get
Python's symbols from the interpreter (OEq's JIT build links libpython only for
its AOTI path). RUNPATH points from site-packages/fastmace_oeq_ext to the torch
and nvidia wheels that torch already installed beside it.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from fastmace_oeq_ext.cudaflags import CudaWheelFlags

from .. import proc
from ..errors import OeqWheelsError


class LinkError(OeqWheelsError):
    pass


def link(objects: list[Path], out: Path, torch_lib: Path, cuda: CudaWheelFlags,
         cxx: str, strip: str, torch_libs: tuple[str, ...], runpath: str) -> Path:
    linked = out.with_name(out.name + ".unstripped")
    cmd = [*shlex.split(cxx), "-shared", *map(str, objects), "-o", str(linked),
           "-Wl,--no-as-needed", f"-L{torch_lib}", *[f"-l{l}" for l in torch_libs],
           *cuda.link_args(), "-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    res = proc.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise LinkError(f"linking failed (exit {res.returncode}):\n{res.stderr.strip()[-3000:]}")
    res = proc.run([*shlex.split(strip), "--strip-unneeded", "-o", str(out), str(linked)],
                          capture_output=True, text=True)
    linked.unlink(missing_ok=True)
    if res.returncode != 0:
        raise LinkError(f"strip failed: {res.stderr.strip()}")
    return out
