"""Another architecture's CPython on this host, under user-mode emulation: how an aarch64 wheel is loaded here.

There is no aarch64 machine to test on. Debian's arm64 CPython is the next best interpreter: debootstrap's
first stage (--foreign) downloads and unpacks the base system without running anything of the target,
and every package it fetched (python3.11 among them) is unpacked the same way. qemu-user-static runs
that interpreter with the root file system as its library prefix (-L), so no binfmt_misc registration,
chroot or container is needed. qemu emulates pointer authentication slowly and nothing here needs it:
`-cpu max,pauth=off`.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from .. import debian, proc
from ..errors import OeqWheelsError
from ..files import sweep_stale, temp_prefix
from ..pins import Arch

MIRROR = "http://deb.debian.org/debian"
QEMU_CPU = "max,pauth=off"


class EmulationError(OeqWheelsError):
    pass


def packages(arch: Arch) -> tuple[str, ...]:
    """What the root file system needs beyond Debian's minimal base: the CPython and the C++ runtime torch uses."""
    return (f"python{arch.debian_python}", "libstdc++6", "libgomp1")


def ensure_tools(arch: Arch) -> None:
    """qemu's emulator of arch and debootstrap, installed (as root, with apt-get) where missing."""
    for package, program in (("qemu-user-static", arch.qemu), ("debootstrap", "debootstrap")):
        why = debian.ensure(package, program)
        if why:
            raise EmulationError(f"cannot run {arch.name} code here: {why}; install Debian's {package} "
                                 f"(apt-get install {package})")


def rootfs(arch: Arch, cache: Path) -> Path:
    """A Debian root file system of arch holding its CPython, made once and kept in the cache (~260 MB)."""
    if not arch.debian_arch:
        raise EmulationError(f"pins.toml's [arch.{arch.name}] names no debian_arch: no emulated test for it")
    ensure_tools(arch)
    key = hashlib.sha256(" ".join([arch.debian_arch, arch.debian_suite, MIRROR, *packages(arch)]).encode())
    name = f"rootfs-{arch.debian_arch}-{arch.debian_suite}-{key.hexdigest()[:12]}"
    root = cache / "emulated" / name
    if (root / ".complete").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(root.parent)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=temp_prefix(name)))
    try:
        res = proc.run(["debootstrap", f"--arch={arch.debian_arch}", "--foreign", "--variant=minbase",
                        f"--include={','.join(packages(arch))}", arch.debian_suite, str(tmp), MIRROR],
                       capture_output=True, text=True)
        if res.returncode != 0:
            raise EmulationError(f"debootstrap of Debian {arch.debian_suite} {arch.debian_arch} failed "
                                 f"(exit {res.returncode}): {(res.stderr or res.stdout).strip()[-400:]}")
        # The first stage unpacks only the essential packages; the others wait in the archive for a second
        # stage that would run target code. Unpacking them is all the interpreter needs (nothing is configured).
        # `dpkg-deb -x` would replace merged /usr's symlinks (lib -> usr/lib, where qemu finds the aarch64
        # loader) with directories; tar keeps them.
        for deb in sorted((tmp / "var" / "cache" / "apt" / "archives").glob("*.deb")):
            res = proc.run(["sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"',
                            "unpack", str(deb), str(tmp)], capture_output=True, text=True)
            if res.returncode != 0:
                raise EmulationError(f"unpacking {deb.name} failed: {res.stderr.strip()[-300:]}")
        if not (tmp / "lib").is_symlink():
            raise EmulationError(f"the {arch.debian_arch} root file system lost its merged /usr (lib is not a symlink)")
        shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        if not (tmp / "usr" / "bin" / f"python{arch.debian_python}").is_file():
            raise EmulationError(f"Debian {arch.debian_suite} {arch.debian_arch} has no python{arch.debian_python}")
        (tmp / ".complete").write_text("")
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def python(arch: Arch, root: Path) -> list[str]:
    """The command that runs root's CPython of arch on this host."""
    return [arch.qemu, "-cpu", QEMU_CPU, "-L", str(root), str(root / "usr" / "bin" / f"python{arch.debian_python}")]
