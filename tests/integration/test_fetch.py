"""The pinned inputs fetcher against the registry: a hash mismatch is refused, a cached file is verified offline and
a damaged one fetched again, and a pip constraint cannot refuse a pin (that --only names pinned projects only is
tests/unit/test_cli.py's)."""
import dataclasses

import pytest

from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch


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


def test_a_configured_pip_constraint_cannot_refuse_a_pinned_file(tmp_path, monkeypatch):
    """A machine whose pip configuration caps a project below the pin (e.g. `torch<=X` while pins.toml has
    a newer torch) still gets the pinned file: it is chosen by name and sha256, a constraint could only refuse it."""
    pin = P.load().pybind11
    cap = tmp_path / "constraints.txt"
    cap.write_text(f"{pin.name}<{pin.version}\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))
    got = fetch.ensure([pin], tmp_path / "cache")
    assert got[pin.file].is_file()
