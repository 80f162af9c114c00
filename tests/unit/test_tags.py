"""The platform tag's pure parts (oeq_wheels/tags.py): manylinux tags read as glibc versions and architectures,
variant wheel names split, auditwheel's report judged, and the tag a build takes. The audit itself runs in the
integration tier (tests/integration/test_build.py)."""
import pytest

from oeq_wheels import pins, tags
from oeq_wheels.errors import OeqWheelsError


def test_a_manylinux_tag_is_read_as_its_glibc_legacy_names_included():
    assert tags.manylinux_version("manylinux_2_28_x86_64") == (2, 28)
    assert tags.manylinux_version("manylinux_2_34_aarch64") == (2, 34)
    assert tags.manylinux_version("manylinux2014_x86_64") == (2, 17)
    assert tags.manylinux_version("manylinux2014_aarch64") == (2, 17)
    assert tags.manylinux_version("manylinux1_x86_64") == (2, 5)
    for other in ("linux_x86_64", "manylinux_2_28_ppc64le", "musllinux_1_2_x86_64", "any", "manylinux_2_28_x86_64x"):
        assert tags.manylinux_version(other) is None, other


def test_a_tags_architecture_is_its_suffix_and_only_ours():
    assert tags.tag_arch("manylinux_2_28_x86_64") == "x86_64"
    assert tags.tag_arch("linux_aarch64") == "aarch64"
    assert tags.tag_arch("manylinux2014_aarch64") == "aarch64"
    assert tags.tag_arch("manylinux_2_28_ppc64le") is None
    assert tags.tag_arch("any") is None


def test_a_variant_wheels_label_is_split_off_and_a_plain_name_is_left_alone():
    plain = "openequivariance-9.1.0+oeqwheels.cu13.2-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert tags.split_variant(plain.removesuffix(".whl") + "-cu13.whl") == (plain, "cu13")
    assert tags.split_variant(plain) == (plain, None)
    built = "demo-1.0-1-cp311-cp311-linux_x86_64.whl"  # a build tag (starts with a digit): seven parts with a label
    assert tags.split_variant(built.removesuffix(".whl") + "-cu12.whl") == (built, "cu12")
    assert tags.split_variant(built) == (built, None)  # six parts, the third a build tag: no label
    assert tags.split_variant("demo-1.0-cp311-cp311-linux_x86_64-CU13.whl")[1] is None  # labels are lower case
    assert tags.split_variant("demo-1.0.tar.gz") == ("demo-1.0.tar.gz", None)


def test_a_wheels_architecture_is_read_from_its_name_variant_or_not():
    assert tags.wheel_arch("openequivariance-9.1.0-cp311-cp311-manylinux_2_28_aarch64.whl") == "aarch64"
    assert tags.wheel_arch("openequivariance-9.1.0-cp311-cp311-manylinux_2_28_x86_64-cu13.whl") == "x86_64"
    assert tags.wheel_arch("demo-1.0-py3-none-any.whl") is None


def test_the_proven_tag_is_the_symbol_policys_and_anything_else_external_is_named():
    allowed = frozenset({"libtorch.so", "libc10.so"})
    report = {"sym_tag": "manylinux_2_28_x86_64", "external_libs": {"libtorch.so": None}}
    assert tags.proven_tag(report, allowed) == ("manylinux_2_28_x86_64", [])
    tag, problems = tags.proven_tag({**report, "external_libs": {"libtorch.so": None, "libfoo.so.1": None},
                                     "unsupported_isa": ["AVX512F"]}, allowed)
    assert tag == "manylinux_2_28_x86_64" and problems == [
        "auditwheel: unexpected external libraries ['libfoo.so.1']",
        "auditwheel: unsupported ISA extensions ['AVX512F']"]
    assert tags.proven_tag({"sym_tag": "linux_x86_64"}, allowed) == (
        None, ["auditwheel proves no manylinux tag (symbol policy: linux_x86_64)"])
    assert tags.proven_tag({}, allowed) == (None, ["auditwheel proves no manylinux tag (symbol policy: None)"])


def test_the_build_keeps_its_target_unless_only_a_newer_tag_is_proven():
    assert tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_17_x86_64") == "manylinux_2_28_x86_64"
    assert tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_28_x86_64") == "manylinux_2_28_x86_64"
    assert tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_34_x86_64") == "manylinux_2_34_x86_64"
    with pytest.raises(OeqWheelsError, match="proves manylinux_2_28_aarch64 for a build that targets "
                                             "manylinux_2_28_x86_64: the binary is of another architecture"):
        tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")


def test_what_a_wheel_may_leave_outside_is_torchs_nvidias_and_the_drivers():
    p = pins.load()
    ok = tags.external_ok(p)
    assert p.torch_needed | p.cuda_needed <= ok
    assert {f"lib{line.stub_library}.so" for line in p.oeq_lines} <= ok
    assert all(s in ok for line in p.oeq_lines for s in line.cuda_sonames())
    assert "libstdc++.so.6" not in ok and "libpython3.11.so.1.0" not in ok


def test_tag_choice():
    assert tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_27_x86_64") == "manylinux_2_28_x86_64"
    assert tags.choose_tag("manylinux_2_28_x86_64", "manylinux_2_34_x86_64") == "manylinux_2_34_x86_64"
