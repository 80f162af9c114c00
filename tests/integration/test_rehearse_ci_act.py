"""`make rehearse-ci` runs the workflows under act as GitHub's runner would; here its narrow slice: release.yml's tag
job, then its build job's steps for one CPython, as a non-root user with password-free sudo and a host compiler that
is not the pinned one first on PATH, on the working tree under test. The full rehearsal (both workflows whole) runs
before a release."""
import os
import pwd
import re
import subprocess

from support import REPO
from support.capabilities import unavailable
from oeq_wheels import pins as pins_mod
from oeq_wheels.checks import rehearse_ci
from oeq_wheels.release import recorded as recorded_mod

PYTHON = "3.11"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def _paths(*args: str) -> list[str]:
    """The paths a git command lists with -z."""
    return [p for p in _git(*args, "-z").split("\0") if p]


def test_release_workflows_tag_job_and_one_cpythons_build_run_under_act_as_githubs_runner_would():
    why = rehearse_ci.cannot_run_here()
    if why:
        unavailable("act", why)  # a skip, or a failure where OEQ_WHEELS_TEST_REQUIRE names act
    pins = pins_mod.load()
    # The tree under test as git reads it now (not the rehearsal's own way of counting): HEAD, and the paths where the
    # working tree differs from it, tracked or untracked and not ignored.
    head = _git("rev-parse", "HEAD")
    uncommitted = len(_paths("diff", "HEAD", "--name-only")) + len(_paths("ls-files", "-o", "--exclude-standard"))
    user = "oeq-ci" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    act = subprocess.run([rehearse_ci.act_binary(), "--version"], capture_output=True, text=True).stdout.strip()
    wheels = [n for n in recorded_mod.load().wheels if rehearse_ci.slice_tag(PYTHON) in n]

    r = subprocess.run(["make", "rehearse-ci", f"REHEARSE_CI_FLAGS=--python {PYTHON} --keep-caches"], cwd=REPO,
                       capture_output=True, text=True, timeout=3000)
    out = r.stdout + r.stderr
    lines = out.splitlines()
    assert r.returncode == 0, out[-4000:]
    # The working tree, uncommitted changes and all, is what act ran (the clone's one commit on top of HEAD).
    tree = re.escape(f"rehearse-ci: the tree under test: HEAD {head} and {uncommitted} path(s) not committed there "
                     "(tree ") + "[0-9a-f]{40,64}" + re.escape(")")
    assert sum(1 for line in lines if re.fullmatch(tree, line)) == 1, [line for line in lines if "tree under" in line]
    if uncommitted == 0:  # a clean tree is HEAD's tree itself
        assert rehearse_ci.describe_tree(head, _git("rev-parse", "HEAD^{tree}"), 0) in lines
    runner = (f"rehearse-ci: v{pins.version} of {pins.repository}, run by user {user} (password-free sudo) "
              f"with act ({act})")
    assert runner in lines, [line for line in lines if "run by user" in line]
    # act's own job results, not lines the rehearsal prints before act starts.
    assert "[release/tag] 🏁  Job succeeded" in out and "[release/build] 🏁  Job succeeded" in out
    # After act: the build job's wheels are every wheel the record names for this CPython, with the recorded bytes.
    assert len(wheels) >= 2 and rehearse_ci.slice_line(len(wheels), PYTHON) in lines
