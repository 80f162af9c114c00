"""The PEP 825 variants of the OEq lines (oeq_wheels/oeq/variants.py) and their index on the site, without a build:
what uv's NVIDIA provider is told, how a file name carries its label, and the page that lists them (the wheels
themselves, the gate and uv choosing: tests/integration/test_oeq_binary.py, test_install_matrix.py)."""
import hashlib
import json
import zipfile

from oeq_wheels import pins as P
from oeq_wheels.tags import split_variant
from oeq_wheels.oeq import variants
from oeq_wheels.release import site


def test_a_variant_file_name_ends_in_its_label_and_a_build_tag_is_not_one():
    assert split_variant("x-1.0-cp312-abi3-manylinux_2_28_x86_64-cu13.whl") == \
        ("x-1.0-cp312-abi3-manylinux_2_28_x86_64.whl", "cu13")
    assert split_variant("x-1.0-1-cp312-abi3-manylinux_2_28_x86_64-cu12.whl") == \
        ("x-1.0-1-cp312-abi3-manylinux_2_28_x86_64.whl", "cu12")
    # an ordinary wheel, with and without a build tag (six parts whose third starts with a digit), is no variant
    for name in ("x-1.0-cp312-abi3-manylinux_2_28_x86_64.whl", "x-1.0-3-cp312-cp312-manylinux_2_28_x86_64.whl",
                 "x-1.0-cp312-abi3-manylinux_2_28_x86_64-CU13.whl"):
        assert split_variant(name) == (name, None)


def test_each_line_is_one_label_whose_bounds_give_each_driver_one_line():
    pins = P.load()
    doc = variants.document(pins)
    cu13, cu12 = pins.oeq_line("cu130"), pins.oeq_line("cu128")
    # uv 0.13 uses its built-in port of the NVIDIA provider only where the declaration names it exactly
    assert doc["providers"] == {"nvidia": {"requires": list(pins.variants.provider_requires),
                                           "plugin-api": pins.variants.provider_plugin_api}}
    assert doc["default-priorities"] == {"namespace": ["nvidia"]} and doc["$schema"] == pins.variants.schema
    # from the line's CUDA (inclusive) up to the next newer line's major (exclusive); the newest line has no ceiling
    assert doc["variants"] == {
        "cu13": {"nvidia": {"cuda_version_lower_bound": [cu13.cuda]}},
        "cu12": {"nvidia": {"cuda_version_lower_bound": [cu12.cuda], "cuda_version_upper_bound": [cu13.cuda_major]}}}
    # the values uv's provider can match are "X" or "X.Y"
    assert all(len(v.split(".")) <= 2 for lab in doc["variants"].values() for vs in lab["nvidia"].values() for v in vs)
    # a wheel's own variant.json: the same document, its one variant
    assert list(json.loads(variants.wheel_json(pins, cu12))["variants"]) == ["cu12"]
    name, data = variants.index_file(pins)
    assert name == f"openequivariance-{variants.release_version(pins)}-variants.json" and json.loads(data) == doc


def test_a_line_wheel_and_its_variant_name_each_other():
    pins = P.load()
    for line in pins.oeq_lines:
        wheel = f"openequivariance-{line.version(pins.oeq.version)}-cp311-cp311-{line.arch.platform_tag}.whl"
        name = variants.variant_name(pins, wheel)
        assert name == f"openequivariance-{variants.release_version(pins)}-cp311-cp311-{line.arch.platform_tag}-" \
                       f"{variants.label(line)}.whl"
        assert variants.line_of(pins, name).key == line.key
    assert variants.variant_name(pins, f"openequivariance-{pins.oeq.version}-cp311-cp311-manylinux_2_28_x86_64.whl") is None
    # a label no line has, or a platform the line is not built for
    assert variants.line_of(pins, f"openequivariance-{variants.release_version(pins)}-cp311-cp311-"
                                  "manylinux_2_28_x86_64-cu11.whl") is None
    assert variants.line_of(pins, f"openequivariance-{variants.release_version(pins)}-cp311-cp311-"
                                  "manylinux_2_28_aarch64-cu12.whl") is None


def test_the_site_serves_the_variants_on_their_own_index_with_the_variants_json(tmp_path):
    pins = P.load()
    line = pins.oeq_line("cu130")
    info = f"openequivariance-{line.version(pins.oeq.version)}.dist-info"
    ordinary = tmp_path / f"openequivariance-{line.version(pins.oeq.version)}-cp311-cp311-{line.arch.platform_tag}.whl"
    with zipfile.ZipFile(ordinary, "w") as zf:
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: openequivariance\n")
    wheels = [site.Wheel(ordinary, ordinary.name, hashlib.sha256(ordinary.read_bytes()).hexdigest())]
    for l in (line, pins.oeq_line("cu128")):
        v = tmp_path / variants.variant_name(pins, ordinary.name.replace(line.version(pins.oeq.version),
                                                                         l.version(pins.oeq.version)))
        v.write_bytes(l.name.encode())
        wheels.append(site.Wheel(v, v.name, hashlib.sha256(v.read_bytes()).hexdigest()))
    root = site.write_site(tmp_path / "site", wheels, pins)
    page = (root / "variants" / "simple" / "openequivariance" / "index.html").read_text()
    name, doc = variants.index_file(pins)
    assert (root / "files" / name).read_bytes() == doc
    for w in wheels[1:]:
        assert f"#sha256={w.sha256}" in page and (root / "files" / w.name).is_file()
        assert not (root / "files" / f"{w.name}.metadata").exists()  # uv reads variant.json from the wheel
        assert w.name not in (root / line.name / "simple" / "openequivariance" / "index.html").read_text()
    assert f"#sha256={hashlib.sha256(doc).hexdigest()}" in page
    sums = (root / "SHA256SUMS").read_text()
    assert all(w.name in sums for w in wheels) and name in sums
    assert "--preview-features wheel-variants" in (root / "index.html").read_text()
