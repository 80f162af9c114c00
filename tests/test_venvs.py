"""The cached venvs are never changed by a test: each test installs into its own overlay (venvs.overlay)."""
import subprocess

import pytest

from oeq_wheels import fetch, pins as P, venvs

pytestmark = pytest.mark.slow


def test_removing_and_reinstalling_in_an_overlay_leaves_the_cached_venv_as_it_was(fastmace_base, cache, tmp_path):
    assert venvs._ready(fastmace_base)
    site = venvs.site_packages(fastmace_base)
    (record,) = site.glob("filelock-*.dist-info/RECORD")
    files = [site / line.split(",")[0] for line in record.read_text().splitlines()]
    before = {f: (f.stat().st_ino, f.read_bytes()) for f in files if f.is_file()}
    venv = venvs.overlay(fastmace_base, tmp_path / "v")
    py, env = str(venv / "bin" / "python"), venvs.pip_env()
    r = subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "filelock"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert subprocess.run([py, "-c", "import filelock"], capture_output=True).returncode != 0  # gone from the overlay
    (pin,) = [w for w in P.load().consumer.wheels if w.name == "filelock"]
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                        str(fetch.ensure([pin], cache)[pin.file])], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # The cache's files are the same files with the same bytes, and the venv is still as it was made.
    assert {f: (f.stat().st_ino, f.read_bytes()) for f in files if f.is_file()} == before
    assert venvs._ready(fastmace_base)
    ok = subprocess.run([str(fastmace_base / "bin" / "python"), "-c", "import filelock, torch, fastmace"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    mine = subprocess.run([str(venv / "bin" / "fastmace"), "--help"], capture_output=True, text=True)
    assert mine.returncode == 0 and str(venv) in (venv / "bin" / "fastmace").read_text()  # its scripts are its own
