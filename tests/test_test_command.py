"""README's test command brings up a real container engine of its own (tools/ci/engine.sh), or says in one
line why it cannot, and the tests go on."""
import os
import shutil
import subprocess

from conftest import REPO

ENGINE_SH = str(REPO / "tools" / "ci" / "engine.sh")


def bare_path(tmp_path, uid: int, apt_log=None):
    """A PATH with a shell and coreutils but no engine; `id -u` says uid; apt-get only records its call."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "env", "dirname", "cat", "mktemp", "mkdir", "rm", "seq", "sleep"):
        os.symlink(shutil.which(tool), bin_ / tool)
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if apt_log:
        (bin_ / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {apt_log}\nexit 1\n')
    for f in bin_.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return str(bin_)


def engine_up(path):
    return subprocess.run(["bash", "-c", f"source {ENGINE_SH}; engine_up; echo rc=$?; echo TEST_ENGINE=$OEQ_WHEELS_TEST_ENGINE"],
                          env={"PATH": path, "HOME": "/nonexistent"}, capture_output=True, text=True)


def test_not_root_it_says_so_in_one_line_and_goes_on(tmp_path):
    r = engine_up(bare_path(tmp_path, 1000))
    assert r.stderr.strip().splitlines() == [
        "test.sh: no container engine of our own (needs root and apt-get); the real-engine tests skip"]
    assert "rc=0" in r.stdout and "TEST_ENGINE=\n" in r.stdout


def test_as_root_it_installs_debians_engines_with_apt(tmp_path):
    log = tmp_path / "apt.log"
    r = engine_up(bare_path(tmp_path, 0, log))
    assert "installing docker.io debootstrap podman runc (Debian packages)" in r.stderr
    assert "install -y -qq docker.io debootstrap podman runc" in log.read_text()
    # this fake apt-get installs nothing: one line, and the tests go on without an engine
    assert r.stderr.strip().splitlines()[-1] == \
        "test.sh: could not install docker.io debootstrap podman runc; the real-engine tests skip"
    assert "rc=0" in r.stdout and "TEST_ENGINE=\n" in r.stdout


def test_the_test_command_brings_up_and_stops_the_engine():
    text = (REPO / "tools" / "ci" / "test.sh").read_text()
    assert "engine_up || true" in text and "trap \"engine_down || true\" EXIT" in text


def test_podman_works_again_in_a_second_run_with_the_same_cache(tmp_path):
    """podman's database keeps the runroot its storage was made with; each run of the test command must give
    the same one (and storage made with another, by an older test.sh, is made again), or a second `make test`
    finds podman refusing and its tests skip."""
    import pytest
    if os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("runc"):
        pytest.skip("needs root, podman and runc (the test command installs them as root)")
    cache = tmp_path / "cache"
    # storage from an older test.sh: another runroot
    import tempfile
    old_run = tempfile.mkdtemp(prefix="oeqt-")  # podman takes a runroot of 50 characters at most
    r0 = subprocess.run(["podman", "--root", str(cache / "podman" / "root"), "--runroot", old_run,
                    "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file", "info"],
                   capture_output=True, text=True)
    assert r0.returncode == 0, r0.stderr
    script = (f"source {ENGINE_SH}; ENGINE_CACHE={cache}; ENGINE_RUN=$(mktemp -d); _podman_up; "
              "echo PODMAN=$OEQ_WHEELS_TEST_PODMAN; rm -rf $ENGINE_RUN")
    for _run in range(2):
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
        assert "test.sh: podman for the container-runner tests" in r.stderr, r.stderr
        assert "PODMAN=/" in r.stdout
    shutil.rmtree(old_run, ignore_errors=True)
