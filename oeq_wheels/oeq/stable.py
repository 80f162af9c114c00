"""OpenEquivariance's stable-ABI extension, built as its CMakeLists.txt defines it, without CMake.

OEq 0.7.0's sdist builds (scikit-build-core, CMAKE_BUILD_TYPE=Release, GCC):
  - oeq_stable_cuda: nanobind_add_module(NB_STATIC) of libtorch_tp_jit_stable.cpp and
    json11.cpp, CXX_STANDARD 17, defines CUDA_BACKEND=1, _GLIBCXX_USE_CXX11_ABI=1,
    INCLUDE_NB_EXTENSION; linked with libtorch_cpu, libc10, cudart, the driver, nvrtc,
    cublas and cuda_stub_lib (stubs/stream.cpp, OUTPUT_NAME torch_cuda);
  - liboeq_stable_cuda_aoti.so: the same sources and libraries without nanobind.
Here LibTorch is the oldest supported torch wheel's own headers and libraries (no
download), CUDA is the pinned NVIDIA wheels' headers (no toolkit), and nanobind is the pinned
wheel's sources. Each flag below names the CMake rule it comes from. The stream stub
and a libcuda stub exist for the link only and are never shipped: at run time torch's
own libtorch_cuda.so and the driver provide those symbols.

One departure from the CMakeLists, the reason these wheels serve every CUDA torch: instead of cudart, nvrtc and
cublas, both libraries link our dispatch library (dispatch/cuda_dispatch.c, shipped beside them), which binds those
functions at import to the CUDA libraries of the major the process's torch loaded; the module's init runs
dispatch/import_guard.cpp first, so that an import with no such CUDA fails in one line.
"""
from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path

from fastmace_oeq_ext import cudaflags as wheel_cuda

from .. import proc, driver_stub
from ..errors import StableBuildError
from ..toolchain import SHIM_DIR, Toolchain, link_stripped, prefix_map_flags
from ..pins import OeqLine

RELEASE = ["-O3", "-DNDEBUG"]        # CMAKE_CXX_FLAGS_RELEASE
CXX17 = "-std=gnu++17"               # CXX_STANDARD 17 (CMake's CXX_EXTENSIONS defaults to ON)
SOURCES = ("libtorch_tp_jit_stable.cpp", "json11/json11.cpp")
DISPATCH_DIR = Path(__file__).parent / "dispatch"
DISPATCH_SOURCE = DISPATCH_DIR / "cuda_dispatch.c"
DISPATCH_MAP = DISPATCH_DIR / "cuda_dispatch.map"
IMPORT_GUARD = DISPATCH_DIR / "import_guard.cpp"
DISPATCH_VERSION = "OEQ_CUDA_DISPATCH_1"   # the version node of every function it exports (cuda_dispatch.map)
# nanobind_build_library's sources (nb_ft.cpp only for free-threaded Pythons).
NANOBIND_SOURCES = ("nb_internals.cpp", "nb_func.cpp", "nb_type.cpp", "nb_enum.cpp", "nb_ndarray.cpp",
                    "nb_static_property.cpp", "nb_datetime.cpp", "common.cpp", "error.cpp", "trampoline.cpp",
                    "implicit.cpp")


def nanobind_sources(free_threaded: bool) -> tuple[str, ...]:
    return (*NANOBIND_SOURCES, *(("nb_ft.cpp",) if free_threaded else ()))


# nanobind-static's PUBLIC options (NB_OPT_SIZE configurations, Release included).
NB_SECTIONS = ["-ffunction-sections", "-fdata-sections"]
# STABLE_ABI: the library becomes nanobind-static-abi3 (the same sources and flags) with this PUBLIC definition, so
# the module's own sources see it too (nanobind-config.cmake; linked builds always target 3.12, nb_internals.h).
LIMITED_API = "-DPy_LIMITED_API=0x030C0000"
INNER_INIT = "oeq_wheels_inner_PyInit_"   # OEq's own init function is compiled under this prefix


@dataclass(frozen=True)
class StableTrees:
    """Resolved roots of the unpacked inputs (the compiler records real paths)."""

    oeq_root: Path        # openequivariance-<version>/ of the sdist
    torch_root: Path      # holds torch/include and torch/lib/{libtorch_cpu,libc10}.so
    cuda_root: Path       # a site-packages-like tree of the line's NVIDIA wheels (nvidia/cu13/..., nvidia/cuda_runtime/...)
    nanobind: Path        # nanobind/{include,src,ext}

    @property
    def ext(self) -> Path:
        return self.oeq_root / "openequivariance" / "extension"

    @functools.cached_property
    def cuda(self) -> wheel_cuda.CudaWheelFlags:
        """The wheels' include and library directories, as the one CUDA-wheel flag code finds them (found once)."""
        flags = wheel_cuda.wheel_build_flags(self.cuda_root, require_driver=False)
        if flags is None:
            raise StableBuildError(f"the NVIDIA wheels in {self.cuda_root} lack a header or library")
        return flags


@dataclass(frozen=True)
class Recipe:
    """The flags of one CMake target, for one Python (python_include None: no Python headers)."""

    trees: StableTrees
    glibc_shim: bool
    python_include: str | None = None
    torch_label: str = "torch"
    tls_gnu2: bool = True   # nanobind passes -mtls-dialect=gnu2 where the compiler takes it (x86 GCC, not aarch64)
    limited_api: bool = False  # nanobind_add_module(... STABLE_ABI): Python's limited API, the module named .abi3.so
    # nanobind_add_module(... FREE_THREADED) on a free-threaded CPython: NB_FREE_THREADED (PUBLIC, so the module's
    # sources see it too), nb_ft.cpp, and the module declares Py_MOD_GIL_NOT_USED. OEq's CMakeLists does not pass
    # it; without it the import turns the GIL back on. The two classes OEq binds call only the CUDA runtime, which
    # is thread-safe, and nanobind guards its own state in this mode.
    free_threaded: bool = False
    module_name: str = OeqLine.module_name
    dispatch: bool = False   # the line's cuda_binding is "dispatch": the module's init is import_guard.cpp's

    def prefix_map(self, nanobind_only: bool = False) -> list[str]:
        m = {str(self.trees.nanobind): "nanobind", str(SHIM_DIR): "oeq-wheels-shim"}
        if not nanobind_only:  # nanobind's sources see no OEq, torch or CUDA header: its objects serve every line
            m.update({str(self.trees.ext): "openequivariance/extension", str(self.trees.torch_root): self.torch_label,
                      str(self.trees.cuda_root): "nvidia"})
        if self.python_include:
            m[self.python_include] = "python/include"
        return prefix_map_flags(m)

    def _common(self) -> list[str]:
        shim = ["-isystem", str(SHIM_DIR)] if self.glibc_shim else []
        return [*RELEASE, "-fPIC", CXX17, *shim]

    def _extension_includes(self) -> list[str]:
        ext, t = self.trees.ext, self.trees
        # target_include_directories(EXT_DIR, backend, json11, LIBTORCH_INCLUDE_DIR); CUDA::* imported
        # targets add the toolkit's include directories as system directories.
        return [f"-I{ext}", f"-I{ext / 'backend'}", f"-I{ext / 'json11'}", f"-I{t.torch_root / 'torch' / 'include'}",
                *(a for d in t.cuda.include_dirs for a in ("-isystem", d))]

    def _abi(self) -> list[str]:
        return [LIMITED_API] if self.limited_api else ["-DNB_FREE_THREADED"] if self.free_threaded else []

    def aoti(self) -> list[str]:
        """oeq_stable_cuda_aoti: add_library(SHARED), no nanobind."""
        return [*self._common(), "-DCUDA_BACKEND=1", "-D_GLIBCXX_USE_CXX11_ABI=1", *self._extension_includes(),
                *self.prefix_map()]

    def module(self) -> list[str]:
        """oeq_stable_cuda: nanobind_add_module(... NB_STATIC ...) adds hidden visibility, -Os
        (nanobind_opt_size), no stack protector and nanobind-static's PUBLIC includes and sections."""
        return [*self._common(), "-DCUDA_BACKEND=1", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DINCLUDE_NB_EXTENSION",
                *self._abi(), *(self.renamed_init() if self.dispatch else []), *self._extension_includes(), f"-I{self.python_include}", f"-I{self.trees.nanobind / 'include'}",
                "-fvisibility=hidden", "-fno-stack-protector", "-Os", *NB_SECTIONS, *self.prefix_map()]

    def renamed_init(self) -> list[str]:
        """OEq's init function under another name, which import_guard.cpp's init (under the real one) calls."""
        return [f"-DPyInit_{self.module_name}={INNER_INIT}{self.module_name}"]

    def import_guard(self) -> list[str]:
        """dispatch/import_guard.cpp: the module's init, with this Python's headers and ABI (limited API too)."""
        return [*self._common(), *self._abi(), f"-I{self.python_include}", "-fvisibility=hidden",
                f"-DOEQ_GUARD_MODULE_INIT=PyInit_{self.module_name}",
                f"-DOEQ_GUARD_INNER_INIT={INNER_INIT}{self.module_name}", *self.prefix_map()]

    def dispatch_flags(self) -> list[str]:
        """dispatch/cuda_dispatch.c, C, against the pinned CUDA headers: only the map's functions exported."""
        return ["-std=gnu11", "-O2", "-fPIC", "-fvisibility=hidden",
                *(a for d in self.trees.cuda.include_dirs for a in ("-isystem", d)), *self.prefix_map()]

    def nanobind(self) -> list[str]:
        """nanobind-static (nanobind_build_library): NB_BUILD, compact assertions in Release,
        no strict aliasing, the TLS descriptor model, hidden visibility, no stack protector."""
        nb = self.trees.nanobind
        # free-threaded: its pthread keys bound to glibc's first version of them (shim/pthread_keys.h)
        keys = ["-include", str(SHIM_DIR / "pthread_keys.h")] if self.free_threaded and self.glibc_shim else []
        return [*self._common(), *keys, "-DNB_BUILD", "-DNB_COMPACT_ASSERTIONS", *self._abi(),
                f"-I{nb / 'ext' / 'robin_map' / 'include'}",
                f"-I{self.python_include}", f"-I{nb / 'include'}", "-fvisibility=hidden", "-fno-strict-aliasing",
                *(["-mtls-dialect=gnu2"] if self.tls_gnu2 else []), *NB_SECTIONS, "-fno-stack-protector", *self.prefix_map(nanobind_only=True)]

    def stream_stub(self) -> list[str]:
        """cuda_stub_lib: stubs/stream.cpp against LibTorch's include directory."""
        return [*self._common(), f"-I{self.trees.torch_root / 'torch' / 'include'}", *self.prefix_map()]


@dataclass(frozen=True)
class StableLibraries:
    module: Path      # oeq_stable_cuda<EXT_SUFFIX>
    aoti: Path        # liboeq_stable_cuda_aoti.so


def _run(cmd: list[str], what: str) -> None:
    res = proc.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise StableBuildError(f"{what} failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-2000:]}")


def link_libraries(ob: OeqLine, trees: StableTrees, stub_dir: Path, dispatch_dir: Path | None) -> list[str]:
    """target_link_libraries(torch_cpu, c10, CUDA::cudart, CUDA::cuda_driver, CUDA::nvrtc, CUDA::cublas,
    cuda_stub_lib): by soname, NEEDED kept for each (as GCC links without --as-needed); with the dispatch library
    (dispatch_dir) in place of CUDA::cudart, CUDA::nvrtc and CUDA::cublas."""
    torch_lib = trees.torch_root / "torch" / "lib"
    cuda = ([f"-L{dispatch_dir}", f"-l:{ob.dispatch_library}"] if ob.dispatch else
            [*(f"-L{d}" for d in trees.cuda.library_dirs), *[f"-l:{s}" for s in ob.cuda_sonames()]])
    return ["-Wl,--no-as-needed", f"-L{torch_lib}", *[f"-l{l}" for l in ob.torch_libs], *cuda,
            f"-L{stub_dir}", f"-l:{wheel_cuda.DRIVER_SONAME}", f"-l{ob.stub_library}",
            "-Wl,--enable-new-dtags", f"-Wl,-rpath,{ob.runpath()}"]


def build_dispatch(ob: OeqLine, recipe: Recipe, toolchain: Toolchain, out: Path) -> Path:
    """liboeq_cuda_dispatch.so (dispatch/cuda_dispatch.c): compiled with the C compiler against the line's CUDA
    headers, linked with only the map's version node exported, needing libc and libdl alone; stripped."""
    out.parent.mkdir(parents=True, exist_ok=True)
    obj = out.with_name(out.name + ".o")
    _run([*shlex.split(toolchain.cc), "-c", str(DISPATCH_SOURCE), "-o", str(obj), *recipe.dispatch_flags()],
         "compiling the CUDA dispatch library")
    # libdl by its soname: glibc before 2.34 defines dlopen there (cuda_dispatch.c binds it to the base version)
    return link_stripped(toolchain, ["-shared", "-O2", str(obj), f"-Wl,--version-script={DISPATCH_MAP}",
                                     f"-Wl,-soname,{out.name}", "-Wl,--no-as-needed", "-l:libdl.so.2",
                                     "-nodefaultlibs", "-lc", "-lgcc"], out, f"linking {out.name}")


def build_support(ob: OeqLine, stream, toolchain: Toolchain, driver_objects: list[Path], out: Path) -> Path:
    """The link-only stand-ins in out/: libtorch_cuda.so (OEq's stream stub, compiled as `stream`, a
    product.Compile of Recipe.stream_stub) and libcuda.so.1."""
    stream_obj, _ = stream.objects.compile(stream.source, stream.flags)
    out.mkdir(parents=True, exist_ok=True)
    stub_so = out / f"lib{ob.stub_library}.so"
    _run([*shlex.split(toolchain.cxx), "-shared", str(stream_obj), f"-Wl,-soname,{stub_so.name}", "-o", str(stub_so)],
         "linking OEq's stream stub")
    driver_stub.make_stub(driver_stub.undefined_driver_symbols(driver_objects), out, toolchain.cc)
    return out


def link_module(ob: OeqLine, trees: StableTrees, objs: list[Path], nanobind_objs: list[Path], stub_dir: Path,
                dispatch_dir: Path | None, out: Path, toolchain: Toolchain) -> Path:
    """MODULE library: -shared, nanobind_strip (-Wl,-s), nanobind-static's --gc-sections."""
    archive = out.with_name("libnanobind-static.a")
    archive.unlink(missing_ok=True)
    _run([*shlex.split(toolchain.ar), "rcsD", str(archive), *map(str, nanobind_objs)], "archiving nanobind-static")
    _run([*shlex.split(toolchain.cxx), *RELEASE, "-shared", "-Wl,-s", "-Wl,--gc-sections", *map(str, objs),
          str(archive), "-o", str(out), *link_libraries(ob, trees, stub_dir, dispatch_dir)], "linking oeq_stable_cuda")
    archive.unlink()
    return out


def link_aoti(ob: OeqLine, trees: StableTrees, objs: list[Path], stub_dir: Path, dispatch_dir: Path | None, out: Path,
              toolchain: Toolchain) -> Path:
    """SHARED library with its soname; stripped as scikit-build-core's install (strip = true) does."""
    return link_stripped(toolchain, [*RELEASE, "-shared", f"-Wl,-soname,{out.name}", *map(str, objs),
                                     *link_libraries(ob, trees, stub_dir, dispatch_dir)], out, f"linking {out.name}")
