"""Load stubs (oeq_wheels/checks/loader_stubs.py): for the libraries an install NEEDS and lacks, stubs defining exactly
what its files take from them, versioned where they ask for a version, so that the install loads with none of
NVIDIA's wheels; an install that has them gets none; NVIDIA's plugins that nothing NEEDS are not followed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oeq_wheels.checks import loader_stubs


def gcc(*args):
    subprocess.run(["gcc", "-shared", "-fPIC", "-w", *map(str, args)], check=True, capture_output=True, text=True)


@pytest.fixture
def install(tmp_path):
    """root/pkg/libimp.so NEEDS libcublasX.so.9 (a versioned function and object) and libncclX.so.1 (an unversioned
    function); neither is in root. root/nvidia/x/libplugin.so NEEDS libnvmpiX.so.1, which nobody has either."""
    libs = tmp_path / "real"
    libs.mkdir()
    (libs / "v.map").write_text("libcublasX.so.9 { global: cublasXCreate; cublasXTable; local: *; };\n")
    (libs / "need.c").write_text("int cublasXCreate(void) { return 0; }\nint cublasXTable[4];\n")
    gcc("-Wl,-soname,libcublasX.so.9", f"-Wl,--version-script={libs / 'v.map'}", "-o", libs / "libcublasX.so.9",
        libs / "need.c")
    (libs / "loose.c").write_text("int ncclXInit(void) { return 0; }\n")
    gcc("-Wl,-soname,libncclX.so.1", "-o", libs / "libncclX.so.1", libs / "loose.c")
    (libs / "libnvmpiX.so.1").write_bytes((libs / "libncclX.so.1").read_bytes())
    root = tmp_path / "site"
    (root / "pkg").mkdir(parents=True)
    (libs / "imp.c").write_text("extern int cublasXCreate(void); extern int cublasXTable[4]; extern int ncclXInit(void);\n"
                                "int imp(void) { return cublasXCreate() + cublasXTable[0] + ncclXInit(); }\n")
    gcc("-o", root / "pkg" / "libimp.so", libs / "imp.c", f"-L{libs}", "-l:libcublasX.so.9", "-l:libncclX.so.1",
        "-Wl,-rpath,$ORIGIN/../lib")  # RUNPATH: where the install's own libraries would be
    (root / "nvidia" / "x").mkdir(parents=True)
    gcc("-o", root / "nvidia" / "x" / "libplugin.so", libs / "imp.c", f"-L{libs}", "-l:libnvmpiX.so.1",
        "-Wl,--unresolved-symbols=ignore-all")
    return root, libs


def load(root: Path, lib_path: str) -> subprocess.CompletedProcess:
    code = f"import ctypes; print(ctypes.CDLL({str(root / 'pkg' / 'libimp.so')!r}).imp())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, LD_LIBRARY_PATH=lib_path))


def test_stubs_define_what_the_install_takes_and_it_loads(install, tmp_path):
    root, real = install
    assert loader_stubs.plan(root, Path(sys.executable), system={}) == {
        "libcublasX.so.9": {"cublasXCreate": ("STT_FUNC", "libcublasX.so.9"),
                            "cublasXTable": ("STT_OBJECT", "libcublasX.so.9")},
        "libncclX.so.1": {"ncclXInit": ("STT_FUNC", None)}}  # not libnvmpiX.so.1: only the plugin needs it
    assert load(root, "").returncode != 0  # without them, the install does not load
    made = loader_stubs.make(root, Path(sys.executable), tmp_path / "stubs")
    assert sorted(p.name for p in made) == ["libcublasX.so.9", "libncclX.so.1"]
    r = load(root, str(tmp_path / "stubs"))
    assert r.returncode == 0 and r.stdout.strip() == "200", r.stderr  # two stubbed calls answer 100, the object 0
    assert load(root, str(real)).stdout.strip() == "0"  # the real ones, for contrast


def test_only_nvidias_libraries_are_stubbed(install, tmp_path):
    """Another library the install NEEDS and the loader finds elsewhere (Triton's libtriton.so, loaded by path
    first) must never be shadowed by a stub first on LD_LIBRARY_PATH."""
    root, real = install
    (real / "other.c").write_text("int other(void) { return 0; }\n")
    gcc("-Wl,-soname,libtritonX.so", "-o", real / "libtritonX.so", real / "other.c")
    (real / "imp2.c").write_text("extern int other(void); int imp2(void) { return other(); }\n")
    gcc("-o", root / "pkg" / "libimp2.so", real / "imp2.c", f"-L{real}", "-l:libtritonX.so")
    assert "libtritonX.so" not in loader_stubs.plan(root, Path(sys.executable), system={})


def test_an_install_with_its_libraries_gets_no_stub(install):
    root, real = install
    system = {p.name: p for p in real.glob("lib*.so*")}
    # NVIDIA's are stubbed even where the system has them (a CUDA toolkit in the loader's cache): every machine the same
    assert set(loader_stubs.plan(root, Path(sys.executable), system=system)) == {"libcublasX.so.9", "libncclX.so.1"}
    (root / "elsewhere").mkdir()  # the same names where the loader does not look (Triton's own CUPTI): not found
    for lib in ("libcublasX.so.9", "libncclX.so.1"):
        (root / "elsewhere" / lib).write_bytes((real / lib).read_bytes())
    assert set(loader_stubs.plan(root, Path(sys.executable), system={})) == {"libcublasX.so.9", "libncclX.so.1"}
    (root / "lib").mkdir()  # the install's own, on the importer's RUNPATH, as NVIDIA's wheels bring them
    for lib in ("libcublasX.so.9", "libncclX.so.1"):
        (root / "lib" / lib).write_bytes((real / lib).read_bytes())
    assert loader_stubs.plan(root, Path(sys.executable), system={}) == {}


def test_load_only_requirements_keep_the_rest_and_what_oeqs_extension_needs():
    """OEq's extension NEEDS its line's cudart, NVRTC and cuBLAS (FastMACE's runtime looks for CUDA 13's too): those
    wheels stay, a CUDA 12 torch's as well; NCCL, cuDNN and Triton (which compiles) are left out."""
    from support.venvs import load_only_requirements
    meta = ("Name: torch\nRequires-Dist: filelock\nRequires-Dist: cuda-toolkit[cublas,cudart,cufft,nvrtc]==77.0.1; "
            "platform_system == \"Linux\"\nRequires-Dist: nvidia-cudnn-cu13==77.1.2.3; platform_system == \"Linux\"\n"
            "Requires-Dist: nvidia-cuda-runtime-cu12==77.8.90; platform_system == \"Linux\"\n"
            "Requires-Dist: nvidia-cublas==77.1; platform_system == \"Linux\"\n"
            "Requires-Dist: nvidia-nccl-cu12==77.3; platform_system == \"Linux\"\n"
            "Requires-Dist: cuda-bindings<78,>=77.0.1; platform_system == \"Linux\"\nRequires-Dist: triton~=77.2.0; "
            "platform_system == \"Linux\"\nRequires-Dist: pyyaml; extra == \"pyyaml\"\n")
    assert load_only_requirements(meta) == [
        "filelock", 'cuda-toolkit[cublas,cudart,nvrtc]==77.0.1; platform_system == "Linux"',
        'nvidia-cuda-runtime-cu12==77.8.90; platform_system == "Linux"',
        'nvidia-cublas==77.1; platform_system == "Linux"',
        'cuda-bindings<78,>=77.0.1; platform_system == "Linux"',
        'pyyaml; extra == "pyyaml"']


def test_in_another_root_its_libraries_and_its_interpreter_define_what_is_not_stubbed(install, tmp_path):
    """A Debian root of another CPython or architecture: what its libraries (found through its own links, absolute
    ones too) and its interpreter (read, not run) define is not put in a stub; what nothing defines is."""
    root, real = install
    sysroot = tmp_path / "sysroot"
    multiarch = sysroot / "usr" / "lib" / "x86_64-linux-gnu"
    multiarch.mkdir(parents=True)
    (sysroot / "lib").symlink_to("usr/lib")  # merged /usr, as Debian's
    (real / "sys.c").write_text("int sysfn(void) { return 0; }\n")
    gcc("-Wl,-soname,libsysX.so.1", "-o", multiarch / "libsysX.so.1.2", real / "sys.c")
    (multiarch / "libsysX.so.1").symlink_to("/usr/lib/x86_64-linux-gnu/libsysX.so.1.2")  # absolute: inside the root
    (sysroot / "usr" / "bin").mkdir()
    (real / "py.c").write_text("int PyFakeAPI(void) { return 0; }\n")
    gcc("-o", sysroot / "usr" / "bin" / "python3.99", real / "py.c")
    (real / "imp3.c").write_text("extern int sysfn(void); extern int PyFakeAPI(void); extern int ncclXInit(void);\n"
                                 "int imp3(void) { return sysfn() + PyFakeAPI() + ncclXInit(); }\n")
    site = tmp_path / "site3"
    (site / "pkg").mkdir(parents=True)
    gcc("-o", site / "pkg" / "libimp3.so", real / "imp3.c", f"-L{real}", f"-L{multiarch}", "-l:libsysX.so.1.2",
        "-l:libncclX.so.1", "-Wl,--unresolved-symbols=ignore-all")
    python = Path("/usr/bin/python3.99")
    assert loader_stubs.system_libraries(sysroot)["libsysX.so.1"] == multiarch / "libsysX.so.1.2"
    assert loader_stubs.plan(site, sysroot / python.relative_to("/"), sysroot=sysroot) == {
        "libncclX.so.1": {"ncclXInit": ("STT_FUNC", None)}}
    assert set(loader_stubs.plan(site, Path(sys.executable), system={})["libncclX.so.1"]) == {
        "ncclXInit", "sysfn", "PyFakeAPI"}  # without the root, nothing defines them


def test_make_holds_the_loaders_walk_to_the_files_own_needs(install, tmp_path, monkeypatch):
    """make writes exactly lacking(root), the NVIDIA sonames the files NEED and nobody has, counted without the
    loader; a walk that finds another set writes nothing and says both."""
    root, _ = install
    assert loader_stubs.lacking(root) == {"libcublasX.so.9", "libncclX.so.1"}
    real_plan = loader_stubs.plan
    monkeypatch.setattr(loader_stubs, "plan", lambda *a, **k: {**real_plan(*a, **k), "libcufftX.so.1": {}})
    with pytest.raises(loader_stubs.LoaderStubError, match=r"lacks \['libcublasX.so.9', 'libcufftX.so.1'"):
        loader_stubs.make(root, Path(sys.executable), tmp_path / "stubs")
    assert not (tmp_path / "stubs").exists()
