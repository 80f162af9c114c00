"""Caches that check themselves, on a real download (pybind11's wheel from the pinned inputs): a damaged download or
unpacked tree is never used, an unchanged one is not read again (objects and blobs: tests/unit/test_cache_integrity.py)."""
import pytest

from support.artifacts import flip_byte_keep_mtime
from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch, unpack
from oeq_wheels.files import sha256_file


@pytest.fixture
def pybind11_download(tmp_path, cache):
    pin = P.load().pybind11
    real = fetch.ensure([pin], cache)[pin.file]
    local = tmp_path / "cache" / "downloads"
    local.mkdir(parents=True)
    (local / pin.file).write_bytes(real.read_bytes())
    return pin, tmp_path / "cache"


def test_download_with_a_flipped_byte_and_restored_mtime_is_fetched_again(pybind11_download, monkeypatch):
    pin, cache = pybind11_download
    path = cache / "downloads" / pin.file
    fetch.ensure([pin], cache)  # hashed in full once, then stamped
    assert fetch._is_verified(path, pin.sha256)
    flip_byte_keep_mtime(path)
    assert not fetch._is_verified(path, pin.sha256)  # the ctime moved, so the stamp no longer vouches for it
    log = []
    fetch.ensure([pin], cache, log.append)
    assert any("does not match its pinned sha256" in l for l in log), log
    assert sha256_file(path) == pin.sha256  # downloaded again, never used damaged


def test_tree_with_a_flipped_byte_is_unpacked_again(pybind11_download, capsys):
    pin, cache = pybind11_download
    wheel = cache / "downloads" / pin.file
    include = unpack.pybind11_include(wheel, pin, cache)
    header = include / "pybind11" / "pybind11.h"
    good = header.read_bytes()
    flip_byte_keep_mtime(header)
    unpack._checked.clear()  # as a new run would start
    assert "differs from what was unpacked" in unpack.tree_problem(include.parent.parent)
    again = unpack.pybind11_include(wheel, pin, cache)
    assert again == include and header.read_bytes() == good
    assert "unpacking it again" in capsys.readouterr().err
    assert unpack.tree_problem(include.parent.parent) is None


def test_tree_with_an_added_file_or_no_record_is_unpacked_again(pybind11_download):
    pin, cache = pybind11_download
    wheel = cache / "downloads" / pin.file
    root = unpack.pybind11_include(wheel, pin, cache).parent.parent
    (root / "pybind11" / "include" / "pybind11" / "shadow.h").write_text("#error shadowed\n")
    assert "missing or added" in unpack.tree_problem(root)
    unpack._checked.clear()
    unpack.pybind11_include(wheel, pin, cache)
    assert not (root / "pybind11" / "include" / "pybind11" / "shadow.h").exists()
    (root / unpack.TREE_RECORD).unlink()  # a tree from an older oeq-wheels: no record to check against
    assert "no content record" in unpack.tree_problem(root)


def test_unchanged_tree_is_not_read_again(pybind11_download, monkeypatch):
    pin, cache = pybind11_download
    root = unpack.pybind11_include(cache / "downloads" / pin.file, pin, cache).parent.parent
    monkeypatch.setattr(unpack, "_crc32", lambda p: pytest.fail(f"re-read unchanged {p}"))
    assert unpack.tree_problem(root) is None
