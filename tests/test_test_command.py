"""README's test command on a machine without bubblewrap: it installs it (root, apt) or stops in one line."""
import os
import shutil
import subprocess

from conftest import REPO

TEST_SH = str(REPO / "tools" / "ci" / "test.sh")


def bare_path(tmp_path, uid: int, apt_log=None):
    """A PATH with a shell and coreutils but no bwrap; `id -u` says uid; apt-get only records its call."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "env", "dirname", "cat"):
        os.symlink(shutil.which(tool), bin_ / tool)
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if apt_log:
        (bin_ / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {apt_log}\nexit 1\n')
    for f in bin_.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return str(bin_)


def test_without_bubblewrap_and_not_root_it_stops_in_one_line(tmp_path):
    r = subprocess.run([TEST_SH], env={"PATH": bare_path(tmp_path, 1000)}, capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "test.sh: bubblewrap is missing; install it (e.g. sudo apt-get install bubblewrap) and run again"]


def test_without_bubblewrap_as_root_it_installs_it_with_apt(tmp_path):
    log = tmp_path / "apt.log"
    r = subprocess.run([TEST_SH], env={"PATH": bare_path(tmp_path, 0, log)}, capture_output=True, text=True)
    assert "installing bubblewrap" in r.stderr
    assert "install -y -qq bubblewrap" in log.read_text()
    assert r.returncode != 0  # this fake apt-get installs nothing, so the command must not go on as if it had
