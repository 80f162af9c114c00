import re
import tomllib

import pytest

from oeq_wheels import pins as P


def test_release_matrix_pins_all_pythons_and_hashes():
    pins = P.load()
    assert pins.matrix.name == f"torch-{pins.matrix.torch_version}"
    # every CPython fastmace-oeq-ext is built for has an OEq wheel of each line (its own, or the stable-ABI one)
    assert pins.matrix.pythons and all(l.serves(v) for l in pins.oeq_lines for v in pins.matrix.pythons)
    assert re.fullmatch(rf"{re.escape(pins.oeq.version)}\.post\d+", pins.version)  # a release: no local label
    items = pins.all_inputs([P.cp_tag(v) for v in pins.matrix.pythons])
    assert len(items) == 2 + len(pins.matrix.nvidia) + len(pins.consumer.wheels) + len(pins.matrix.pythons)
    for item in items:
        assert re.fullmatch(r"[0-9a-f]{64}", item.sha256), item
    names = {n.name: n.version for n in pins.matrix.nvidia}
    assert {"nvidia-cuda-runtime", "nvidia-cublas", "nvidia-cusparse", "nvidia-cusolver", "nvidia-cuda-cccl",
            "nvidia-cuda-crt"} <= set(names)
    assert all(v.split(".")[0] in (pins.matrix.cuda_major, "12") for v in names.values())  # cuSPARSE/cuSOLVER: 12.x


def override_matrix() -> str:
    """A matrix beside the release's that builds fastmace-oeq-ext: the aarch64 build's torch (the GPU proof's)."""
    name = P.load().oeq_line(P.load().oeq_binary.name, "aarch64").torch_matrix
    assert name != P.load().matrix.name
    return name


def test_override_matrix_is_not_a_release_version():
    name = override_matrix()
    pins = P.load(name)
    tv = pins.matrix.torch_version
    assert pins.matrix.name == name == f"torch-{tv}"
    assert pins.version == P.load().base_version + f"+torch{tv}"  # PyPI refuses local versions
    # its own NVIDIA wheels, as its table names them (not the release matrix's)
    table = tomllib.loads(P.PINS_FILE.read_text())["matrix"][name]
    assert [n.requirement for n in pins.matrix.nvidia] == table["nvidia"]


def test_unknown_matrix_names_the_known_ones():
    with pytest.raises(P.PinsError, match=P.load().matrix.name):
        P.load("torch-9.9")


def test_unknown_python_is_refused_with_the_pinned_list():
    pins = P.load()
    with pytest.raises(P.PinsError, match=r"Python 3\.9 .*" + re.escape(", ".join(pins.matrix.pythons))):
        P.select_pythons(pins.matrix.pythons, ["3.9"], "the release matrix")
    assert P.select_pythons(pins.matrix.pythons, ["3.12", "3.12"], "m") == ["3.12"]
    with pytest.raises(P.PinsError, match="names no version"):  # --python "" or " " or ","
        P.select_pythons(pins.matrix.pythons, [], "m")


def test_matrices_share_nvidia_entries_and_names_follow_from_the_pins():
    a, b = P.load(), P.load(override_matrix())
    shared = {n.requirement for n in a.matrix.nvidia} & {n.requirement for n in b.matrix.nvidia}
    # A requirement both name is one [nvidia] entry: the same file and sha256 for both (today all but cuBLAS).
    assert all({n.requirement: n for n in a.matrix.nvidia}[r] == {n.requirement: n for n in b.matrix.nvidia}[r]
               for r in shared)
    assert a.library_file == "libtorch_tp_jit.so" and a.runpath() == "$ORIGIN/../torch/lib:$ORIGIN/../nvidia/cu13/lib"
    assert a.cuda_needed == {"libcudart.so.13", "libnvrtc.so.13", "libcublas.so.13", "libcuda.so.1"}
    ob = a.oeq_binary
    assert ob is a.oeq_line(ob.name) and ob.arch.name == "x86_64" and ob.cuda_majors == ("12", "13")
    assert ob.runpath() == "$ORIGIN:$ORIGIN/../../../torch/lib"  # the dispatch library: no NVIDIA wheel's folder
    assert ob.version(a.oeq.version) == f"{a.oeq.version}+{ob.local_version}"
    # Built against the oldest supported torch (its floor's release, the first the line is tested with) ...
    assert ob.torch.version == ob.tested_torch[0] and ob.torch.version.startswith(ob.torch_min + ".")
    # ... and the NVIDIA wheels that torch pins (the headers of the oldest CUDA it serves)
    oldest = tomllib.loads(P.PINS_FILE.read_text())["matrix"][ob.torch_matrix]["nvidia"]
    assert {n.requirement for n in ob.nvidia if n.libs} <= set(oldest)
    # the aarch64 build's: the GPU proof's torch, whose matrix is b
    arm = a.oeq_line(ob.name, "aarch64")
    assert arm.torch.version == b.matrix.torch_version and {n.name: n.version for n in arm.nvidia}["nvidia-cublas"] == \
        {n.name: n.version for n in b.matrix.nvidia}["nvidia-cublas"]


def test_the_one_line_serves_cuda_12_and_13_from_the_oldest_cuda_torchs_headers():
    pins = P.load()
    (name,) = pins.line_names
    assert [l.key for l in pins.oeq_lines] == [f"{name}-x86_64", f"{name}-aarch64"]
    x86, oeq = pins.oeq_line(name), pins.oeq.version
    assert x86.version(oeq) == f"{oeq}+{x86.local_version}" and x86.dispatch and x86.cuda_major == "12"
    assert all(l.cuda_majors == P.DISPATCH_MAJORS == ("12", "13") for l in pins.oeq_lines)
    # its torch: the one it is tested with first, PyPI's only CUDA 12 torch with OEq's stable extension (2.10 on)
    assert x86.torch.version == x86.tested_torch[0] and x86.torch.version.startswith(x86.torch_min + ".")
    assert x86.cuda_sonames() == ("libcudart.so.12", "libnvrtc.so.12", "libcublas.so.12")  # its headers' libraries
    # Exactly its torch's pins for what it compiles against, all of that CUDA 12.8 release.
    linked = {n.name: n.version for n in x86.nvidia if n.libs}
    assert set(linked) == {"nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12", "nvidia-cublas-cu12"}
    assert all(v.startswith(x86.cuda + ".") for v in linked.values()), linked
    # one index for every CUDA torch, and the old lines' URLs serving it
    assert x86.index_paths == ("simple", "cu130/simple", "cu128/simple", "variants/simple")
    assert pins.index_url(name) == f"{pins.site_url}simple/"
    assert pins.oeq_binary_inputs()[0] == pins.oeq and len(set(pins.oeq_binary_inputs())) == len(pins.oeq_binary_inputs())
    with pytest.raises(P.PinsError, match="serves an OEq line only"):
        P.load(x86.torch_matrix)  # no fastmace-oeq-ext build for CUDA 12
    with pytest.raises(P.PinsError, match="no OEq line 'cu999'"):
        pins.oeq_line("cu999")


def test_an_architecture_is_a_pins_table_and_its_files_are_pinned_beside_x86_64s():
    pins = P.load()
    x86, arm = pins.oeq_binary, pins.oeq_line(pins.oeq_binary.name, "aarch64")
    # The same line: one version, one index; its aarch64 build reads PyPI's oldest aarch64 CUDA torch (a CUDA 13
    # one: PyPI's x86_64 floor is a CPU build for aarch64), its [oeq_binary.lines.X.arch.aarch64] table says so.
    assert (arm.version(pins.oeq.version), arm.name, arm.pythons, arm.index_paths) == \
        (x86.version(pins.oeq.version), x86.name, x86.pythons, x86.index_paths)
    assert arm.cuda_major == "13" and arm.torch_min > x86.torch_min and arm.torch.version == arm.tested_torch[0]
    assert arm.arch.platform_tag == "manylinux_2_28_aarch64" and arm.arch.elf_machine == "EM_AARCH64"
    assert arm.ext_suffix("3.11") == ".cpython-311-aarch64-linux-gnu.so"
    assert x86.ext_suffix("3.11") == ".cpython-311-x86_64-linux-gnu.so"
    assert arm.ext_suffix("3.12") == x86.ext_suffix("3.12") == ".abi3.so"  # the stable-ABI build: no triplet
    assert arm.torch.file == f"torch-{arm.torch.version}-cp312-cp312-manylinux_2_28_aarch64.whl"
    assert all("aarch64" in n.file for n in arm.nvidia) and not any("aarch64" in n.file for n in x86.nvidia)
    assert arm.runpath() == x86.runpath()  # the dispatch library and torch's libraries on both
    assert pins.ext_arch.name == "x86_64"  # fastmace-oeq-ext stays x86_64 (FastMACE's marker and platform check)
    assert len({p.sha256 for p in pins.oeq_binary_inputs()}) == len(pins.oeq_binary_inputs())


def test_an_architecture_without_its_files_is_one_clear_line(tmp_path):
    text = P.PINS_FILE.read_text()
    (cublas,) = [n.requirement for n in P.load().oeq_line(P.load().oeq_binary.name, "aarch64").nvidia
                 if n.name == "nvidia-cublas"]
    start = text.index(f'[nvidia."{cublas}".arch.aarch64]')
    end = text.index("\n\n", start)
    bad = tmp_path / "pins.toml"
    bad.write_text(text[:start] + text[end:])
    with pytest.raises(P.PinsError, match=re.escape(f'[nvidia."{cublas}"] pins no aarch64 file')):
        P.load(path=bad)
    bad.write_text(text.replace('arches = ["x86_64", "aarch64"]', 'arches = ["x86_64", "riscv64"]'))
    with pytest.raises(P.PinsError, match="arches names 'riscv64'"):
        P.load(path=bad)


def test_the_public_address_is_one_setting_and_everything_derives_from_it(tmp_path):
    pins = P.load()
    owner, name = pins.repository.split("/")
    assert pins.site_url == f"https://{owner.lower()}.github.io/{name}/"
    assert pins.index_url(pins.oeq_binary.name) == pins.site_url + "simple/"
    assert dict(pins.project_urls)["Source"] == f"https://github.com/{pins.repository}"
    assert dict(pins.project_urls)["Binary index"] == pins.site_url
    text = P.PINS_FILE.read_text().replace(f'repository = "{pins.repository}"', 'repository = "not a repo"')
    (tmp_path / "pins.toml").write_text(text)
    with pytest.raises(P.PinsError, match=r"repository = 'not a repo' .* is not owner/name on GitHub"):
        P.load(path=tmp_path / "pins.toml")


def test_a_dangling_nvidia_reference_is_a_clear_error(tmp_path):
    (cublas,) = [n.requirement for n in P.load().matrix.nvidia if n.name == "nvidia-cublas"]
    text = P.PINS_FILE.read_text().replace(f'"{cublas}",', '"nvidia-cublas==9.9",', 1)  # in the matrix's list
    (tmp_path / "pins.toml").write_text(text)
    with pytest.raises(P.PinsError, match="nvidia-cublas==9.9"):
        P.load(path=tmp_path / "pins.toml")


def test_from_the_abi3_cpython_on_one_stable_abi_wheel_serves_every_later_cpython(tmp_path):
    line = P.load().oeq_lines[0]
    assert line.pythons == ("3.10", "3.11", "3.12", "3.14t") and line.abi3 == "3.12"
    assert [line.abi_tag(v) for v in line.pythons] == ["cp310", "cp311", "abi3", "cp314t"]
    from oeq_wheels.release.site import _requires_python  # what the index says, from the wheel's tag
    oeq = line.version(P.load().oeq.version)
    assert [_requires_python(f"openequivariance-{oeq}-{P.interpreter_tag(v)}-{line.abi_tag(v)}-manylinux_2_28_x86_64.whl")
            for v in line.pythons] == ["==3.10.*", "==3.11.*", ">=3.12", "==3.14.*"]
    assert all(line.serves(v) for v in ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15", "3.99")) and not line.serves("3.9")
    # a free-threaded CPython loads no abi3 module: only its own build serves it
    assert line.serves("3.14t") and not line.serves("3.15t") and not line.serves("3.13t")
    # nanobind's linked stable ABI needs 3.12, and the abi3 build is the last one built
    for bad in ('abi3 = "3.11"', 'abi3 = "3.10"'):
        text = P.PINS_FILE.read_text().replace('abi3 = "3.12"', bad)
        (tmp_path / "pins.toml").write_text(text)
        with pytest.raises(P.PinsError, match="3.12 or later"):
            P.load(path=tmp_path / "pins.toml")


def test_a_free_threaded_cpython_has_its_own_tags_suffix_and_pinned_source(tmp_path):
    pins = P.load()
    assert (P.cp_tag("3.14t"), P.interpreter_tag("3.14t"), P.interpreter_tag("3.14")) == ("cp314t", "cp314", "cp314")
    assert sorted(["3.15", "3.14t", "3.10", "3.14"], key=P.python_key) == ["3.10", "3.14", "3.14t", "3.15"]
    line = pins.oeq_line(pins.oeq_binary.name, "aarch64")
    assert line.ext_suffix("3.14t") == ".cpython-314t-aarch64-linux-gnu.so" and line.free_threaded("3.14t")
    ft = pins.freethreaded["3.14t"]
    assert ft.source.url.endswith("/" + ft.source.file) and len(ft.source.sha256) == 64
    assert "3.14t" in pins.toolchain.pythons  # its headers are pinned like every CPython's
    from oeq_wheels.gate_common import python_of
    from packaging.tags import Tag
    assert python_of(Tag("cp314", "cp314t", "x")) == "3.14t" and python_of(Tag("cp314", "cp315t", "x")) is None
    # a free-threaded CPython in [oeq_binary] pythons needs its pinned source
    text = P.PINS_FILE.read_text().replace('[freethreaded."3.14t"]', '[freethreaded."3.13t"]')
    (tmp_path / "pins.toml").write_text(text)
    with pytest.raises(P.PinsError, match=r"free-threaded CPython 3\.14t.*\[freethreaded"):
        P.load(path=tmp_path / "pins.toml")


def test_a_lines_cuda_binding_is_linked_unless_it_says_dispatch(tmp_path):
    """The one line binds CUDA through our dispatch library (its RUNPATH names no NVIDIA wheel's folder); a line
    without cuda_binding links its CUDA major's libraries; any other value is one line naming the table and the
    choices."""
    pins = P.load()
    assert all(l.dispatch for l in pins.oeq_lines) and pins.oeq_binary.runpath() == "$ORIGIN:$ORIGIN/../../../torch/lib"
    text = P.PINS_FILE.read_text()
    old = 'cuda_binding = "dispatch"\n'
    assert text.count(old) == 1
    (tmp_path / "pins.toml").write_text(text.replace(old, ""))
    linked = P.load(path=tmp_path / "pins.toml").oeq_line(pins.oeq_binary.name)
    assert not linked.dispatch and linked.cuda_majors == ("12",) and "nvidia/cuda_runtime/lib" in linked.runpath()
    (tmp_path / "pins.toml").write_text(text.replace(old, 'cuda_binding = "static"\n'))
    with pytest.raises(P.PinsError, match=rf"\[oeq_binary.lines.{pins.oeq_binary.name}\] cuda_binding = 'static': "
                                          "one of linked, dispatch"):
        P.load(path=tmp_path / "pins.toml")


def test_an_architectures_build_of_a_line_reads_what_its_arch_table_says(tmp_path):
    """[oeq_binary.lines.X.arch.NAME]: that architecture's build reads its own torch and CUDA (PyPI's oldest CUDA torch
    differs by architecture); a table for an architecture the line does not build is one line."""
    pins = P.load()
    x86, arm = pins.line_builds(pins.oeq_binary.name)  # the line's own table first, whatever the arch table's CUDA
    table = tomllib.loads(P.PINS_FILE.read_text())["oeq_binary"]["lines"][x86.name]
    own = table["arch"]["aarch64"]
    assert (arm.torch_matrix, arm.torch_min, arm.cuda) == (own["torch_matrix"], own["torch_min"], own["cuda"])
    assert (x86.torch_matrix, x86.torch_min, x86.cuda) == (table["torch_matrix"], table["torch_min"], table["cuda"])
    text = P.PINS_FILE.read_text()
    (tmp_path / "pins.toml").write_text(text.replace('arches = ["x86_64", "aarch64"]', 'arches = ["x86_64"]'))
    with pytest.raises(P.PinsError, match=rf"\[oeq_binary.lines.{x86.name}.arch.aarch64\]: the line's arches do not "
                                          "name aarch64"):
        P.load(path=tmp_path / "pins.toml")


def test_the_one_lines_index_is_every_cuda_majors_and_each_label_is_named_once():
    pins = P.load()
    labels = [label for label, _ in pins.project_urls]
    assert len(labels) == len(set(labels))  # METADATA takes one URL per label
    urls = dict(pins.project_urls)
    assert urls["CUDA 12 index"] == urls["CUDA 13 index"] == pins.index_url(pins.oeq_binary.name)
