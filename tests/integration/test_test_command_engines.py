"""The test command with real engines: a required engine that cannot start fails the run and says why; podman
works again in a second run with the same cache."""
import os
import shutil
import subprocess

import pytest

from support import REPO
from support.capabilities import unavailable
from oeq_wheels import debian

pytestmark = pytest.mark.engines  # tools/ci/test.sh brings its engines up for these files

ENGINE_SH = str(REPO / "tools" / "ci" / "engine.sh")


def test_the_test_command_fails_and_says_why_when_a_required_engine_cannot_start(tmp_path):
    """The whole test command, as `.ci/run` runs it (OEQ_WHEELS_TEST_REQUIRE=engines), with a dockerd that cannot
    start first on PATH: the engine tests FAIL (not skip) and the last lines name dockerd and why."""
    if debian.as_root() is None or not shutil.which("apt-get"):
        unavailable("engines", "the test command brings engines up only as root (or through password-free sudo) "
                               "with apt-get")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "dockerd").write_text('#!/bin/sh\necho "failed to start daemon: broken on purpose" >&2\nexit 1\n')
    (fake / "dockerd").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", OEQ_WHEELS_TEST_REQUIRE="engines")
    for k in ("OEQ_WHEELS_TEST_ENGINE", "DOCKER_HOST", "OEQ_WHEELS_ENGINE_DOCKER", "OEQ_WHEELS_ENGINE_PODMAN",
              "OEQ_WHEELS_TEST_PODMAN"):
        env.pop(k, None)
    test = "tests/integration/test_container.py::test_a_daemon_that_dies_mid_build_is_one_line"
    r = subprocess.run(["bash", str(REPO / "tools/ci/test.sh"), test, "-q"], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=600)
    out = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0, "\n".join(out[-20:])
    assert any(l.startswith(f"FAILED {test}") for l in out), out[-20:]
    assert any(l.startswith("engines required (OEQ_WHEELS_TEST_REQUIRE) but not available: container engine docker: "
                            "fail: dockerd did not start") and "broken on purpose" in l for l in out), out[-20:]
    assert any(l.startswith("test.sh: container engine docker: fail: dockerd did not start") and
               "broken on purpose" in l for l in out[-3:]), out[-5:]
    assert any(l.startswith("engines ") and " FAIL " in l for l in out), out[-20:]  # the proof table
    # With the setting empty (nothing required) the same run passes, the test SKIPPED by name with that reason;
    # from a shell that lets Python write bytecode, the suite's processes still write none.
    env["OEQ_WHEELS_TEST_REQUIRE"] = ""
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    no_bytecode = "tests/unit/test_test_command.py::test_the_suites_processes_write_no_bytecode"
    r = subprocess.run(["bash", str(REPO / "tools/ci/test.sh"), test, no_bytecode, "-q", "-rs"], capture_output=True,
                       text=True, env=env, cwd=REPO, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert any(l.startswith("SKIPPED") and "dockerd did not start" in l and "broken on purpose" in l
               for l in r.stdout.splitlines()), r.stdout[-3000:]
    # ... and the proof table shows the claim SKIPPED with that reason.
    assert any(l.startswith("engines ") and " SKIPPED " in l and "dockerd did not start" in l
               for l in r.stdout.splitlines()), r.stdout[-3000:]


def test_podman_works_again_in_a_second_run_with_the_same_cache(tmp_path):
    """podman's database keeps the runroot its storage was made with; each run of the test command must give
    the same one (and storage made with another, by an older test.sh, is made again), or a second `make test`
    finds podman refusing and its tests skip."""
    sudo = debian.as_root()  # as root, or through password-free sudo as the test command runs podman there
    if sudo is None or not shutil.which("podman") or not shutil.which("runc"):
        unavailable("engines", "needs root (or password-free sudo), podman and runc (the test command installs them)")
    cache = tmp_path / "cache"
    # storage from an older test.sh: another runroot
    import tempfile
    old_run = tempfile.mkdtemp(prefix="oeqt-")  # podman takes a runroot of 50 characters at most
    r0 = subprocess.run([*sudo, "podman", "--root", str(cache / "podman" / "root"), "--runroot", old_run,
                    "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file", "info"],
                   capture_output=True, text=True)
    assert r0.returncode == 0, r0.stderr
    script = (f"source {ENGINE_SH}; ENGINE_SUDO=({' '.join(sudo)}); ENGINE_CACHE={cache}; ENGINE_RUN=$(mktemp -d); "
              "_podman_up; echo PODMAN=$OEQ_WHEELS_TEST_PODMAN; rm -rf $ENGINE_RUN")
    for _run in range(2):
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
        assert "test.sh: podman for the container-runner tests" in r.stderr, r.stderr
        assert "PODMAN=/" in r.stdout
    subprocess.run([*sudo, "rm", "-rf", old_run, str(cache)], capture_output=True)
