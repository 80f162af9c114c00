"""Debian packages a command needs and installs for itself (as root): a cross toolchain, qemu, debootstrap.

A fresh Debian or Ubuntu machine lacks them; asking the user to install each by hand, one failure at a
time, is what this spares. Without root or apt-get the caller gets the reason, to print with the fix.
"""
from __future__ import annotations

import os
import shutil

from . import proc
from .progress import say


def ensure(package: str, program: str) -> str | None:
    """Make `program` available, installing Debian's `package` if it is missing; None when done, else why not."""
    if shutil.which(program):
        return None
    if os.geteuid() != 0:
        return f"{program} is not installed and installing {package} needs root"
    if not shutil.which("apt-get"):
        return f"{program} is not installed and this system has no apt-get"
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    say(f"oeq-wheels: installing {package} (apt-get)")
    res = None
    for cmd in (["apt-get", "install", "-y", "-qq", package], ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", package]):
        res = proc.run(cmd, capture_output=True, text=True, env=quiet)
        if res.returncode == 0 and cmd[1] == "install" and shutil.which(program):
            return None
    return f"apt-get install {package} failed: {(res.stderr or res.stdout).strip()[-300:]}"
