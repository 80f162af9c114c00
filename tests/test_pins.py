import re

import pytest

from oeq_wheels import pins as P


def test_release_matrix_pins_all_pythons_and_hashes():
    pins = P.load()
    assert pins.matrix.name == "torch-2.14.1"
    assert pins.matrix.pythons == ("3.10", "3.11", "3.12", "3.13")
    assert pins.version == "0.7.0.post2"
    items = pins.all_inputs([P.cp_tag(v) for v in pins.matrix.pythons])
    assert len(items) == 2 + len(pins.matrix.nvidia) + 4
    for item in items:
        assert re.fullmatch(r"[0-9a-f]{64}", item.sha256), item
    names = {n.name: n.version for n in pins.matrix.nvidia}
    assert names["nvidia-cuda-runtime"] == "13.0.96" and names["nvidia-cublas"] == "13.1.1.3"
    assert {"nvidia-cusparse", "nvidia-cusolver", "nvidia-cuda-cccl", "nvidia-cuda-crt"} <= set(names)


def test_override_matrix_is_not_a_release_version():
    pins = P.load("torch-2.11.0")
    assert pins.matrix.torch_version == "2.11.0"
    assert pins.version == "0.7.0.post2+torch2.11.0"  # PyPI refuses local versions
    assert {n.name: n.version for n in pins.matrix.nvidia}["nvidia-cublas"] == "13.1.0.3"


def test_unknown_matrix_names_the_known_ones():
    with pytest.raises(P.PinsError, match="torch-2.14.1"):
        P.load("torch-9.9")


def test_unknown_python_is_refused_with_the_pinned_list():
    pins = P.load()
    with pytest.raises(P.PinsError, match=r"Python 3\.9 .*3\.10, 3\.11, 3\.12, 3\.13"):
        P.select_pythons(pins.matrix.pythons, ["3.9"], "the release matrix")
    assert P.select_pythons(pins.matrix.pythons, ["3.12", "3.12"], "m") == ["3.12"]
    with pytest.raises(P.PinsError, match="names no version"):  # --python "" or " " or ","
        P.select_pythons(pins.matrix.pythons, [], "m")


def test_matrices_share_nvidia_entries_and_names_follow_from_the_pins():
    a, b = P.load(), P.load("torch-2.11.0")
    shared = {n.requirement for n in a.matrix.nvidia} & {n.requirement for n in b.matrix.nvidia}
    assert "nvidia-cuda-runtime==13.0.96" in shared and len(shared) == 6  # only cuBLAS differs
    assert a.library_file == "libtorch_tp_jit.so" and a.runpath() == "$ORIGIN/../torch/lib:$ORIGIN/../nvidia/cu13/lib"
    assert a.cuda_needed == {"libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13", "libcuda.so.1"}
    ob = a.oeq_binary
    assert ob.runpath() == "$ORIGIN/../../../torch/lib:$ORIGIN/../../../nvidia/cu13/lib"
    assert ob.version("0.7.0").startswith("0.7.0+") and ob.torch.version == "2.11.0"
    # The oldest NVIDIA wheels any supported torch pins: cuBLAS 13.1.0.3 is torch 2.11.0's.
    assert {n.name: n.version for n in ob.nvidia}["nvidia-cublas"] == "13.1.0.3"


def test_a_dangling_nvidia_reference_is_a_clear_error(tmp_path):
    text = P.PINS_FILE.read_text().replace('"nvidia-cublas==13.1.1.3", "nvidia-cusparse', '"nvidia-cublas==9.9", "nvidia-cusparse')
    (tmp_path / "pins.toml").write_text(text)
    with pytest.raises(P.PinsError, match="nvidia-cublas==9.9"):
        P.load(path=tmp_path / "pins.toml")
