"""The verbs (oeq_wheels/cli.py) refuse what cannot work before they start, in one line and with exit code 2: these
refusals need no build, no registry and no network."""
from oeq_wheels import pins
from support.cli import run_cli


def test_rehearsal_needs_a_build(tmp_path):
    r = run_cli("rehearse", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "build first (make wheels)" in r.stderr and "Traceback" not in r.stderr


def test_fetch_only_a_project_that_is_not_pinned_is_one_line(tmp_path):
    r = run_cli("fetch", "--python", "3.11", "--only", "pybind11,numpy", env={"OEQ_WHEELS_CACHE": str(tmp_path)})
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert "fetch --only: numpy is not a pinned project; pinned: " in line and "pybind11" in line
    assert not (tmp_path / "downloads").exists() or not any((tmp_path / "downloads").iterdir())


def test_unknown_python_is_a_clear_error(tmp_path):
    r = run_cli("build", "--python", "3.9", str(tmp_path / "out"))
    assert r.returncode == 2 and "3.9" in r.stderr and f"it pins: {', '.join(pins.load().pythons)} " in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
