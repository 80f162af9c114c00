"""Compile OEq's host sources with the flags of OEq's own JIT build, without importing torch.

OEq calls torch.utils.cpp_extension.load("libtorch_tp_jit", [libtorch_tp_jit.cpp,
json11/json11.cpp], extra_cflags=["-O3", "-DCUDA_BACKEND"], extra_include_paths=
[extension/backend, pybind11, torch and CUDA includes]). torch turns that into
-DTORCH_EXTENSION_NAME=..., -DTORCH_API_INCLUDE_EXTENSION_H, -isystem for torch,
CUDA and Python headers, -fPIC and its C++ standard. We read that standard from
the wheel's own cpp_extension.py and the C++ ABI from libc10.so, so a torch
release that changes them changes our flags too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

from ..toolchain import SHIM_DIR, CompileError, longest_first, prefix_map_flags


def torch_cxx_std(torch_root: Path) -> str:
    """The -std= value torch's JIT builder passes to the host compiler (e.g. 'c++20')."""
    src = (torch_root / "torch" / "utils" / "cpp_extension.py").read_text()
    found = re.findall(r"\['-fPIC', '-std=(c\+\+\d+)'\]", src)
    if len(set(found)) != 1:
        raise CompileError(
            "cannot read the C++ standard from torch/utils/cpp_extension.py "
            f"(found {found or 'nothing'}); this torch release changed its JIT recipe, "
            "update oeq_wheels/ext/compile.py"
        )
    return found[0]


def torch_cxx11_abi(torch_root: Path) -> int:
    """1 if libc10.so was built with the C++11 std::string ABI (its symbols name __cxx11)."""
    with open(torch_root / "torch" / "lib" / "libc10.so", "rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        for sym in dynsym.iter_symbols():
            if "__cxx11" in sym.name:
                return 1
    return 0


@dataclass
class CompileContext:
    """Everything that decides the compiler command for one Python."""

    oeq_ext: Path               # openequivariance/extension in the unpacked sdist
    torch_root: Path | None     # contains torch/include; None for sources that include no torch header
    cuda_includes: list[str]
    pybind11_include: Path
    python_include: str | None  # None for sources that do not include Python.h
    extension_name: str
    cxx_std: str
    cxx11_abi: int
    glibc_shim: bool
    prefix_map: dict[str, str] = field(default_factory=dict)

    def flags(self) -> list[str]:
        system = list(self.cuda_includes)
        if self.torch_root is not None:
            torch_inc = self.torch_root / "torch" / "include"
            system = [str(torch_inc), str(torch_inc / "torch" / "csrc" / "api" / "include"), *system]
        if self.python_include:
            system.append(self.python_include)
        flags = [f"-DTORCH_EXTENSION_NAME={self.extension_name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
        flags += ["-I" + str(self.oeq_ext / "backend"), "-I" + str(self.pybind11_include)]
        if self.glibc_shim:  # must come before every other system directory
            flags += ["-isystem", str(SHIM_DIR)]
        for d in system:
            flags += ["-isystem", d]
        flags += ["-fPIC", f"-std={self.cxx_std}", "-O3", "-DCUDA_BACKEND",
                  f"-D_GLIBCXX_USE_CXX11_ABI={self.cxx11_abi}"]
        # Keep build-host paths out of the binary (__FILE__ in torch's checks) and make it reproducible.
        return flags + prefix_map_flags(self.prefix_map)

    def normalized(self, args: list[str]) -> list[str]:
        """Arguments with build-host paths replaced by their neutral names (for the manifest)."""
        out, mapping = [], longest_first(self.prefix_map)
        for a in args:
            if a.startswith("-ffile-prefix-map="):
                continue
            for src, dst in mapping:
                a = a.replace(src, dst)
            out.append(a)
        return out
