"""One unambiguous archive (oeq_wheels/gate_common.py layout_problem): bytes before the first entry, between entries
or after the end record, an archive comment, a local header that disagrees with its central entry, and an input that
is no regular file are each refused in one line before the archive is opened as a zip; fuzzed with Hypothesis
(prefixes, truncations, comments, mutated headers): never an exception, never an altered archive taken."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from oeq_wheels import gate_common
from test_gate_common import NAME, wheel

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MEMBERS = [("demo/__init__.py", b"x = 1\n" * 50), ("demo/lib.so", bytes(range(256)) * 8)]


def good(tmp_path) -> bytes:
    return wheel(tmp_path, MEMBERS).read_bytes()


def problem(tmp_path, data: bytes) -> str | None:
    path = tmp_path / "fuzz" / NAME
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return gate_common.layout_problem(path)


def test_a_plain_archive_passes_and_so_does_one_with_data_descriptors(tmp_path):
    assert problem(tmp_path, good(tmp_path)) is None
    streamed = tmp_path / "streamed.zip"  # written to a pipe-like stream: sizes in data descriptors after the data
    with open(streamed, "wb") as raw:
        class Unseekable:
            def write(self, b): return raw.write(b)
            def flush(self): raw.flush()
            def tell(self): return raw.tell()
        with zipfile.ZipFile(Unseekable(), "w", zipfile.ZIP_DEFLATED) as zf:
            for n, d in MEMBERS:
                zf.writestr(n, d)
    assert zipfile.ZipFile(streamed).infolist()[0].flag_bits & 8
    assert gate_common.layout_problem(streamed) is None


@pytest.mark.parametrize("edit,why", [
    (lambda d: b"PK\x03\x04" + b"\0" * 60 + d, "bytes before the first entry or after the central directory"),
    (lambda d: d + b"\0", "does not end with the zip end record"),
    (lambda d: d[:-2] + b"\x03\x00abc", "does not end with the zip end record"),
    (lambda d: d[:-22] + b"junk" + d[-22:], "bytes before the first entry or after the central directory"),
])
def test_bytes_outside_the_entries_are_refused(tmp_path, edit, why):
    assert why in problem(tmp_path, edit(good(tmp_path)))


def test_another_wheel_before_the_real_one_is_refused_though_zipfile_reads_it(tmp_path):
    """The ambiguous zip: pip takes it (zipfile shifts its offsets), uv refuses it; so do we."""
    (tmp_path / "o").mkdir()
    data = wheel(tmp_path / "o", [("demo/evil.py", b"1")]).read_bytes() + good(tmp_path)
    assert len(zipfile.ZipFile(io.BytesIO(data)).namelist()) == 3  # zipfile reads the real one's members
    assert "bytes before the first entry" in problem(tmp_path, data)


def test_a_local_header_naming_another_file_is_refused(tmp_path):
    data = bytearray(good(tmp_path))
    at = data.index(b"demo/__init__.py")  # the first local header's name
    data[at:at + 4] = b"evil"
    assert "names another file" in problem(tmp_path, bytes(data))


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_an_input_that_is_no_regular_file_is_refused_unopened(tmp_path, kind):
    path = tmp_path / NAME
    if kind == "symlink":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block: the check must not
    else:
        path.mkdir()
    assert "not a regular file" in gate_common.layout_problem(path)


def test_verify_refuses_a_linked_wheel_in_one_line(tmp_path):
    os.symlink("/dev/zero", tmp_path / NAME)
    res = subprocess.run([sys.executable, "-m", "oeq_wheels", "verify", str(tmp_path / NAME)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": ":".join(sys.path)})
    assert res.returncode == 1 and "Traceback" not in res.stderr + res.stdout
    assert "not a regular file" in res.stdout + res.stderr


@FUZZ
@given(data=st.data())
def test_fuzzed_archives_are_refused_or_read_alike_never_an_exception(tmp_path, data):
    base = good(tmp_path)
    kind = data.draw(st.sampled_from(["prefix", "truncate", "comment", "mutate", "suffix"]))
    if kind == "prefix":
        mutated = data.draw(st.binary(min_size=1, max_size=64)) + base
    elif kind == "suffix":
        mutated = base + data.draw(st.binary(min_size=1, max_size=64))
    elif kind == "truncate":
        mutated = base[:data.draw(st.integers(0, len(base) - 1))]
    elif kind == "comment":
        c = data.draw(st.binary(min_size=1, max_size=40))
        mutated = base[:-2] + len(c).to_bytes(2, "little") + c
    else:
        at = data.draw(st.integers(0, len(base) - 1))
        mutated = base[:at] + bytes([base[at] ^ data.draw(st.integers(1, 255))]) + base[at + 1:]
    said = problem(tmp_path, mutated)  # never raises
    assert said is None or ("\n" not in said and said)
    if kind != "mutate":
        assert said is not None, kind  # every change of the layout is refused
    elif said is None:  # a flipped byte the layout allows (in a member's data, a time stamp): the same members
        with zipfile.ZipFile(io.BytesIO(mutated)) as zf:
            assert [i.filename for i in zf.infolist()] == [n for n, _ in MEMBERS] + ["demo-1.0.dist-info/RECORD"]


@pytest.mark.parametrize("name", ["demo/..", "/etc/demo", "demo//x.py", "demo\\x.py", "./demo/x.py"])
def test_a_member_name_that_is_no_plain_relative_path_is_one_problem(tmp_path, name):
    """A member named fastmace_oeq_ext/.. once ended verify in IsADirectoryError; now the archive is refused first."""
    from test_gate_common import opened
    got, v = opened(wheel(tmp_path, [*MEMBERS, (name, b"x")]))
    assert got is None and len(v.problems) == 1 and "no plain relative path" in v.problems[0], v.problems
