"""A link-time stand-in for the CUDA driver library (libcuda.so.1); never shipped.

The build host has no driver. The extension calls a handful of driver API
functions (cuInit, cuLaunchKernel, ...); the stub defines exactly the cu*
symbols the objects leave undefined, found with nm, so nothing is listed by hand.
Each stub returns CUDA_ERROR_NO_DEVICE (100), which also makes it usable for
import tests on machines without a GPU.
"""
from __future__ import annotations

import os

import re
import shlex
import tempfile
from pathlib import Path

from fastmace_oeq_ext.cudaflags import DRIVER_SONAME

from . import proc
from .errors import DriverStubError

DRIVER_SYMBOL = re.compile(r"^cu[A-Z]\w*$")  # driver API; the runtime's are cuda*, cublas*


def undefined_driver_symbols(paths: list[Path], dynamic: bool = False) -> list[str]:
    """cu* symbols left undefined by these objects (or, dynamic=True, shared libraries)."""
    cmd = ["nm", "--undefined-only", "--format=just-symbols"] + (["-D"] if dynamic else [])
    res = proc.run(cmd + [str(p) for p in paths], capture_output=True, text=True)
    if res.returncode != 0:
        raise DriverStubError(f"nm failed: {res.stderr.strip()}")
    names = {line.strip().split("@")[0] for line in res.stdout.splitlines()}
    return sorted(n for n in names if DRIVER_SYMBOL.match(n))


def stub_for_library(library: Path, out_dir: Path, cc: str = "gcc") -> Path:
    """A stub libcuda.so.1 defining the driver symbols a built library needs (for loading it without a GPU);
    cc: a C compiler for the library's architecture."""
    return make_stub(undefined_driver_symbols([library], dynamic=True), out_dir, cc)


def make_stub(symbols: list[str], out_dir: Path, cc: str = "gcc") -> Path:
    """Write out_dir/libcuda.so.1 defining the given symbols; return its path."""
    if not symbols:
        raise DriverStubError("no cu* driver symbols found; refusing to make an empty libcuda stub")
    out_dir.mkdir(parents=True, exist_ok=True)
    body = "".join(f"int {s}(void) {{ return 100; }}\n" for s in symbols)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "libcuda_stub.c"
        src.write_text("/* generated link stub: CUDA_ERROR_NO_DEVICE from every call */\n" + body)
        out = out_dir / DRIVER_SONAME
        res = proc.run([*shlex.split(cc), "-shared", "-fPIC", f"-Wl,-soname,{DRIVER_SONAME}",
                               "-o", str(out), str(src)], capture_output=True, text=True)
        if res.returncode != 0:
            raise DriverStubError(f"building the libcuda stub failed: {res.stderr.strip()}")
    return out


def loader_path(stub_dir: Path, env: dict) -> str:
    """LD_LIBRARY_PATH with the stub driver's folder first and what was there kept: a shared CPython (setup-python's
    on GitHub's runner) finds its libpython only through it."""
    return os.pathsep.join(filter(None, [str(stub_dir), env.get("LD_LIBRARY_PATH")]))
