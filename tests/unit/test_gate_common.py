"""The gate's reading of an archive (oeq_wheels/gate_common.py): RECORD and the central directory are checked before
any member is read, a duplicated name or an oversized member is refused, and members are read lazily in bounded
memory. Synthetic wheels: the real ones' forgeries are tests/integration/test_verify.py's."""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from oeq_wheels import gate_common

NAME = "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _row(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def wheel(tmp_path: Path, members: list[tuple[str, bytes]], record: str | None = None) -> Path:
    """A zip of members (in order, duplicates allowed) and a RECORD of them (or the one given)."""
    out = tmp_path / NAME
    if record is None:
        record = "".join(_row(n, d) for n, d in dict(members).items()) + "demo-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns of a duplicated name: writing one is the point
            for n, d in members:
                zf.writestr(n, d)
        zf.writestr("demo-1.0.dist-info/RECORD", record)
    return out


GOOD = [("demo/__init__.py", b"print('hi')\n"), ("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")]


def opened(path: Path):
    v = gate_common.Verdict(path)
    return gate_common.open_wheel(path, v), v


def test_a_consistent_archive_opens_and_its_members_are_read_only_when_asked(tmp_path, monkeypatch):
    got, v = opened(wheel(tmp_path, GOOD))
    assert v.problems == [] and got[0] == "demo" and set(got[3]) == {n for n, _ in GOOD}
    members = got[3]
    reads = []
    real = zipfile.ZipFile.read
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda self, n, *a: reads.append(n) or real(self, n, *a))
    assert "demo/__init__.py" in members and reads == []  # a membership test reads nothing
    assert members["demo/__init__.py"] == GOOD[0][1] and reads == ["demo/__init__.py"]
    assert members.get("demo/none") is None


def test_a_duplicated_name_is_refused_whatever_record_says(tmp_path):
    evil = ("demo/__init__.py", b"import os; os.system('evil')\n")
    path = wheel(tmp_path, [evil, *GOOD], record="".join(_row(n, d) for n, d in GOOD) + "demo-1.0.dist-info/RECORD,,\n")
    got, v = opened(path)
    assert got is None and v.problems == ["RECORD check failed: duplicate entries in the archive (installers disagree "
                                          "on which wins): ['demo/__init__.py']"]


@pytest.mark.parametrize("change, why", [
    (lambda ms: ms + [("demo/extra.py", b"x")], "not in RECORD ['demo/extra.py']"),
    (lambda ms: ms[1:], "not in the archive ['demo/__init__.py']"),
])
def test_record_and_the_archive_must_name_the_same_files(tmp_path, change, why):
    record = "".join(_row(n, d) for n, d in GOOD) + "demo-1.0.dist-info/RECORD,,\n"
    got, v = opened(wheel(tmp_path, change(list(GOOD)), record=record))
    assert got is None and why in v.problems[0]


def test_a_size_that_disagrees_with_record_is_refused_before_reading(tmp_path):
    record = _row(GOOD[0][0], GOOD[0][1]).replace(f",{len(GOOD[0][1])}\n", ",3\n") + _row(*GOOD[1]) \
        + "demo-1.0.dist-info/RECORD,,\n"
    got, v = opened(wheel(tmp_path, GOOD, record=record))
    assert got is None and f"demo/__init__.py is {len(GOOD[0][1])} bytes in the archive, RECORD says 3" in v.problems[0]


def test_a_changed_member_fails_its_record_hash(tmp_path):
    record = _row(GOOD[0][0], b"print('ho')\n") + _row(*GOOD[1]) + "demo-1.0.dist-info/RECORD,,\n"
    got, v = opened(wheel(tmp_path, GOOD, record=record))
    assert got is None and "demo/__init__.py does not match its sha256 in RECORD" in v.problems[0]


def test_a_huge_member_with_a_consistent_record_is_refused_in_bounded_memory(tmp_path):
    """A 256 MiB zero-filled member packs to a few hundred KB: the gate refuses it from the central directory, and
    the process never holds it (its peak, counted from the check's start, stays far below the member's size)."""
    path, size, h = tmp_path / NAME, 256 << 20, hashlib.sha256()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in GOOD:
            zf.writestr(n, d)
        with zf.open("demo/data.bin", "w", force_zip64=True) as f:  # written in chunks: this process never holds it
            for _ in range(size >> 20):
                f.write(b"\0" * (1 << 20))
                h.update(b"\0" * (1 << 20))
        digest = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
        zf.writestr("demo-1.0.dist-info/RECORD", "".join(_row(n, d) for n, d in GOOD)
                    + f"demo/data.bin,sha256={digest},{size}\ndemo-1.0.dist-info/RECORD,,\n")
    assert path.stat().st_size < 2 << 20
    # The peak is reset first (Linux's clear_refs 5), so what the forked child inherited does not count.
    code = ("import re, sys; open('/proc/self/clear_refs', 'w').write('5'); from pathlib import Path; "
            "from oeq_wheels import gate_common as g; v = g.Verdict(Path(sys.argv[1])); print(g.open_wheel(v.subject, v)); "
            "print(v.problems[0]); print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       env={"PYTHONPATH": ":".join(sys.path)})
    none, problem, peak_kb = r.stdout.splitlines()
    # refused by its size in the central directory, or before that by its ZIP64 header (the layout check)
    assert none == "None" and ("members larger than any of ours" in problem or "ZIP64" in problem) \
        and "demo/data.bin" in problem, r.stderr
    assert int(peak_kb) < 64 << 10  # KiB: a Python with the gate's imports, nowhere near the 256 MiB member


def test_a_damaged_archive_is_one_problem(tmp_path):
    path = tmp_path / NAME
    path.write_bytes(b"PK\x03\x04 not a zip at all")
    got, v = opened(path)
    assert got is None and v.problems[0] == "RECORD check failed: 21 bytes: too short to be a zip archive"


def test_a_wheel_tags_cpython_is_read_free_threaded_and_stable_abi_included():
    from packaging.tags import Tag
    assert gate_common.python_of(Tag("cp311", "cp311", "linux_x86_64")) == "3.11"
    assert gate_common.python_of(Tag("cp312", "abi3", "linux_x86_64")) == "3.12"  # the oldest CPython it serves
    assert gate_common.python_of(Tag("cp314", "cp314t", "linux_x86_64")) == "3.14t"
    assert gate_common.python_of(Tag("cp310", "cp310", "manylinux_2_28_aarch64")) == "3.10"
    for other in (Tag("py3", "none", "any"), Tag("pp310", "pypy310_pp73", "linux_x86_64"),
                  Tag("cp311", "cp312", "linux_x86_64"), Tag("cp311", "none", "linux_x86_64")):
        assert gate_common.python_of(other) is None, other


def test_every_file_is_accounted_for_both_ways():
    v = gate_common.Verdict(Path("w.whl"))
    gate_common.accounted(v, {"a", "b"}, {"a", "b"})
    assert v.ok
    gate_common.accounted(v, {"a", "x", "y"}, {"a", "b"})
    assert v.problems == ["files that do not belong in the wheel: ['x', 'y']", "files missing from the wheel: ['b']"]
    v = gate_common.Verdict(Path("w.whl"))
    gate_common.accounted(v, {f"f{i:02}" for i in range(15)}, set())  # at most ten named
    assert v.problems == [f"files that do not belong in the wheel: {[f'f{i:02}' for i in range(10)]}"]


def test_the_wheel_file_must_describe_this_wheel():
    from packaging.tags import Tag
    tag = Tag("cp311", "cp311", "manylinux_2_28_x86_64")
    good = b"Wheel-Version: 1.0\nGenerator: bdist_wheel (0.45.1)\nRoot-Is-Purelib: false\nTag: " + str(tag).encode()
    v = gate_common.Verdict(Path("w.whl"))
    gate_common.check_wheel_file(v, {"d-1.dist-info/WHEEL": good}, "d-1.dist-info", tag, purelib=False)
    assert v.ok
    wrong = {"purelib": (good, True), "no file": (None, False),
             "other tag": (good.replace(b"cp311-cp311", b"cp312-cp312"), False),
             "other version": (good.replace(b"Wheel-Version: 1.0", b"Wheel-Version: 2.0"), False)}
    for why, (text, purelib) in wrong.items():
        v = gate_common.Verdict(Path("w.whl"))
        files = {} if text is None else {"d-1.dist-info/WHEEL": text}
        gate_common.check_wheel_file(v, files, "d-1.dist-info", tag, purelib=purelib)
        assert v.problems == [f"d-1.dist-info/WHEEL does not describe this wheel (tag {tag})"], why


def test_a_records_fields_are_compared_with_the_pins_files_by_name_version_file_and_sha256():
    from types import SimpleNamespace as NS
    pinned = NS(name="torch", version="9.8.7", file="torch.whl", sha256="a" * 64, url="https://x")
    recorded = NS(name="torch", version="9.8.7", file="torch.whl", sha256="a" * 64)  # no url: not compared
    assert gate_common.file_entry(pinned) == gate_common.file_entry(recorded) == ("torch", "9.8.7", "torch.whl",
                                                                                 "a" * 64)
    record = NS(cuda="13.0", torch=recorded, inputs=(recorded,))
    want = {"cuda": "13.0", "torch": gate_common.file_entry(pinned), "inputs": (gate_common.file_entry(pinned),)}
    assert gate_common.field_differences("manifest", record, want, files=("torch",), file_lists=("inputs",)) == []
    other = NS(**{**vars(recorded), "sha256": "b" * 64})
    record = NS(cuda="12.8", torch=other, inputs=())
    assert gate_common.field_differences("manifest", record, want, files=("torch",), file_lists=("inputs",)) == [
        "manifest cuda is '12.8', pins say '13.0'",
        f"manifest torch is ('torch', '9.8.7', 'torch.whl', '{'b' * 64}'), pins say "
        f"('torch', '9.8.7', 'torch.whl', '{'a' * 64}')",
        f"manifest inputs is (), pins say (('torch', '9.8.7', 'torch.whl', '{'a' * 64}'),)"]
