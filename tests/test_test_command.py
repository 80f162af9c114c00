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
