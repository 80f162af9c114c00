"""The verbs (oeq_wheels/cli.py) refuse what cannot work before they start, in one line and with exit code 2: these
refusals need no build, no registry and no network."""
import pytest

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


# Every verb with what a user gets wrong: a path that is not there or cannot be made, a file that is not what it
# should be, a cache that cannot be made (OEQ_WHEELS_CACHE), a name that is not pinned. Each ends with one line that
# names the problem, never a traceback, exit code 1 (a failed check) or 2 (the command line, the pins or a path).
BAD = {
    "build: an OUTDIR that cannot be made": ["build", "/proc/nope/out"],
    "oeq-wheel: an OUTDIR that cannot be made": ["oeq-wheel", "/proc/nope/out"],
    "verify: no such wheel": ["verify", "/nonexistent.whl"],
    "verify: a device, not a wheel": ["verify", "/dev/null"],
    "verify: a zip that is not one": ["verify", "{garbage}"],
    "libcuda-stub: no such library": ["libcuda-stub", "/nonexistent.so", "/proc/nope"],
    "clean-install: no such OUTDIR": ["clean-install", "/nonexistent"],
    "install-matrix: no such OUTDIR": ["install-matrix", "/nonexistent"],
    "install-matrix: a torch no line is tested on": ["install-matrix", "{tmp}", "--torch", "9.9.9"],
    "compare-builds: no such builds": ["compare-builds", "/nonexistent", "/nonexistent2"],
    "publish: no such OUTDIR": ["publish", "/nonexistent", "--dry-run"],
    "rehearse-ci: no such scenario": ["rehearse-ci", "--hostile", "nope"],
    "rehearse-ci: a record without --hostile": ["rehearse-ci", "--record", "{tmp}/r.json"],
    "site: no such OUTDIR": ["site", "/nonexistent"],
    "site: no such release folder": ["site", "--release", "/nonexistent", "--out", "{tmp}/site"],
    "rehearse: no such OUTDIR": ["rehearse", "/nonexistent"],
    "check-tag: not a release tag": ["check-tag", "nope"],
    "pins: a pins file that is not TOML": ["pins", "--check", "--pins", "{garbage}"],
    "pins: a torch that is no version": ["pins", "--torch", "x.y"],
    "pythons: no such pins file": ["pythons", "--pins", "/nonexistent.toml"],
    "release-plan: a pins file that is not TOML": ["release-plan", "--pins", "{garbage}"],
    "fetch: a project that is not pinned": ["fetch", "--only", "nope"],
}


# The verbs that make or read the cache, once more with one that cannot be made.
CACHED = ("build: an OUTDIR that cannot be made", "oeq-wheel: an OUTDIR that cannot be made", "verify: no such wheel",
          "fetch: a project that is not pinned", "pins: a torch that is no version", "publish: no such OUTDIR")


@pytest.mark.parametrize("what, cache", [(w, "default") for w in sorted(BAD)] + [(w, "unmakeable") for w in CACHED])
def test_every_verb_meets_bad_input_with_one_line_and_no_traceback(what, cache, tmp_path):
    garbage = tmp_path / "garbage.whl"
    garbage.write_bytes(b"PK\x03\x04 not a zip")
    argv = [a.format(garbage=garbage, tmp=tmp_path) for a in BAD[what]]
    r = run_cli(*argv, env={"OEQ_WHEELS_CACHE": "/proc/nope"} if cache == "unmakeable" else None)
    assert r.returncode in (1, 2), (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    said = [line for line in (r.stderr + r.stdout).splitlines() if "error:" in line or line.startswith("FAIL ")]
    assert len(said) == 1, r.stderr[-2000:]


def test_a_maintainer_sees_where_an_expected_failure_was_raised_with_oeq_wheels_debug(tmp_path):
    r = run_cli("oeq-wheel", "/proc/nope/out", env={"OEQ_WHEELS_DEBUG": "1"})
    assert r.returncode == 2 and "Traceback" in r.stderr and "prepare_outdir" in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith("oeq-wheels: error: cannot create output directory")
