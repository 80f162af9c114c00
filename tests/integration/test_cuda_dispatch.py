"""The CUDA dispatch library (oeq_wheels/oeq/dispatch/): the one build (cuda_binding = "dispatch") gives wheels whose
modules need no versioned CUDA library and pass the gate; the shipped liboeq_cuda_dispatch.so binds CUDA 12's or
CUDA 13's runtime, NVRTC and cuBLAS, whichever libcudart the process has loaded, from beside it in either NVIDIA wheel
layout; it adapts cudaDeviceProp across the majors; and where nothing can be bound it says so in one line.

No GPU here: the CUDA libraries are stand-ins compiled by the test (each function NVIDIA's name under NVIDIA's
version node, returning 0), loaded as torch loads its libcudart. The GPU run of such wheels is
records/runs/2026-12-08-gpu-upstream-one-build.json (docs/validation.md)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from oeq_wheels.elf import dynamic_symbols, elf_facts
from oeq_wheels.oeq import stable
from oeq_wheels.oeq.gate import CUDA_FUNCTION, OTHER_NAME, dispatch_exports

GPU_RECORD = Path(__file__).parents[2] / "records" / "runs" / "2026-12-08-gpu-upstream-one-build.json"


@pytest.fixture(scope="module")
def dispatch_wheels(cp311_oeq_wheel, abi3_oeq_wheel) -> dict[str, Path]:
    """The one build's x86_64 cp311 and cp312-abi3 wheels, built and gated as `make wheels` builds them; by tag."""
    return {"cp311": cp311_oeq_wheel, "cp312-abi3": abi3_oeq_wheel}


def _extlib(whl: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(whl) as z:
        return {n.rsplit("/", 1)[1]: z.read(n) for n in z.namelist() if n.startswith("openequivariance/_torch/extlib/")
                and n.endswith(".so")}


def test_a_dispatch_line_needs_no_versioned_cuda_library_and_binds_every_cuda_call(dispatch_wheels):
    for line, whl in dispatch_wheels.items():
        libs = _extlib(whl)
        dispatch = libs.pop("liboeq_cuda_dispatch.so")
        assert sorted(elf_facts(dispatch)["needed"]) == ["libc.so.6", "libdl.so.2"], line
        bound = dispatch_exports(dispatch)
        assert {"cudaMalloc", "nvrtcCompileProgram", "cublasSgemmStridedBatched"} <= bound
        for name, data in libs.items():  # the module and the AOTI library
            needed = elf_facts(data)["needed"]
            assert "liboeq_cuda_dispatch.so" in needed and not [n for n in needed if n.startswith(
                ("libcudart", "libnvrtc", "libcublas"))], (line, name, needed)
            calls = {(n, v) for n, v in dynamic_symbols(data, defined=False) if CUDA_FUNCTION.match(n)}
            assert calls and all(v == stable.DISPATCH_VERSION and n in bound for n, v in calls), (line, name)
            assert elf_facts(data)["runpath"] == "$ORIGIN:$ORIGIN/../../../torch/lib"


def test_the_gpu_run_is_of_the_bytes_these_pins_build(dispatch_wheels):
    """records/runs' GPU run of OEq's upstream suite names the cp312-abi3 wheel a build of these pins gives."""
    ran = json.loads(GPU_RECORD.read_text())["wheels"]
    whl = dispatch_wheels["cp312-abi3"]
    assert ran.get(whl.name) == hashlib.sha256(whl.read_bytes()).hexdigest(), whl.name


# ---------------------------------------------------------------- binding, with stand-in CUDA libraries

def _stand_in(path: Path, soname: str, functions: list[str], extra: str = "") -> None:
    """A library of that soname defining each function under the version node NVIDIA's gives it (the soname)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(".c")
    src.write_text("".join(f"int {f}(void) {{ return 0; }}\n" for f in functions) + extra)
    vmap = path.with_suffix(".map")
    vmap.write_text(f"{soname} {{ global: *; }};\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(src), f"-Wl,-soname,{soname}",
                    f"-Wl,--version-script={vmap}"], check=True)


# What cudaGetDeviceProperties of a stand-in CUDA 13 runtime writes: a name at the struct's start (as both majors
# lay it out), the rest of its buffer 0x5a, which the adaptation must not pass on.
PROPS13 = r"""
#include <string.h>
int cudaGetDeviceProperties(char *prop, int device) { memset(prop, 0x5a, 900); strcpy(prop, "Stand-in GPU"); return 0; }
int cudaDeviceGetAttribute(int *value, int attr, int device) { *value = 7; return 0; }
"""
# CUDA 12's own call, for a caller of CUDA 12's headers: passed through whole.
PROPS12 = r"""
#include <string.h>
int cudaGetDeviceProperties_v2(char *prop, int device) { strcpy(prop, "Stand-in GPU"); return 0; }
int cudaDeviceGetAttribute(int *value, int attr, int device) { *value = 7; return 0; }
"""


def _cuda(root: Path, major: int, layout: str, dispatch: Path, skip: str = "") -> Path:
    """Stand-ins of one major's three libraries in a wheel layout (cu13: one folder; cu12: one per wheel); the
    libcudart's path."""
    def folder(lib: str) -> Path:
        return root / "nvidia" / ("cu13" if layout == "cu13" else {"cudart": "cuda_runtime", "nvrtc": "cuda_nvrtc",
                                                                     "cublas": "cublas"}[lib]) / "lib"
    funcs = {"cudart": [], "nvrtc": [], "cublas": []}
    for name in dispatch_exports(dispatch.read_bytes()):
        kind = CUDA_FUNCTION.match(name).group(1)
        funcs["cudart" if kind == "cuda" else kind].append(name)
    funcs["cudart"] = [f for f in funcs["cudart"] if not f.startswith(("cudaGetDeviceProperties", "cudaDeviceGetAttribute"))]
    for lib, fs in funcs.items():
        if lib == skip:
            continue
        extra = {12: PROPS12, 13: PROPS13}[major] if lib == "cudart" else ""
        _stand_in(folder(lib) / f"lib{lib}.so.{major}", f"lib{lib}.so.{major}", fs, extra)
    return folder("cudart") / f"libcudart.so.{major}"


@pytest.fixture(scope="module")
def dispatch_lib(dispatch_wheels, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dispatch-lib") / "liboeq_cuda_dispatch.so"
    out.write_bytes(_extlib(dispatch_wheels["cp312-abi3"])["liboeq_cuda_dispatch.so"])  # CUDA 12.8's headers
    return out


PROBE = r"""
import ctypes, json, sys, threading
cudart, dispatch = sys.argv[1], sys.argv[2]
if cudart:
    ctypes.CDLL(cudart)  # as torch's libtorch_cuda.so loads it
d = ctypes.CDLL(dispatch)
d.oeq_cuda_dispatch_bind.restype = ctypes.c_char_p
d.oeq_cuda_dispatch_path.restype = ctypes.c_char_p
said = []
threads = [threading.Thread(target=lambda: said.append(d.oeq_cuda_dispatch_bind())) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
out = {"said": sorted({(s or b"").decode() for s in said}), "major": d.oeq_cuda_dispatch_major(),
       "paths": [(d.oeq_cuda_dispatch_path(i) or b"").decode() for i in range(3)],
       "mapped": sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l and "/nvidia/" in l})}
if out["major"]:
    prop = ctypes.create_string_buffer(b"\xff" * 1008)   # CUDA 12.8's cudaDeviceProp: the caller's headers
    out["props"] = d.cudaGetDeviceProperties_v2(prop, 0)
    out["name"] = prop.raw[:256].split(b"\0")[0].decode()
    out["uuid"] = prop.raw[256:272].hex()  # at the same place in both majors' structs: passed on
    out["rest_clean"] = b"\x5a" not in prop.raw[272:]
print(json.dumps(out))
"""


def _probe(cudart: Path | None, dispatch: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE, str(cudart or ""), str(dispatch)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("major,layout", [(13, "cu13"), (12, "cu12")])
def test_the_dispatch_library_binds_the_loaded_majors_libraries_from_its_wheels(dispatch_lib, tmp_path, major, layout):
    cudart = _cuda(tmp_path, major, layout, dispatch_lib)
    got = _probe(cudart, dispatch_lib)
    assert got["said"] == [""] and got["major"] == major, got  # every thread: bound
    real = {Path(p).resolve() for p in got["paths"]}
    assert real == {p.resolve() for p in (tmp_path / "nvidia").rglob(f"*.so.{major}")}, got
    assert {Path(m) for m in got["mapped"]} == real, got  # nothing of another major, no other copy
    assert got["props"] == 0 and got["name"] == "Stand-in GPU", got
    if major == 13:  # adapted: CUDA 13's struct never reaches a caller compiled with CUDA 12.8's headers
        assert got["uuid"] == "5a" * 16 and got["rest_clean"], got


def test_with_no_cuda_runtime_loaded_binding_fails_in_one_line(dispatch_lib):
    got = _probe(None, dispatch_lib)
    (said,) = got["said"]
    assert "\n" not in said and "neither libcudart.so.12 nor libcudart.so.13 is loaded" in said, said
    assert got["major"] == 0


def test_a_missing_library_of_the_major_is_named_with_where_it_was_looked_for(dispatch_lib, tmp_path):
    cudart = _cuda(tmp_path, 13, "cu13", dispatch_lib, skip="cublas")
    (said,) = _probe(cudart, dispatch_lib)["said"]
    assert "\n" not in said and "libcublas.so.13 not found" in said and str(cudart.parent) in said, said


def test_the_dispatch_library_cross_builds_for_aarch64_and_needs_only_glibcs_first_version(cache, dispatch_wheels,
                                                                                         tmp_path):
    """The aarch64 build of the dispatch library (the line's aarch64 inputs, the pinned root's cross compiler):
    an aarch64 library needing libc and libdl alone, no symbol newer than aarch64 glibc's first version (2.17), the same
    functions as x86_64's (under CUDA 13's names: its headers are 13.0's), each present in the oldest pinned CUDA 12
    and 13 libraries (the gate's own checks)."""
    from oeq_wheels import build, pins as P
    from oeq_wheels.elf import glibc_max_symbol
    from oeq_wheels.gate_common import check_elf
    from oeq_wheels.inputs import fetch
    from oeq_wheels.oeq import product as oeq_product
    from oeq_wheels.oeq.gate import DISPATCH_NEEDED, dispatch_problems, oldest_cuda_libraries
    pins = P.load()
    line = pins.oeq_line(pins.oeq_binary.name, "aarch64")
    make, _ = build.toolchain_maker(pins, "pinned", cache)
    trees = oeq_product.stable_trees(pins, line, fetch.ensure(line.inputs(pins.oeq), cache), cache)
    lib = stable.build_dispatch(line, stable.Recipe(trees, True), make(line.arch), tmp_path / "liboeq_cuda_dispatch.so")
    data = lib.read_bytes()
    _, problems = check_elf(data, required=DISPATCH_NEEDED, allowed=DISPATCH_NEEDED, runpath=None, arch=line.arch,
                            forbidden_paths=[str(cache)])
    assert problems == [] and glibc_max_symbol(data) == "GLIBC_2.17", problems
    x86 = dispatch_exports(_extlib(dispatch_wheels["cp312-abi3"])["liboeq_cuda_dispatch.so"])
    # the same functions; x86_64's headers are CUDA 12.8's (cudaGetDeviceProperties_v2), aarch64's CUDA 13.0's
    assert dispatch_exports(data) == {OTHER_NAME.get(n, n) for n in x86}
    assert dispatch_problems(x86, oldest_cuda_libraries(pins, line, cache)) == []
