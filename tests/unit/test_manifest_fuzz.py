"""A damaged manifest is one reason, never a crash: Manifest.from_json, load_manifest and check() meet arbitrary
bytes, arbitrary JSON, a valid manifest with one field of another JSON type, deep nesting, non-UTF-8 and an
oversize file with a ManifestError (check(): a refusing Decision) and nothing else; the doctor prints one line."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import fastmace_oeq_ext as rt
from support import RUNTIME
from fastmace_oeq_ext import decision
from fastmace_oeq_ext.manifest import MAX_BYTES, Manifest, ManifestError
from fastmace_oeq_ext.oeq_build import OeqBuild
from support.artifacts import as_schema_3
from test_runtime_check import GOOD_ENV, make_manifest

# The same examples on every run and machine, and no example database (tests/conftest.py: Hypothesis's caches).
FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LIB = b"\x7fELF pretend library"
VALID = make_manifest(hashlib.sha256(LIB).hexdigest()).to_json()
GOOD, OLD = json.loads(VALID), as_schema_3(VALID)
DELETE = object()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def paths(value, at=()):
    """Every place in a JSON document: each key's value and each list item, nested ones too."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*at, key)
        yield from paths(inner, (*at, key))


def changed(doc, path, value):
    doc = json.loads(json.dumps(doc))
    *parents, last = path
    node = doc
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A directory as the wheel installs it: the library beside its manifest (rewritten by each example)."""
    d = tmp_path_factory.mktemp("site")
    (d / "libtorch_tp_jit.so").write_bytes(LIB)
    return d


def one_reason(data: bytes | str, site):
    """data as a manifest: a Manifest or one ManifestError from each reader, and check()'s answer one printable
    line; returns the Manifest or None."""
    try:
        m = Manifest.from_json(data)
    except ManifestError as exc:
        assert str(exc).isprintable(), exc
        m = None
    else:
        assert Manifest.from_json(m.to_json()) == m
    path = site / "manifest.json"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    try:
        assert decision.load_manifest(path) == m
    except ManifestError:
        assert m is None
    d = rt.check(path, GOOD_ENV)
    assert isinstance(d, rt.Decision) and d.reason.isprintable(), d
    assert m is not None or (not d.usable and d.reason.startswith("manifest unreadable")), d
    return m


def test_the_valid_manifest_is_usable(site):
    assert one_reason(VALID, site) and rt.check(site / "manifest.json", GOOD_ENV).usable
    assert one_reason(json.dumps(OLD), site)


@FUZZ
@given(data=st.binary(max_size=400))
@example(data=b"\xff\xfe{}")
@example(data=VALID.encode()[:-3] + b"\x80}\n")
def test_arbitrary_bytes(site, data):
    one_reason(data, site)


@FUZZ
@given(junk=st.binary(min_size=1, max_size=8), at=st.integers(0, len(VALID)))
def test_valid_manifest_with_bytes_spliced_in(site, junk, at):
    raw = VALID.encode()
    one_reason(raw[:at] + junk + raw[at:], site)


@FUZZ
@given(value=json_values | st.dictionaries(st.text(max_size=8), json_values, max_size=6).map(
    lambda d: {"schema": 4, **d}), ascii_only=st.booleans())
def test_arbitrary_json(site, value, ascii_only):
    assert one_reason(json.dumps(value, ensure_ascii=ascii_only), site) is None


@FUZZ
@given(base=st.sampled_from([GOOD, OLD]), data=st.data(), value=json_values | st.just(DELETE))
def test_valid_manifest_with_one_field_of_another_json_type(site, base, data, value):
    path = data.draw(st.sampled_from(sorted(paths(base), key=repr)))
    one_reason(json.dumps(changed(base, path, value)), site)


@FUZZ
@given(depth=st.integers(1, 3000) | st.integers(3000, 250_000), where=st.sampled_from([None, *GOOD]),
       bracket=st.sampled_from(["[]", "{}"]))
@example(depth=200_000, where=None, bracket="[]")
def test_deep_nesting(site, depth, where, bracket):
    """Past the recursion limit json.loads raises RecursionError; just under it, quoting the value in a message
    can."""
    opening, closing = ('{"a":', "}") if bracket == "{}" else ("[", "]")
    nested = opening * depth + "1" + closing * depth
    text = nested if where is None else json.dumps({**GOOD, where: "NESTED"}).replace('"NESTED"', nested)
    assert one_reason(text, site) is None


@FUZZ
@given(library=st.text(min_size=1, max_size=5000))
@example(library="l" * 5000 + ".so")
@example(library="lib\x00.so")
@example(library="lib\ud800.so")
@example(library="lib\n.so")
def test_any_library_name(site, library):
    """The library's name is a path on this machine: too long for it, a NUL, a newline: a reason each."""
    name = library.removesuffix(".so")
    flags = [f"-DTORCH_EXTENSION_NAME={name}", "-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1"]
    one_reason(json.dumps({**GOOD, "library": library, "flags": flags}), site)


def test_a_field_that_cannot_be_printed_is_refused():
    for bad in ("\ud800", "9.2.3\n", "\x1b[2J", "a\x00b"):
        with pytest.raises(ManifestError, match="'compiler' must be a non-empty printable string"):
            Manifest.from_json(json.dumps({**GOOD, "compiler": bad}))


def test_an_oversize_manifest_is_refused_without_being_read_whole(site):
    padded = VALID[:-2] + " " * MAX_BYTES + "}\n"  # valid JSON, but no manifest is a megabyte
    assert one_reason(padded, site) is None
    assert "longer than 1 MiB" in rt.check(site / "manifest.json", GOOD_ENV).reason

    class Endless:
        """A file that never ends: a reader that reads it whole never returns."""
        served = 0

        def open(self, mode):
            assert mode == "rb"
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, size=-1):
            assert size >= 0, "read whole"
            self.served += size
            return b" " * size

    endless = Endless()
    with pytest.raises(ManifestError, match="longer than 1 MiB"):
        decision.load_manifest(endless)
    assert endless.served == MAX_BYTES + 1


@FUZZ
@given(data=st.binary(max_size=200) | json_values.map(json.dumps))
def test_the_oeq_build_record_too(data):
    try:
        OeqBuild.from_json(data)
    except ManifestError as exc:
        assert str(exc).isprintable()
    why = decision._line_mismatch({"oeq_build": data, "torch_version": "9.2.3+cu130", "torch_cuda": "13.0"})
    assert why is None if not data else why.startswith("its build record is unreadable: ") and why.isprintable()


def fake_install(site, manifest: bytes):
    """This package beside a damaged manifest, and a torch that only its version.py says is there."""
    shutil.copytree(RUNTIME / "fastmace_oeq_ext", site / "fastmace_oeq_ext",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / "fastmace_oeq_ext" / "manifest.json").write_bytes(manifest)
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("__version__ = '9.2.3+cu130'\ncuda = '13.0'\n")
    info = site / "torch-9.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.2.3\n")
    (info / "RECORD").write_text("torch/version.py,,\n")


def doctor(site, *args, **environ):
    env = {k: v for k, v in os.environ.items() if k not in (decision.ENV_PREBUILT, decision.ENV_FROM_WHEELS)}
    env.update(PYTHONPATH=str(site), **environ)
    return subprocess.run([sys.executable, "-m", "fastmace_oeq_ext", *args], capture_output=True, text=True,
                          cwd=site, env=env, timeout=60)


@pytest.mark.parametrize("manifest, reason", [
    (b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0)"),
    (b"[" * 200_000 + b"]" * 200_000, "JSON nested too deep to be a manifest"),
    (b" " * (MAX_BYTES + 1), "longer than 1 MiB"),
    (json.dumps({**GOOD, "flags": 7}).encode(), "field 'flags' must be a list of printable strings, got 7"),
])
def test_the_doctor_says_a_damaged_manifest_in_one_line(tmp_path, manifest, reason):
    fake_install(tmp_path, manifest)
    r = doctor(tmp_path, FASTMACE_OEQ_PREBUILT="1")
    first = r.stdout.splitlines()[0]
    assert r.returncode == 1 and not r.stderr, r.stdout + r.stderr
    assert first.startswith("host extension: unusable; FASTMACE_OEQ_PREBUILT=1 but the prebuilt library cannot be "
                            "used: manifest unreadable (") and reason in first, first
    for args in ((), ("--json",)):  # left to decide: the prebuilt is refused with the reason, never a traceback
        r = doctor(tmp_path, *args)
        assert r.returncode in (0, 1) and not r.stderr and reason in r.stdout, r.stdout + r.stderr


def test_the_doctor_says_a_damaged_oeq_build_record_in_one_line(tmp_path):
    fake_install(tmp_path, VALID.encode())
    extlib = tmp_path / "openequivariance" / "_torch" / "extlib"
    extlib.mkdir(parents=True)
    (tmp_path / "openequivariance" / "__init__.py").write_text("")
    (extlib / decision.OEQ_STABLE_MARKER).write_bytes(b"")
    info = tmp_path / "openequivariance-4.5.6+oeqwheels.cu13.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: openequivariance\nVersion: 4.5.6+oeqwheels.cu13.1\n")
    (info / decision.OEQ_BUILD_FILE).write_bytes(b'{"schema": 2, \xff}')
    r = doctor(tmp_path)
    assert r.returncode == 1 and not r.stderr, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == ("host extension: unusable; its build record is unreadable: not UTF-8 text "
                                        "(byte 0xff at offset 14)"), r.stdout
