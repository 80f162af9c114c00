"""`make rehearse-ci` runs the workflows under act as GitHub's runner would; here its narrow slice: release.yml's tag
job, then its build job's steps for one CPython, as a non-root user with password-free sudo and a host compiler that
is not the pinned one first on PATH. The full rehearsal (both workflows whole) runs before a release."""
import subprocess

from conftest import REPO, unavailable
from oeq_wheels.checks import rehearse_ci


def test_release_workflows_tag_job_and_one_cpythons_build_run_under_act_as_githubs_runner_would():
    # Skipped where act or root (or password-free sudo) is missing; a failure where OEQ_WHEELS_TEST_REQUIRE names act.
    why = rehearse_ci.cannot_run_here()
    if why:
        unavailable("act", why)
    r = subprocess.run(["make", "rehearse-ci", "REHEARSE_CI_FLAGS=--python 3.11 --keep-caches"], cwd=REPO,
                       capture_output=True, text=True, timeout=3000)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "run by user oeq-ci (password-free sudo)" in out or "password-free sudo" in out
    assert "NOT RUN: job build-aarch64-native" in out and "stand-in for actions/setup-python" in out
    assert "[release/tag] 🏁  Job succeeded" in out and "[release/build] 🏁  Job succeeded" in out
    assert "the slice's 5 wheel(s) are the recorded bytes" in out
