"""Build-host paths leave the bytes and the manifest by one rule (oeq_wheels/toolchain.py longest_first), in the
compiler's -ffile-prefix-map flags and in the flags the manifest records (ext/compile.py CompileContext.normalized)
alike; a path that begins with another, which GCC and the manifest would name differently, is refused."""
from pathlib import Path

import pytest

from oeq_wheels.ext.compile import CompileContext
from oeq_wheels.toolchain import prefix_map_flags

MAP = {"/c/pyb": "/oeq-wheels/pyb", "/c/torch-2": "/oeq-wheels/torch", "/c/nvidia-13": "/oeq-wheels/cuda"}


def test_flags_and_the_manifest_use_one_order_and_one_name_per_tree():
    flags = prefix_map_flags(MAP)
    assert flags == ["-ffile-prefix-map=/c/nvidia-13=/oeq-wheels/cuda", "-ffile-prefix-map=/c/torch-2=/oeq-wheels/torch",
                     "-ffile-prefix-map=/c/pyb=/oeq-wheels/pyb"]
    ctx = CompileContext(Path("/c/oeq"), None, [], Path("/c/pyb"), None, "x", "c++17", 1, False, MAP)
    args = ["-isystem", "/c/nvidia-13/include", "-I/c/torch-2/include", "-I/c/pyb", *flags]
    assert ctx.normalized(args) == ["-isystem", "/oeq-wheels/cuda/include", "-I/oeq-wheels/torch/include",
                                    "-I/oeq-wheels/pyb"]


@pytest.mark.parametrize("shorter, longer", [("/c/u", "/c/u/torch"), ("/c/torch-2", "/c/torch-2-nvidia")])
def test_a_path_that_begins_with_another_is_refused(shorter, longer):
    """GCC would name /c/torch-2-nvidia/x by /c/torch-2's flag (a string prefix, the last flag wins); the manifest
    by its own."""
    with pytest.raises(ValueError, match=f"{longer} begins with {shorter}"):
        prefix_map_flags({shorter: "a", longer: "b"})
