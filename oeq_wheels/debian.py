"""Debian packages a command needs and installs for itself: a cross toolchain, qemu, debootstrap, Debian's keys.

A fresh Debian or Ubuntu machine lacks them; asking the user to install each by hand, one failure at a
time, is what this spares. It runs as root, or through `sudo -n` where that needs no password (CI
runners); otherwise the caller gets the reason, to print with the fix.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import proc
from .progress import say

# Debian's archive signing keys (the debian-archive-keyring package): the toolchain's trust root. The archive's
# InRelease is signed with them, and it names the sha256 of the index that names each pinned .deb's.
ARCHIVE_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


def as_root() -> list[str] | None:
    """The prefix that runs a command as root here: none for root, `sudo -n` where it needs no password."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and proc.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def _present(program: str) -> bool:
    """A program on PATH, or a file named by its absolute path (a keyring)."""
    return Path(program).is_file() if os.path.isabs(program) else shutil.which(program) is not None


def ensure(package: str, program: str) -> str | None:
    """Make `program` (a command, or a file by absolute path) available, installing Debian's `package` if it is
    missing; None when done, else why not."""
    if _present(program):
        return None
    root = as_root()
    if root is None:
        return f"{program} is not installed and installing {package} needs root"
    if not shutil.which("apt-get"):
        return f"{program} is not installed and this system has no apt-get"
    say(f"oeq-wheels: installing {package} (apt-get)")
    res = None
    for cmd in (["apt-get", "install", "-y", "-qq", package], ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", package]):
        res = proc.run([*root, "env", "DEBIAN_FRONTEND=noninteractive", *cmd], capture_output=True, text=True)
        if res.returncode == 0 and cmd[1] == "install" and _present(program):
            return None
    return f"apt-get install {package} failed: {(res.stderr or res.stdout).strip()[-300:]}"
