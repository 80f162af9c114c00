"""tests/support/oeq_operators.py reads the operators OEq's sources register in libtorch_tp_jit, as the load checks count them."""
from support import oeq_operators

CORE = """
REGISTER_LIBRARY_IMPL(libtorch_tp_jit, CUDA, m) {
    m.impl("op_a", BOX(&op_a));
    m.impl("impl_only", BOX(&impl_only));
};

REGISTER_LIBRARY(libtorch_tp_jit, m) {
    m.def("op_a(Tensor x, int n) -> Tensor");
    if (true) { m.def("op_b(Tensor x) -> (Tensor, Tensor)"); }
    m.def("op_c", &op_c);
};

TORCH_LIBRARY(other_namespace, m) {
    m.def("not_ours(Tensor x) -> Tensor");
};
"""
JIT = "#define REGISTER_LIBRARY_IMPL TORCH_LIBRARY_IMPL\n#define REGISTER_LIBRARY TORCH_LIBRARY\n#include \"core.hpp\"\n"
STABLE = ("#define REGISTER_LIBRARY_IMPL STABLE_TORCH_LIBRARY_IMPL\n#define REGISTER_LIBRARY STABLE_TORCH_LIBRARY\n"
          "STABLE_TORCH_LIBRARY_FRAGMENT(libtorch_tp_jit, lib) {\n    lib.def(\"op_d(Tensor x) -> Tensor\");\n}\n")


def test_every_def_of_the_namespace_through_the_macro_that_names_its_registrar():
    assert oeq_operators.registered({"core.hpp": CORE, "jit.cpp": JIT, "stable.cpp": STABLE}) == \
        ["op_a", "op_b", "op_c", "op_d"]
    # Without a define that makes REGISTER_LIBRARY a registrar, its block registers nothing: only the fragment.
    assert oeq_operators.registered({"core.hpp": CORE, "stable.cpp": STABLE.split("\n", 2)[2]}) == ["op_d"]
    assert oeq_operators.registered({"core.hpp": CORE}, "other_namespace") == ["not_ours"]
    assert oeq_operators.registered({"core.hpp": CORE}) == []


def test_the_probe_reads_the_dispatchers_names_of_the_namespace_once_each():
    class C:
        @staticmethod
        def _dispatch_get_all_op_names():
            return ["aten::add.Tensor", "libtorch_tp_jit::op_b", "libtorch_tp_jit::op_a.out", "libtorch_tp_jit::op_a",
                    "libtorch_tp_jit_x::op_z"]

    class Torch:
        _C = C

    assert eval(oeq_operators.LOADED, {"torch": Torch}) == ["op_a", "op_b"]
