import dataclasses

import pytest

from oeq_wheels import fetch, pins as P


def test_hash_mismatch_is_refused(tmp_path):
    pin = P.load().pybind11
    bad = dataclasses.replace(pin, sha256="0" * 64)
    with pytest.raises(fetch.FetchError, match="sha256|hash"):
        fetch.ensure([bad], tmp_path)
    assert not (tmp_path / "downloads" / pin.file).exists()


def test_cached_file_is_reused_offline_and_corruption_detected(tmp_path, cache, monkeypatch):
    pin = P.load().pybind11
    fetch.ensure([pin], cache)  # present in the shared cache
    local = tmp_path / "downloads"
    local.mkdir()
    (local / pin.file).write_bytes((cache / "downloads" / pin.file).read_bytes())
    calls = []
    monkeypatch.setattr(fetch, "_download_one", lambda *a: calls.append(a))
    fetch.ensure([pin], tmp_path)
    assert calls == []  # verified from disk, no network
    (local / pin.file).write_bytes(b"corrupt")
    fetch.ensure([pin], tmp_path)
    assert len(calls) == 1  # a damaged cache entry is fetched again, never used
