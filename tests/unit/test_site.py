"""The index site's pure parts (oeq_wheels/release/site.py): the release host's renaming rule, which CUDA line a file
name belongs to, what a wheel's tag installs on, and one file per name. The site laid out from real wheels is
tests/integration/test_site_built.py's."""
import re
import zipfile
from urllib.parse import unquote

import pytest

from oeq_wheels import pins as P
from oeq_wheels.errors import OeqWheelsError
from oeq_wheels.release import site


@pytest.mark.parametrize("name, hosted", [
    ("openequivariance-9.1.0+oeqwheels.cu13.1-cp311-cp311-manylinux_2_28_x86_64.whl",
     "openequivariance-9.1.0.oeqwheels.cu13.1-cp311-cp311-manylinux_2_28_x86_64.whl"),
    ("fastmace_oeq_ext-9.1.0.post4-cp311-cp311-manylinux_2_28_x86_64.whl",
     "fastmace_oeq_ext-9.1.0.post4-cp311-cp311-manylinux_2_28_x86_64.whl"),
    ("SHA256SUMS", "SHA256SUMS"), ("a b~(c).whl", "a.b..c..whl"), (".hidden.", "hidden")])
def test_the_release_hosts_renaming_rule(name, hosted):
    assert site.release_asset_name(name) == hosted


def test_a_line_serves_binary_oeq_and_the_fastmace_builds_that_name_it():
    assert site.projects(P.load()) == ("openequivariance", "fastmace-oeq-ext")


def test_a_files_line_is_its_local_labels_cuda_part_a_rebuild_included():
    pins = P.load()
    for line in pins.oeq_lines:
        version = line.version(pins.oeq.version)
        name = f"openequivariance-{version}-cp311-cp311-manylinux_2_28_{line.arch.name}.whl"
        assert site.line_of_file(name, pins).name == line.name, name
        cuda, number = line.local_version.rsplit(".", 1)
        rebuilt = name.replace(line.local_version, f"{cuda}.{int(number) + 1}")  # a rebuild bumps the last number
        assert site.line_of_file(rebuilt, pins).name == line.name, rebuilt
    ext = f"fastmace_oeq_ext-9.1.0.post4+{pins.oeq_lines[0].local_version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert site.line_of_file(ext, pins).name == pins.oeq_lines[0].name
    for none in ("openequivariance-9.1.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # no local label: PyPI's
                 "openequivariance-9.1.0+other.cu13.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                 f"torch-9.8.7+{pins.oeq_lines[0].local_version}-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "not a wheel name.whl", "SHA256SUMS"):
        assert site.line_of_file(none, pins) is None, none


def test_requires_python_is_what_the_tag_installs_on():
    assert site._requires_python("o-1.0-cp311-cp311-manylinux_2_28_x86_64.whl") == "==3.11.*"
    assert site._requires_python("o-1.0-cp312-abi3-manylinux_2_28_x86_64.whl") == ">=3.12"
    assert site._requires_python("o-1.0-cp314-cp314t-manylinux_2_28_x86_64.whl") == "==3.14.*"


def test_one_file_per_name_and_the_same_name_with_other_bytes_is_refused(tmp_path):
    a = site.Wheel(tmp_path / "a" / "o-1.0-py3-none-any.whl", "o-1.0-py3-none-any.whl", "a" * 64)
    same = site.Wheel(tmp_path / "b" / a.name, a.name, "a" * 64)
    b = site.Wheel(tmp_path / "b" / "n-1.0-py3-none-any.whl", "n-1.0-py3-none-any.whl", "b" * 64)
    assert site._merge([a, b, same]) == [b, a]  # by name, the first of each
    with pytest.raises(OeqWheelsError, match="two different files are named o-1.0-py3-none-any.whl .* a released "
                                             "file name never changes"):
        site._merge([a, site.Wheel(same.path, a.name, "c" * 64)])


def test_a_wheels_metadata_is_its_one_dist_info_metadata(tmp_path):
    one, two = tmp_path / "one.whl", tmp_path / "two.whl"
    with zipfile.ZipFile(one, "w") as zf:
        zf.writestr("o/__init__.py", "")
        zf.writestr("o-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: o\n")
        zf.writestr("o-1.0.dist-info/sub/METADATA", "not this one")
    with zipfile.ZipFile(two, "w") as zf:
        zf.writestr("o-1.0.dist-info/METADATA", "a")
        zf.writestr("p-1.0.dist-info/METADATA", "b")
    assert site._metadata(one) == b"Metadata-Version: 2.1\nName: o\n"
    with pytest.raises(OeqWheelsError, match="has 2 .dist-info/METADATA files"):
        site._metadata(two)


def test_a_site_without_an_openequivariance_wheel_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(OeqWheelsError, match="no openequivariance wheel"):
        site.write_site(tmp_path / "site", [], P.load())
    assert not (tmp_path / "site").exists()


def test_a_line_with_its_own_index_folder_is_served_there_and_at_each_folder_it_replaced(tmp_path):
    """pins.toml's `index` and `also_at` (the one build's index at /simple/, and at the URLs of the lines it replaced):
    every folder serves the same pages, each link resolving to the one copy under files/, and a flat page beside it."""
    pins = P.load()
    line = pins.oeq_binary
    assert line.index_paths == ("simple", "cu130/simple", "cu128/simple", "variants/simple")
    assert pins.index_url(line.name) == f"{pins.site_url}simple/"
    name = f"openequivariance-{line.version(pins.oeq.version)}-cp311-cp311-manylinux_2_28_x86_64.whl"
    whl = tmp_path / name
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr(f"openequivariance-{line.version(pins.oeq.version)}.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: openequivariance\n")
    root = site.write_site(tmp_path / "site", [site.Wheel(whl, name, "0" * 64)], pins)
    pages = {f: (root / f / "openequivariance" / "index.html").read_text() for f in line.index_paths}
    for folder, page in pages.items():
        (href,) = re.findall(r'href="([^"#]+)#sha256=', page)
        assert (root / folder / "openequivariance" / unquote(href)).resolve() == (root / "files" / name).resolve(), folder
    flats = {"simple": root / "links.html", "cu130/simple": root / "cu130" / "links.html",
             "cu128/simple": root / "cu128" / "links.html", "variants/simple": root / "variants" / "links.html"}
    for folder, flat in flats.items():
        (href,) = re.findall(r'href="([^"#]+)#sha256=', flat.read_text())
        assert (flat.parent / unquote(href)).resolve() == (root / "files" / name).resolve(), folder
    landing = (root / "index.html").read_text()
    assert 'href="simple/openequivariance/"' in landing and '<a href="cu130/simple/">/cu130/simple/</a>' in landing
