"""Caches that check themselves: a damaged archive, blob or object is never used, a dead run's leftovers are swept,
tool verdicts are kept by wheel hash (a real download: tests/integration/test_cache_integrity_downloads.py)."""
import os
import subprocess
import zipfile

import pytest

from support.artifacts import flip_byte_keep_mtime
from oeq_wheels import pins as P
from oeq_wheels.inputs import unpack
from oeq_wheels import toolchain as cc
from oeq_wheels.files import sweep_stale, temp_prefix


def test_damaged_archive_is_one_line_error(tmp_path):
    pin = P.load().pybind11
    bad = tmp_path / "downloads" / pin.file
    bad.parent.mkdir()
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(unpack.InputError, match="cannot unpack the archive .* run again to download it afresh"):
        unpack.pybind11_include(bad, pin, tmp_path)
    assert not [p for p in (tmp_path / "extract").iterdir()]  # no half tree left


def test_damaged_blob_is_extracted_again(tmp_path):
    big = os.urandom(9 << 20)  # above the size that is shared between trees as a blob
    z = tmp_path / "a.whl"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("torch/lib/libbig.so", big)
    blobs = tmp_path / "blobs"
    with zipfile.ZipFile(z) as zf:
        info = zf.getinfo("torch/lib/libbig.so")
        unpack._extract_member(zf, info, tmp_path / "t1", blobs)
        (blob,) = blobs.iterdir()
        flip_byte_keep_mtime(blob, 12345)
        unpack._extract_member(zf, info, tmp_path / "t2", blobs)
    assert (tmp_path / "t2/torch/lib/libbig.so").read_bytes() == big


@pytest.fixture
def objects(tmp_path):
    src = tmp_path / "a.cpp"
    src.write_text("int answer() { return 42; }\n")
    return cc.ObjectCache(tmp_path / "objects", cc.Toolchain.detect(), 1), src


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-sum"])
def test_damaged_object_is_compiled_again(objects, damage, capsys):
    oc, src = objects
    obj, hit = oc.compile(src, ["-O2", "-fPIC"])
    assert not hit
    good = obj.read_bytes()
    if damage == "flip":
        flip_byte_keep_mtime(obj, 200)
    elif damage == "truncate":
        obj.write_bytes(good[:100])
    else:
        oc._sum_file(obj).unlink()
    again, hit = oc.compile(src, ["-O2", "-fPIC"])
    assert not hit and again.read_bytes() == good
    if damage != "no-sum":
        assert "does not match its recorded sha256" in capsys.readouterr().err
    assert oc.compile(src, ["-O2", "-fPIC"])[1]  # and then it is a cache hit again


def test_sweep_removes_only_dead_runs_leftovers(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f".x.whl.pid{dead.pid}.abc.part").write_text("")
    (tmp_path / f".tree.pid{dead.pid}.xyz").mkdir()
    mine = tmp_path / (temp_prefix("y.whl") + "part")
    mine.write_text("")
    (tmp_path / "keep.whl").write_text("")
    assert sweep_stale(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, "keep.whl"])


def test_tool_verdicts_are_remembered_by_wheel_hash_only_when_asked(tmp_path):
    from oeq_wheels import files
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"one wheel")
    calls = []
    ask = lambda: calls.append(1) or {"problem": None}
    memo = tmp_path / "verdicts"
    assert files.remembered("twine", wheel, ask, memo) == {"problem": None}
    assert files.remembered("twine", wheel, ask, memo) == {"problem": None}
    assert len(calls) == 1  # the same bytes: the tool is not started again
    wheel.write_bytes(b"another wheel")
    files.remembered("twine", wheel, ask, memo)
    assert len(calls) == 2  # other bytes, another verdict
    for f in memo.iterdir():
        f.write_text("{damaged")
    files.remembered("twine", wheel, ask, memo)
    assert len(calls) == 3  # an unreadable memo is asked again
    files.remembered("twine", wheel, ask, None)
    files.remembered("twine", wheel, ask, None)
    assert len(calls) == 5  # without a memo directory (verify, publish) always afresh
