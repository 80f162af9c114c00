"""fastmace_oeq_ext.check(): every mismatch has its own reason (no torch or OEq needed)."""
import hashlib
import importlib.util
import json
import sys

import pytest

from conftest import REPO

spec = importlib.util.spec_from_file_location("fastmace_oeq_ext_under_test",
                                              REPO / "runtime" / "fastmace_oeq_ext" / "__init__.py")
rt = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rt
spec.loader.exec_module(rt)

GOOD_ENV = {"torch_version": "2.14.1+cu130", "torch_cuda": "13.0", "cxx11_abi": 1, "oeq_version": "0.7.0",
            "python_tag": "cp311", "system": "Linux", "machine": "x86_64"}


@pytest.fixture
def manifest(tmp_path):
    lib = tmp_path / "libtorch_tp_jit.so"
    lib.write_bytes(b"\x7fELF pretend library")
    m = {"package": {"name": "fastmace-oeq-ext", "version": "0.7.0.post1"},
         "torch": {"version": "2.14.1", "cuda": "13.0", "cxx11_abi": 1},
         "openequivariance": {"version": "0.7.0"}, "python": {"tag": "cp311"},
         "library": {"file": lib.name, "sha256": hashlib.sha256(lib.read_bytes()).hexdigest()}}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(m))
    return path


def test_exact_match_is_usable(manifest):
    d = rt.check(manifest, GOOD_ENV)
    assert d.usable and d.library == str(manifest.parent / "libtorch_tp_jit.so")
    # PyPI's distribution version is plain 2.14.1 while version.py says +cu130: the same build.
    assert rt.check(manifest, {**GOOD_ENV, "torch_version": "2.14.1"}).usable


@pytest.mark.parametrize("change, words", [
    ({"torch_version": "2.15.0+cu130"}, "torch 2.15.0+cu130 installed"),
    ({"torch_version": "2.14.1+cu126", "torch_cuda": "12.6"}, "CUDA 12.6"),
    ({"torch_version": "2.14.1+cu126"}, "cu126 build"),
    ({"torch_version": "2.14.1+cpu", "torch_cuda": None}, "CUDA None"),
    ({"cxx11_abi": 0}, "ABI=0"),
    ({"oeq_version": "0.6.9"}, "openequivariance 0.6.9"),
    ({"oeq_version": None}, "openequivariance is not installed"),
    ({"python_tag": "cp312"}, "Python cp312 running"),
    ({"system": "Darwin", "machine": "arm64"}, "platform Darwin arm64"),
    ({"machine": "aarch64"}, "platform Linux aarch64"),
])
def test_each_mismatch_has_its_reason(manifest, change, words):
    d = rt.check(manifest, {**GOOD_ENV, **change})
    assert not d.usable and words in d.reason and d.library is None


def test_missing_library(manifest):
    (manifest.parent / "libtorch_tp_jit.so").unlink()
    d = rt.check(manifest, GOOD_ENV)
    assert not d.usable and d.reason.startswith("library missing")


def test_wrong_sha256(manifest):
    (manifest.parent / "libtorch_tp_jit.so").write_bytes(b"something else")
    d = rt.check(manifest, GOOD_ENV)
    assert not d.usable and "differs from the manifest" in d.reason


def test_missing_and_corrupt_manifest(tmp_path):
    d = rt.check(tmp_path / "manifest.json", GOOD_ENV)
    assert not d.usable and d.reason.startswith("manifest missing")
    (tmp_path / "manifest.json").write_text("{not json")
    d = rt.check(tmp_path / "manifest.json", GOOD_ENV)
    assert not d.usable and d.reason.startswith("manifest unreadable")
    (tmp_path / "manifest.json").write_text("{}")
    assert rt.check(tmp_path / "manifest.json", GOOD_ENV).reason.startswith("manifest unreadable")


def test_prebuilt_mode_values(monkeypatch):
    for val, mode in (("", "auto"), ("0", "never"), ("1", "require")):
        monkeypatch.setenv("FASTMACE_OEQ_PREBUILT", val)
        assert rt._mode() == mode
    monkeypatch.setenv("FASTMACE_OEQ_PREBUILT", "yes")
    with pytest.raises(ValueError, match="FASTMACE_OEQ_PREBUILT"):
        rt._mode()
