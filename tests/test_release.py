"""Publish gate, SHA256SUMS and the PEP 503 index over real built wheels."""
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from oeq_wheels import build, pins as P, release

pytestmark = pytest.mark.slow


def only_cp311(pins):
    """The release pins narrowed to CPython 3.11, for a set the tests can build quickly."""
    return dataclasses.replace(pins, matrix=dataclasses.replace(pins.matrix, pythons=("3.11",)))


def test_incomplete_set_is_refused(cp311_wheel, tmp_path):
    shutil.copy(cp311_wheel, tmp_path)
    with pytest.raises(release.ReleaseError, match=r"incomplete set: no wheel for cp310, cp312, cp313"):
        release.publish(tmp_path, None, True, P.load())
    assert not (tmp_path / "SHA256SUMS").exists()


def test_dry_run_verifies_and_writes_sha256sums(cp311_wheel, tmp_path, capsys):
    shutil.copy(cp311_wheel, tmp_path)
    assert release.publish(tmp_path, None, True, only_cp311(P.load())) == 0
    line = (tmp_path / "SHA256SUMS").read_text()
    assert line == f"{hashlib.sha256(cp311_wheel.read_bytes()).hexdigest()}  {cp311_wheel.name}\n"
    r = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and ": OK" in r.stdout
    assert "dry run: would upload 1 wheel(s)" in capsys.readouterr().out


def test_a_wheel_whose_library_differs_from_its_manifest_is_refused(cp311_wheel, tmp_path):
    from wheel.wheelfile import WheelFile
    unpacked = tmp_path / "u"
    with zipfile.ZipFile(cp311_wheel) as zf:
        zf.extractall(unpacked)
    lib = unpacked / "fastmace_oeq_ext" / "libtorch_tp_jit.so"
    lib.write_bytes(lib.read_bytes() + b"\0")  # RECORD rewritten, manifest left as it was
    out = tmp_path / "out"
    out.mkdir()
    with WheelFile(out / cp311_wheel.name, "w") as wf:
        wf.write_files(str(unpacked))
    with pytest.raises(release.ReleaseError, match="failed verification"):
        release.publish(out, None, True, only_cp311(P.load()))


def test_tampered_wheel_is_refused(cp311_wheel, tmp_path):
    bad = tmp_path / cp311_wheel.name
    with zipfile.ZipFile(cp311_wheel) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data + b"# edited\n" if info.filename.endswith("__init__.py") else data)
    with pytest.raises(release.ReleaseError, match="failed verification"):
        release.publish(tmp_path, None, True, only_cp311(P.load()))


def test_missing_credentials_refused_and_nothing_uploaded(cp311_wheel, tmp_path, monkeypatch):
    shutil.copy(cp311_wheel, tmp_path)
    monkeypatch.delenv("TWINE_PASSWORD", raising=False)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(release.subprocess, "run",
                        lambda cmd, *a, **k: calls.append(cmd) if "upload" in cmd else real_run(cmd, *a, **k))
    with pytest.raises(release.ReleaseError, match="no upload credentials"):
        release.publish(tmp_path, None, False, only_cp311(P.load()), repository_url="http://127.0.0.1:9/")
    assert not any("upload" in c for c in calls)


def test_publish_cli_dry_run_needs_the_full_set(cp311_wheel, tmp_path):
    shutil.copy(cp311_wheel, tmp_path)
    from conftest import run_cli
    r = run_cli("publish", str(tmp_path), "--dry-run")
    assert r.returncode == 2 and "incomplete set" in r.stderr


def test_index_is_usable_by_pip(cp311_wheel, tmp_path):
    shutil.copy(cp311_wheel, tmp_path)
    simple = release.write_index(tmp_path, P.load())
    page = (simple / "fastmace-oeq-ext" / "index.html").read_text()
    assert cp311_wheel.name in page and "#sha256=" in page
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    dl = tmp_path / "dl"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                        "--index-url", simple.as_uri(), "-d", str(dl), "fastmace-oeq-ext==0.7.0.post1"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (dl / cp311_wheel.name).read_bytes() == cp311_wheel.read_bytes()


def test_reproducible_two_builds_same_bytes(cp311_wheel, tmp_path, cache):
    """A second, independent build (other output directory, other object cache, later) is byte-identical."""
    other = tmp_path / "objects-cache"
    for sub in ("downloads", "extract"):
        (other / sub).parent.mkdir(parents=True, exist_ok=True)
        (other / sub).symlink_to(cache / sub)
    rows, failures = build.run(tmp_path / "again", ["3.11"], cache=other)
    assert not failures
    assert (tmp_path / "again" / cp311_wheel.name).read_bytes() == cp311_wheel.read_bytes()
    report = (tmp_path / "again" / "REPORT.md").read_text()
    assert cp311_wheel.name in report and P.load().oeq.sha256 in report
