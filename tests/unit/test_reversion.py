"""reversion.reversioned: a wheel copied under a local version, its unchanged members' bytes kept as they are."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from oeq_wheels.errors import OeqWheelsError
from oeq_wheels.checks import reversion
from oeq_wheels.checks.reversion import ReversionError, reversioned

WHEEL = "demo_pkg-1.0-py3-none-any.whl"
INFO, DATA = "demo_pkg-1.0.dist-info", "demo_pkg-1.0.data"
NEW_INFO, NEW_DATA = "demo_pkg-1.0+cu130.dist-info", "demo_pkg-1.0+cu130.data"
METADATA = (b"Metadata-Version: 2.4\nName: demo-pkg\nVersion: 1.0\nSummary: a test\n\n"
            b"Version: 9 (in the description, not a header)\n")
FILES = {  # name -> (bytes, compression)
    "demo_pkg/__init__.py": (b"ANSWER = 42\n" * 200, zipfile.ZIP_DEFLATED),
    "demo_pkg/blob.bin": (bytes(range(256)) * 8, zipfile.ZIP_STORED),
    f"{DATA}/purelib/demo_extra.py": (b"EXTRA = 'from .data'\n", zipfile.ZIP_DEFLATED),
    f"{INFO}/METADATA": (METADATA, zipfile.ZIP_DEFLATED),
    f"{INFO}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n",
                      zipfile.ZIP_DEFLATED),
    f"{INFO}/licenses/LICENSE": (b"MIT, say\n", zipfile.ZIP_STORED),
}


class _Unseekable(io.RawIOBase):
    """zipfile writes data descriptors (flag bit 3) to a stream it cannot seek back in."""

    def __init__(self, f):
        self.f = f

    def writable(self):
        return True

    def write(self, b):
        return self.f.write(b)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, name: str = WHEEL, streamed: bool = False, files=FILES) -> Path:
    path = directory / name
    record = "".join(f"{n},sha256={_b64(d)},{len(d)}\r\n" for n, (d, _) in files.items()) + f"{INFO}/RECORD,,\r\n"
    with open(path, "wb") as raw:
        target = _Unseekable(raw) if streamed else raw
        with zipfile.ZipFile(target, "w") as z:
            z.writestr(zipfile.ZipInfo(f"{INFO}/", (2024, 1, 2, 3, 4, 6)), b"")  # a directory entry
            for n, (d, c) in files.items():
                z.writestr(zipfile.ZipInfo(n, (2024, 1, 2, 3, 4, 6)), d, compress_type=c)
            z.writestr(zipfile.ZipInfo(f"{INFO}/RECORD", (2024, 1, 2, 3, 4, 6)), record,
                       compress_type=zipfile.ZIP_DEFLATED)
    return path


def raw_member(path: Path, info: zipfile.ZipInfo) -> bytes:
    """A member's compressed bytes, as they lie in the archive."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        head = f.read(30)
        nlen, elen = struct.unpack("<2H", head[26:30])
        f.seek(info.header_offset + 30 + nlen + elen)
        return f.read(info.compress_size)


def renamed(name: str) -> str:
    return name.replace(INFO + "/", NEW_INFO + "/").replace(DATA + "/", NEW_DATA + "/")


def check_archive(src: Path, out: Path) -> None:
    with zipfile.ZipFile(out) as z:
        assert z.testzip() is None
        names = z.namelist()
        assert names == [renamed(n) for n in zipfile.ZipFile(src).namelist()]  # the source's order
        assert z.read(f"{NEW_INFO}/METADATA") == METADATA.replace(b"Version: 1.0\n", b"Version: 1.0+cu130\n", 1)
        with zipfile.ZipFile(src) as s:
            for info in s.infolist():
                if info.filename.endswith(("/METADATA", "/RECORD")):
                    continue
                new = z.getinfo(renamed(info.filename))
                assert raw_member(out, new) == raw_member(src, info), info.filename  # not recompressed
                assert (new.CRC, new.compress_type, new.file_size, new.date_time) == \
                       (info.CRC, info.compress_type, info.file_size, info.date_time)
        record = z.read(f"{NEW_INFO}/RECORD").decode()
    assert INFO not in record.replace(NEW_INFO, "") and record.endswith(f"{NEW_INFO}/RECORD,,\r\n")
    # WheelFile checks each member it reads against RECORD, and refuses one that RECORD lacks.
    with WheelFile(out) as wf:
        assert wf.dist_info_path == NEW_INFO
        for info in wf.infolist():
            if not info.is_dir():
                wf.read(info)


@pytest.mark.parametrize("streamed", [False, True], ids=["sizes-in-headers", "data-descriptors"])
def test_reversioned_wheel_is_valid_and_keeps_member_bytes(tmp_path, streamed):
    src = make_wheel(tmp_path, streamed=streamed)
    if streamed:
        assert all(i.flag_bits & 0x8 for i in zipfile.ZipFile(src).infolist())
    out = reversioned(src, "cu130", tmp_path / "out")
    assert out == tmp_path / "out" / "demo_pkg-1.0+cu130-py3-none-any.whl"
    check_archive(src, out)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary left


def test_pip_installs_it_under_the_local_version(tmp_path):
    out = reversioned(make_wheel(tmp_path), "cu130", tmp_path / "out")
    target = tmp_path / "target"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(out)],
                   check=True, env=env, capture_output=True)
    assert (target / NEW_INFO / "METADATA").is_file()  # pip keeps the wheel's name, '+' included
    probe = ("import sys, importlib.metadata as m; sys.path.insert(0, sys.argv[1]); import demo_extra; "
             "print(m.version('demo-pkg'), demo_extra.EXTRA)")
    got = subprocess.run([sys.executable, "-I", "-c", probe, str(target)], check=True, capture_output=True, text=True)
    assert got.stdout.split() == ["1.0+cu130", "from", ".data"]


def test_zip64_records_when_past_the_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(reversion, "ZIP64_LIMIT", 0)  # every offset and size goes into ZIP64 fields
    monkeypatch.setattr(reversion, "ZIP64_COUNT", 0)
    src = make_wheel(tmp_path)
    out = reversioned(src, "cu130", tmp_path / "out")
    data = out.read_bytes()
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data
    check_archive(src, out)


def test_second_call_reuses_the_copy_until_the_source_changes(tmp_path):
    src = make_wheel(tmp_path)
    out = reversioned(src, "cu130", tmp_path / "out")
    stamp = out.with_name(out.name + ".reversioned")
    assert stamp.is_file()
    def written():  # a rewrite renames a new file into place: a new inode as well as a new mtime
        return out.stat().st_ino, out.stat().st_mtime_ns

    before = written()
    assert reversioned(src, "cu130", tmp_path / "out") == out and written() == before

    # The same bytes under a new inode (a fresh download): the hash says it is the same source.
    copy = tmp_path / "again" / WHEEL
    copy.parent.mkdir()
    copy.write_bytes(src.read_bytes())
    assert reversioned(copy, "cu130", tmp_path / "out") == out and written() == before

    # Another source under the same name: written anew.
    other = dict(FILES, **{"demo_pkg/__init__.py": (b"ANSWER = 43\n", zipfile.ZIP_DEFLATED)})
    src.unlink()
    make_wheel(tmp_path, files=other)
    reversioned(src, "cu130", tmp_path / "out")
    assert written() != before
    assert zipfile.ZipFile(out).read("demo_pkg/__init__.py") == b"ANSWER = 43\n"

    # A damaged copy is not reused either.
    out.write_bytes(b"truncated")
    reversioned(src, "cu130", tmp_path / "out")
    assert zipfile.ZipFile(out).testzip() is None


def test_build_tag_and_tags_are_kept_as_spelled():
    old, new, name = reversion._names("torch-9.1.0-3-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130")
    assert (str(old), str(new)) == ("9.1.0", "9.1.0+cu130")
    assert name == "torch-9.1.0+cu130-3-cp312-cp312-manylinux_2_28_x86_64.whl"
    _, _, name = reversion._names("nvidia_x-1.0-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "CU130")
    assert name == "nvidia_x-1.0+cu130-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


def test_a_build_tagged_wheel_is_reversioned(tmp_path):
    src = make_wheel(tmp_path, name="demo_pkg-1.0-3-py3-none-any.whl")
    out = reversioned(src, "cu130", tmp_path / "out")
    assert out.name == "demo_pkg-1.0+cu130-3-py3-none-any.whl"
    check_archive(src, out)


def test_bad_input_is_a_clear_error(tmp_path):
    assert issubclass(ReversionError, OeqWheelsError)
    with pytest.raises(ReversionError, match="no such wheel"):
        reversioned(tmp_path / WHEEL, "cu130", tmp_path / "out")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ReversionError, match="not a wheel's file name"):
        reversioned(tmp_path / "notes.txt", "cu130", tmp_path / "out")
    (tmp_path / WHEEL).write_text("not a zip")
    with pytest.raises(ReversionError, match="not a zip archive"):
        reversioned(tmp_path / WHEEL, "cu130", tmp_path / "out")
    (tmp_path / WHEEL).unlink()
    make_wheel(tmp_path)
    with pytest.raises(ReversionError, match="not a valid local version"):
        reversioned(tmp_path / WHEEL, "cu 130!", tmp_path / "out")
    local = make_wheel(tmp_path, name="demo_pkg-1.0+cpu-py3-none-any.whl")
    with pytest.raises(ReversionError, match="already has a local version"):
        reversioned(local, "cu130", tmp_path / "out")
    wrong = make_wheel(tmp_path, name="demo_pkg-2.0-py3-none-any.whl")  # its dist-info says 1.0
    with pytest.raises(ReversionError, match="demo-pkg-2.0.dist-info"):
        reversioned(wrong, "cu130", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
