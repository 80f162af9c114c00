from pathlib import Path

from fastmace_oeq_ext.cudaflags import wheel_build_flags


def _touch(p: Path):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"")


def make_cu13(sp: Path, libs=("libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13")):
    _touch(sp / "nvidia/cu13/include/cuda_runtime_api.h")
    _touch(sp / "nvidia/cu13/include/crt/host_defines.h")
    _touch(sp / "nvidia/cu13/include/nv/target")
    (sp / "nvidia/cu13/include/cccl").mkdir(parents=True)
    for lib in libs:
        _touch(sp / "nvidia/cu13/lib" / lib)


def test_cu13_layout_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/nonexistent-toolkit")  # must not matter
    make_cu13(tmp_path)
    drv = tmp_path / "driver"
    _touch(drv / "libcuda.so.1")
    f = wheel_build_flags(tmp_path, driver_dir=str(drv))
    lib = str(tmp_path / "nvidia/cu13/lib")
    assert f.layout == "cu13"
    assert f.include_dirs == [str(tmp_path / "nvidia/cu13/include"), str(tmp_path / "nvidia/cu13/include/cccl")]
    assert f.link_args() == [f"-L{lib}", f"-L{drv}", "-l:libcudart.so.13", "-l:libnvrtc.so.13",
                             "-l:libcublas.so.13", "-l:libcuda.so.1"]


def test_missing_library_or_wheel_gives_none(tmp_path):
    make_cu13(tmp_path, libs=("libcudart.so.13", "libnvrtc.so.13"))
    assert wheel_build_flags(tmp_path, driver_dir=str(tmp_path)) is None
    assert wheel_build_flags(tmp_path / "empty", driver_dir=str(tmp_path)) is None


def test_driver_dir_from_environment(tmp_path, monkeypatch):
    make_cu13(tmp_path)
    drv = tmp_path / "drv"
    _touch(drv / "libcuda.so.1")
    monkeypatch.setenv("OEQ_CUDA_DRIVER_DIR", str(drv))
    f = wheel_build_flags(tmp_path)
    assert f.library_dirs[-1] == str(drv) and f.sonames[-1] == "libcuda.so.1"
    monkeypatch.setenv("OEQ_CUDA_DRIVER_DIR", str(tmp_path / "nowhere"))
    assert wheel_build_flags(tmp_path) is None


def test_cu12_layout(tmp_path):
    for comp, lib in (("cuda_runtime", "libcudart.so.12"), ("cuda_nvrtc", "libnvrtc.so.12"), ("cublas", "libcublas.so.12")):
        (tmp_path / "nvidia" / comp / "include").mkdir(parents=True)
        _touch(tmp_path / "nvidia" / comp / "lib" / lib)
    (tmp_path / "nvidia/cuda_cccl/include").mkdir(parents=True)
    drv = tmp_path / "drv"
    _touch(drv / "libcuda.so.1")
    f = wheel_build_flags(tmp_path, driver_dir=str(drv))
    assert f.layout == "cu12"
    assert f.sonames == ["libcudart.so.12", "libnvrtc.so.12", "libcublas.so.12", "libcuda.so.1"]
    assert len(f.library_dirs) == 4 and f.library_dirs[-1] == str(drv)
    assert f.include_dirs[-1].endswith("cuda_cccl/include")


def test_cu13_without_crt_headers_is_incomplete(tmp_path):
    from fastmace_oeq_ext.cudaflags import missing_cu13_parts
    make_cu13(tmp_path)
    (tmp_path / "nvidia/cu13/include/crt/host_defines.h").unlink()
    assert wheel_build_flags(tmp_path, driver_dir=str(tmp_path)) is None
    assert missing_cu13_parts(tmp_path) == [("include/crt/host_defines.h", "nvidia-cuda-crt")]
