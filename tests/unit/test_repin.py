"""`oeq-wheels pins`: re-pinning from a loopback registry with made-up releases, and --check; every refusal is
one line with pins.toml untouched (PyPI itself is tests/integration/test_repin_pypi.py's)."""
import hashlib
import os
import re
import tomllib

import pytest

from support.cli import run_cli
from support.fake_registry import Registry, wheel_bytes
from oeq_wheels import pins as P, repin

TORCH, LOCAL, CUDA, TOOLKIT, NV = "9.1.0", "cu139", "13.9", "13.9.1", "13.9.5"
PAD = os.urandom(1 << 20)  # torch's libraries: what a range reader must not download


def pinned_registry() -> Registry:
    """A registry holding every file pins.toml pins, listed with its pinned sha256."""
    reg = Registry()
    for project, name, sha in repin.pinned_files(tomllib.loads(P.PINS_FILE.read_text())):
        reg.add(project, name, sha256=sha, size=1)
    return reg


def add_torch(reg: Registry, cps=("cp310", "cp311", "cp312", "cp313"), arches=("x86_64", "aarch64"), cuda=CUDA):
    """A made-up CUDA torch release whose cuda-toolkit requirement pins made-up NVIDIA wheels."""
    meta = (f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH}\n"
            f'Requires-Dist: cuda-toolkit[cublas,cudart,cusolver,cusparse,nvrtc]=={TOOLKIT}; platform_system == "Linux"\n'
            "Requires-Dist: filelock\n").encode()
    version_py = f"__version__ = '{TORCH}+{LOCAL}'\ncuda: Optional[str] = '{cuda}'\n".encode()
    for arch in arches:
        for cp in cps:
            reg.add("torch", f"torch-{TORCH}-{cp}-{cp}-manylinux_2_28_{arch}.whl", wheel_bytes(
                {"torch/lib/libtorch_cuda.so": PAD + cp.encode(), "torch/version.py": version_py,
                 f"torch-{TORCH}.dist-info/METADATA": meta}))
    projects = sorted({r.partition("==")[0] for r in tomllib.loads(P.PINS_FILE.read_text())["matrix"]
                       [P.load().matrix.name]["nvidia"]})
    toolkit = "".join(f"Requires-Dist: {p}=={NV}.*; sys_platform == 'linux' and extra == 'all'\n" for p in projects)
    reg.add("cuda-toolkit", f"cuda_toolkit-{TOOLKIT}-py2.py3-none-any.whl", wheel_bytes(
        {f"cuda_toolkit-{TOOLKIT}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: cuda-toolkit\n{toolkit}".encode()}))
    for p in projects:
        for arch in arches:
            name = f"{p.replace('-', '_')}-{NV}-py3-none-manylinux_2_27_{arch}.whl"
            reg.add(p, name, sha256=hashlib.sha256(name.encode()).hexdigest(), size=1)
    return projects


@pytest.fixture
def pins_copy(tmp_path):
    path = tmp_path / "pins.toml"
    path.write_text(P.PINS_FILE.read_text())
    return path


def pins_cli(path, url, *args):
    return run_cli("pins", "--pins", str(path), "--index-url", url, *args)


def test_a_torch_release_is_pinned_from_the_registry_without_downloading_it(pins_copy):
    before = pins_copy.read_text()
    release = P.load()
    reg = pinned_registry()
    projects = add_torch(reg)
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--torch", TORCH)
    assert r.returncode == 0, r.stderr
    new = P.load(path=pins_copy)
    assert new.matrix.name == f"torch-{TORCH}" and new.matrix.torch_version == TORCH
    assert (new.matrix.torch_local, new.matrix.cuda, new.matrix.consumer_torch) == (LOCAL, CUDA, f"{TORCH}+{LOCAL}")
    assert new.consumer.torch_index == f"https://download.pytorch.org/whl/{LOCAL}"  # PyTorch's index of that torch
    assert new.matrix.pythons == release.matrix.pythons
    for cp, w in new.matrix.torch_wheels.items():
        assert w.file == f"torch-{TORCH}-{cp}-{cp}-manylinux_2_28_x86_64.whl"
        assert w.sha256 == next(f["hashes"]["sha256"] for f in reg.files["torch"] if f["filename"] == w.file)
    assert sorted(n.name for n in new.matrix.nvidia) == projects and {n.version for n in new.matrix.nvidia} == {NV}
    assert all(n.file.endswith("_x86_64.whl") for n in new.matrix.nvidia)
    assert [n.libs for n in new.matrix.nvidia] == [o.libs for o in release.matrix.nvidia]  # what a build links, kept
    assert tomllib.loads(pins_copy.read_text())["matrix"][new.matrix.name]["cuda_toolkit"] == TOOLKIT
    # The OEq lines keep their own torch and NVIDIA wheels; every comment of the file is still there.
    assert [l.torch for l in new.oeq_lines] == [l.torch for l in release.oeq_lines]
    assert [l.nvidia for l in new.oeq_lines] == [l.nvidia for l in release.oeq_lines]
    comments = [l.strip() for l in before.splitlines() if l.strip().startswith("#")]
    assert [c for c in comments if c not in pins_copy.read_text()] == []
    # Range reads: one wheel's central directory and two small members, never a whole torch wheel.
    torch_sent = {k: v for k, v in reg.sent.items() if k.startswith("torch-")}
    assert len(torch_sent) == 1 and sum(torch_sent.values()) < len(PAD) / 4, torch_sent
    assert "-pythons" not in r.stdout and f'+[matrix."torch-{TORCH}"]' in r.stdout  # the diff is printed
    assert "--next-post" in r.stdout  # the released fastmace-oeq-ext name must not be rebuilt
    # A new file's RECORD is not known until one full download (`pins --records`): until then builds take it whole.
    assert not any(w.record for w in new.matrix.torch_wheels.values()) and not any(n.record for n in new.matrix.nvidia)
    # ... nor the digests of its libraries' stubs; the replaced files' stubs are gone with them.
    assert not any(w.stubs for w in new.matrix.torch_wheels.values()) and not any(n.stubs for n in new.matrix.nvidia)
    stubbed = tomllib.loads(pins_copy.read_text())["stubs"]
    assert not [w.file for w in release.matrix.torch_wheels.values() if w.file in stubbed]
    assert all(w.stubs for l in new.oeq_lines for w in (l.torch, *l.nvidia) if w.libs or w.name == "torch")
    assert all(w.record for l in new.oeq_lines for w in (l.torch, *l.nvidia))  # the lines' own pins keep theirs


def test_readmes_derived_install_lines_follow_the_pins_and_nothing_else_of_it_changes(pins_copy):
    """After `--torch`, README's install lines are those of the new pins (tests/unit/test_install_lines.py holds README to them)
    and its prose is as it was; a re-pin that fails leaves README as it was too."""
    readme = pins_copy.parent / "README.md"
    before = (P.PINS_FILE.parent.parent / "README.md").read_text()
    readme.write_text(before)
    reg = pinned_registry()
    add_torch(reg)
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--torch", "9.9.9", "--readme", str(readme))
        assert r.returncode != 0 and readme.read_text() == before
        r = pins_cli(pins_copy, url, "--torch", TORCH, "--readme", str(readme))
    assert r.returncode == 0, r.stderr
    after = readme.read_text()
    old_lines, new_lines = repin.derived_lines(P.load()), repin.derived_lines(P.load(path=pins_copy))
    assert old_lines != new_lines and all(f"\n{line}\n" in after for line in new_lines)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(before.splitlines()) == len(after.splitlines()) and changed
    assert all(a in old_lines and b in new_lines for a, b in changed), changed
    assert f"+{new_lines[-3]}" in r.stdout  # the diff shows README's change too
    assert new_lines[-3] == f"pip install torch=={TORCH} --index-url https://download.pytorch.org/whl/{LOCAL}"
    assert sorted(p.name for p in pins_copy.parent.iterdir()) == ["README.md", "pins.toml"]


def test_a_named_matrix_is_repinned_for_every_architecture_its_line_builds(pins_copy):
    line = P.load().oeq_binary
    reg = pinned_registry()
    add_torch(reg, cuda=line.cuda)
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--torch", TORCH, "--matrix", line.torch_matrix)
    assert r.returncode == 0, r.stderr
    new = P.load(path=pins_copy)
    readers = [b.arch.name for b in P.load().line_builds(line.name) if b.torch_matrix == line.torch_matrix]
    for build in new.line_builds(line.name):  # each architecture's build that read the matrix reads its new torch
        if build.arch.name not in readers:  # an [.arch.NAME] table of another matrix: untouched
            assert build == P.load().oeq_line(line.name, build.arch.name)
            continue
        assert build.torch_matrix == f"torch-{TORCH}"
        assert build.torch.version == TORCH and build.torch.file.startswith(f"torch-{TORCH}-")
        assert build.torch.file.endswith(f"_{build.arch.name}.whl") and build.torch_local == LOCAL
    assert readers and {b.arch.name for b in new.line_builds(line.name)} == \
        {b.arch.name for b in P.load().line_builds(line.name)}
    assert [b.nvidia for b in new.line_builds(line.name)] == [b.nvidia for b in P.load().line_builds(line.name)]


def test_a_torch_of_another_cuda_release_than_its_line_is_refused(pins_copy):
    line = P.load().oeq_binary
    reg = pinned_registry()
    add_torch(reg)
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--torch", TORCH, "--matrix", line.torch_matrix)
    # The line's CUDA is pinned with its NVIDIA wheels; a torch of another CUDA release does not fit it.
    assert r.returncode == 2 and f"says CUDA {line.cuda}" in r.stderr and "untouched" in r.stderr, r.stderr
    assert pins_copy.read_text() == P.PINS_FILE.read_text()


@pytest.mark.parametrize("case", ["no-cp310", "unknown", "no-registry", "no-ranges", "bad-python"])
def test_what_cannot_be_pinned_is_one_line_and_pins_stay(pins_copy, case):
    reg = pinned_registry()
    cps = [P.cp_tag(v) for v in P.load().matrix.pythons]  # the matrix's CPythons; "no-cp310" lacks its first
    add_torch(reg, cps=tuple(cps[1:] if case == "no-cp310" else cps))
    reg.honour_ranges = case != "no-ranges"
    args = ["--torch", "9.9.9" if case == "unknown" else TORCH]
    if case == "bad-python":
        args += ["--python", "3.9"]
    with reg.serve() as url:
        if case == "no-registry":
            url = url.replace(url.split(":")[2].split("/")[0], "9")
        r = pins_cli(pins_copy, url, *args)
    expect = {"no-cp310": rf"torch 9\.1\.0 has no {cps[0]} wheel for Linux x86_64 on the registry \(it has: "
                          rf"{', '.join(cps[1:])}\); re-pin with --python",
              "unknown": r"torch 9\.9\.9 is not on the registry",
              "no-registry": r"cannot reach the registry",
              "no-ranges": r"the file host ignored or cut a range request \(HTTP 200",
              "bad-python": r"torch 9\.1\.0 has no cp39 wheel"}[case]
    assert r.returncode != 0 and re.search(expect, r.stderr), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert pins_copy.read_text() == P.PINS_FILE.read_text()
    assert [p.name for p in pins_copy.parent.iterdir()] == ["pins.toml"]  # nothing half-written beside it


def test_the_rebuild_number_and_an_oeq_release(pins_copy):
    base = P.load().base_version
    r = run_cli("pins", "--pins", str(pins_copy), "--next-post")
    assert r.returncode == 0, r.stderr
    from packaging.version import Version
    assert P.load(path=pins_copy).base_version == f"{Version(base).base_version}.post{(Version(base).post or 0) + 1}"
    reg = pinned_registry()
    reg.add("openequivariance", "openequivariance-9.0.1.tar.gz", b"sdist")
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--oeq", "9.0.1", "--post", "2")
        assert r.returncode == 0, r.stderr
        new = P.load(path=pins_copy)
        assert (new.oeq.version, new.oeq.file, new.oeq.sha256) == ("9.0.1", "openequivariance-9.0.1.tar.gz",
                                                                   hashlib.sha256(b"sdist").hexdigest())
        assert new.base_version == "9.0.1.post2"
        r = pins_cli(pins_copy, url, "--oeq", "9.0.2")
        assert r.returncode == 2 and "openequivariance 9.0.2 has no sdist on the registry" in r.stderr


def test_check_finds_each_pin_and_names_a_replaced_or_yanked_one(pins_copy):
    files = repin.pinned_files(tomllib.loads(P.PINS_FILE.read_text()))
    reg = pinned_registry()
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--check")
    assert r.returncode == 0 and f"all {len(files)} pinned files are on" in r.stdout, r.stderr
    project, name, _sha = files[-1]
    first = files[0]
    reg = Registry()
    for p, n, s in files:
        if n == name:
            reg.add(p, n, sha256="0" * 64, size=1)
        elif n != first[1]:
            reg.add(p, n, sha256=s, size=1)
    reg.add(first[0], "other.tar.gz", b"x")
    with reg.serve() as url:
        r = pins_cli(pins_copy, url, "--check")
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [f"pins: {first[1]}: not on the registry any more (removed); re-pin {first[0]}",
                                     f"pins: {name}: the registry's sha256 is {'0' * 64}, pinned {_sha} (the file "
                                     "was replaced)"]
    assert pins_copy.read_text() == P.PINS_FILE.read_text()
