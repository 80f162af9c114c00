"""The cached venvs are never changed by a test: each test installs into its own overlay (tests/support/venvs.py)."""
import subprocess


from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch
from oeq_wheels.checks import venvs
from support import venvs as test_venvs


def test_removing_and_reinstalling_in_an_overlay_leaves_the_cached_venv_as_it_was(fastmace_base, cache, tmp_path):
    assert venvs._ready(fastmace_base)
    site = venvs.site_packages(fastmace_base)
    (record,) = site.glob("filelock-*.dist-info/RECORD")
    files = [site / line.split(",")[0] for line in record.read_text().splitlines()]
    before = {f: (f.stat().st_ino, f.read_bytes()) for f in files if f.is_file()}
    venv = test_venvs.overlay(fastmace_base, tmp_path / "v")
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


def test_the_consumer_venv_is_pypis_torch_under_the_pytorch_index_version(fastmace_base, cache):
    """fastmace_base is a hard-link copy of PyPI's torch venv (the same binary, not a second install) whose torch
    says the version PyTorch's index gives it; pip sees a consistent install, and PyPI's venv still says its own."""
    pins = P.load()
    pypi = test_venvs.pypi_torch_venv(pins, cache, pins.matrix.torch_version)
    code = "import importlib.metadata as m, torch; print(m.version('torch')); print(torch.__version__)"
    mine = subprocess.run([str(fastmace_base / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert mine.stdout.split() == [pins.matrix.consumer_torch] * 2, mine.stderr[-2000:]
    theirs = subprocess.run([str(pypi / "bin" / "python"), "-c", code], capture_output=True, text=True)
    assert theirs.stdout.split() == [pins.matrix.torch_version, pins.matrix.consumer_torch], theirs.stderr[-2000:]
    lib = "torch/lib/libtorch_cuda.so"
    assert (venvs.site_packages(fastmace_base) / lib).stat().st_ino == (venvs.site_packages(pypi) / lib).stat().st_ino
    check = subprocess.run([str(fastmace_base / "bin" / "python"), "-m", "pip", "check"], capture_output=True,
                           text=True, env=venvs.pip_env())
    assert not [l for l in check.stdout.splitlines() if l.startswith("torch ") or "but you have torch" in l], check.stdout
    show = subprocess.run([str(fastmace_base / "bin" / "python"), "-m", "pip", "show", "-f", "torch"],
                          capture_output=True, text=True, env=venvs.pip_env())
    assert f"Version: {pins.matrix.consumer_torch}" in show.stdout and "torch/lib/libtorch_cuda.so" in show.stdout
