"""Another architecture's CPython on this host, under user-mode emulation: how an aarch64 wheel is loaded here.

There is no aarch64 machine to test on. Debian's arm64 CPythons are the next best interpreters (3.11 from
Debian 12, 3.13 from Debian 13; pins: emulated_pythons): debootstrap's first stage (--foreign) downloads and
unpacks the base system without running anything of the target, and every package it fetched (the
CPython among them) is unpacked the same way. qemu-user-static runs
that interpreter with the root file system as its library prefix (-L), so no binfmt_misc registration,
chroot or container is needed. qemu emulates pointer authentication slowly and nothing here needs it:
`-cpu max,pauth=off`.

This host's own architecture has CPythons no installer here has (Debian testing's 3.14 and 3.15; pins:
debian_pythons): the same kind of root file system, with the CPython's venv module, run natively through
bubblewrap with the root's /usr, /etc and /var in place of the host's (its glibc is newer than this host's) and the
host's other top-level directories (the work folders, the caches, the stub driver) at their own paths.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from .. import buildroot, debian, proc
from ..errors import EmulationError
from ..files import locked, sweep_stale, temp_prefix
from ..pins import Arch

MIRROR = "http://deb.debian.org/debian"
QEMU_CPU = "max,pauth=off"
# qemu-user (7.2) passes this x86_64 host's /proc/cpuinfo and CPU sysfs through, which torch 2.12 and newer
# parse as an aarch64 CPU's (pytorch/cpuinfo, oneDNN's MIDR_EL1 probe) and crash on. Paths under the -L
# prefix come first, so the root file system describes an aarch64 CPU instead: Neoverse V2, Grace's core.
CPU_MIDR = "0x00000000410fd4f0"
CPU_INFO = ("processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics "
            "fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 asimddp sha512 asimdfhm dit uscat ilrcpc flagm "
            "ssbs sb dcpodp flagm2 frint i8mm bf16 rng bti\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
            "CPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n\n")


def native(arch: Arch) -> bool:
    """This host's own architecture: its roots run through bubblewrap, not qemu."""
    return not arch.qemu


def packages(python: str, arch: Arch | None = None) -> tuple[str, ...]:
    """What the root file system needs beyond Debian's minimal base: the CPython and the C++ runtime torch uses;
    natively, the CPython's venv module too (its pip makes the installs) and the CA certificates' package."""
    extra = (f"python{python}-venv", "ca-certificates") if arch is not None and native(arch) else ()
    return (f"python{python}", "libstdc++6", "libgomp1", *extra)


def suite(arch: Arch, python: str) -> str:
    """The Debian release whose CPython X.Y runs here (pins: emulated_pythons, or debian_pythons natively)."""
    known = {v: (d["suite"] if isinstance(d, dict) else d) for v, d in
             (arch.debian_pythons if native(arch) else arch.emulated_pythons).items()}
    if python not in known:
        what, key = ("Debian", "debian_pythons") if native(arch) else ("emulated", "emulated_pythons")
        raise EmulationError(f"no {what} CPython {python} for {arch.name}; pins.toml's [arch.{arch.name}] "
                             f"{key}: {', '.join(known) or 'none'}")
    return known[python]


def ensure_tools(*tools: tuple[str, str]) -> None:
    """(Debian package, program) pairs, installed (as root, with apt-get) where missing."""
    for package, program in tools:
        why = debian.ensure(package, program)
        if why:
            raise EmulationError(f"cannot run {program} here: {why}; install Debian's {package} "
                                 f"(apt-get install {package})")


def rootfs(arch: Arch, python: str, cache: Path) -> Path:
    """A Debian root file system of arch holding its CPython X.Y, made once and kept in the cache (~260 MB)."""
    if not arch.debian_arch:
        raise EmulationError(f"pins.toml's [arch.{arch.name}] names no debian_arch: no emulated test for it")
    release = suite(arch, python)
    if not native(arch):
        ensure_tools(("qemu-user-static", arch.qemu))
    cpus = os.cpu_count() or 1
    key = hashlib.sha256(" ".join([arch.debian_arch, release, MIRROR, *packages(python, arch), CPU_MIDR, str(cpus),
                                   *_host_files(arch)]).encode())
    name = f"rootfs-{arch.debian_arch}-{release}-{key.hexdigest()[:12]}"
    root = cache / "emulated" / name
    if (root / ".complete").is_file():
        return root
    sudo = debian.as_root()
    if sudo is None:
        raise EmulationError(f"making the Debian {arch.debian_arch} root file system needs root (debootstrap); run "
                             f"this once as root (it is kept in {root.parent}), or where `sudo -n` works")
    ensure_tools(("debootstrap", "debootstrap"))  # only to make one
    with locked(root):  # another process (a test worker) making the same one: wait for it, then use it
        return root if (root / ".complete").is_file() else _make_rootfs(arch, python, release, cpus, root, sudo)


def _make_rootfs(arch: Arch, python: str, release: str, cpus: int, root: Path, sudo: list[str]) -> Path:
    name = root.name
    sweep_stale(root.parent)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=temp_prefix(name)))
    try:
        res = proc.run([*sudo, "debootstrap", f"--arch={arch.debian_arch}", "--foreign", "--variant=minbase",
                        f"--include={','.join(packages(python, arch))}", release, str(tmp), MIRROR,
                        *_script(release)],
                       capture_output=True, text=True)
        if sudo:  # made through sudo: hand the tree back to this user, who unpacks the rest and later removes it
            proc.run([*sudo, "chown", "-R", f"{os.getuid()}:{os.getgid()}", str(tmp)], capture_output=True)
        if res.returncode != 0:
            raise EmulationError(f"debootstrap of Debian {release} {arch.debian_arch} failed "
                                 f"(exit {res.returncode}): {(res.stderr or res.stdout).strip()[-400:]}")
        # The first stage unpacks only the essential packages; the others wait in the archive for a second
        # stage that would run target code. Unpacking them is all the interpreter needs (nothing is configured).
        # `dpkg-deb -x` would replace merged /usr's symlinks (lib -> usr/lib, where qemu finds the aarch64
        # loader) with directories; tar keeps them.
        debs = sorted((tmp / "var" / "cache" / "apt" / "archives").glob("*.deb"))
        # Test infrastructure, not a build input: what it was made of is written down, not pinned.
        (tmp / ".packages").write_text("".join(f"{d.name}\n" for d in debs))
        for deb in debs:
            res = proc.run(["sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"',
                            "unpack", str(deb), str(tmp)], capture_output=True, text=True)
            if res.returncode != 0:
                raise EmulationError(f"unpacking {deb.name} failed: {res.stderr.strip()[-300:]}")
        if not (tmp / "lib").is_symlink():
            raise EmulationError(f"the {arch.debian_arch} root file system lost its merged /usr (lib is not a symlink)")
        shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        if native(arch):
            _host_network(tmp)
            _ldconfig(tmp)
        else:
            _describe_cpu(tmp, cpus)
        if not (tmp / "usr" / "bin" / f"python{python}").is_file():
            raise EmulationError(f"Debian {release} {arch.debian_arch} has no python{python}")
        (tmp / ".complete").write_text("")
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _script(release: str) -> list[str]:
    """debootstrap's script for a release it predates (Debian 12's knows no forky): testing's, which is sid's."""
    scripts = Path("/usr/share/debootstrap/scripts")
    return [] if (scripts / release).exists() or not (scripts / "sid").exists() else [str(scripts / "sid")]


def command(arch: Arch, python: str, root: Path) -> list[str]:
    """The command that runs root's CPython X.Y of arch on this host."""
    if native(arch):
        return [*sandbox(root), f"/usr/bin/python{python}"]
    return [arch.qemu, "-cpu", QEMU_CPU, "-L", str(root), str(root / "usr" / "bin" / f"python{python}")]


def sandbox(root: Path) -> list[str]:
    """bubblewrap with root's system in place of this host's and the host's other top-level folders at their own
    paths (as the build root's compilers run: oeq_wheels/buildroot.py); the network is the host's."""
    return [buildroot.bwrap(), *buildroot.system_args(root), *buildroot.host_binds()]


# What the native root takes from this host: how it reaches the network (names, and the CA bundle, e.g. a
# TLS-terminating proxy's, which pip inside must trust as this host does).
HOST_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl/certs/ca-certificates.crt")


def _host_files(arch: Arch) -> list[str]:
    if not native(arch):
        return []
    return ["ldconfig", *(hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in HOST_NETWORK if Path(f).is_file())]


def _ldconfig(root: Path) -> None:
    """The root's own ldconfig over it, as a configured Debian system has its /etc/ld.so.cache: without one,
    ctypes.util.find_library falls back to running gcc (torch 2.14.1 on CPython 3.14 asks it for libdl)."""
    res = proc.run([buildroot.bwrap(), "--bind", str(root), "/", "/usr/sbin/ldconfig"], capture_output=True, text=True)
    if res.returncode != 0 or not (root / "etc" / "ld.so.cache").is_file():
        raise EmulationError(f"ldconfig in the Debian root failed: {(res.stderr or res.stdout).strip()[-300:]}")


def _host_network(root: Path) -> None:
    for f in HOST_NETWORK:
        if Path(f).is_file():
            dest = root / f.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink() or dest.exists():
                dest.unlink()
            shutil.copyfile(f, dest)


def venv(arch: Arch, python: str, root: Path, dest: Path) -> tuple[list[str], Path]:
    """A virtual environment of root's CPython X.Y at dest, made by hand (the venv module would run target code):
    pyvenv.cfg naming root's interpreter and a link to it. Run through qemu, its sys.prefix is dest, so a program
    that looks for files under sys.prefix (FastMACE's nvidia/cu13) finds what an installer put in its
    site-packages. Returns (the command that runs its interpreter, its site-packages)."""
    interpreter = root / "usr" / "bin" / f"python{python}"
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    (dest / "pyvenv.cfg").write_text(f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                                     f"version = {python}\n")
    (dest / "bin" / interpreter.name).symlink_to(interpreter)
    site = dest / "lib" / f"python{python}" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    return [arch.qemu, "-cpu", QEMU_CPU, "-L", str(root), str(dest / "bin" / interpreter.name)], site


def _describe_cpu(root: Path, cpus: int) -> None:
    """An aarch64 /proc/cpuinfo and MIDR_EL1 per CPU under root (what qemu-user finds before the host's)."""
    proc = root / "proc"
    if proc.is_symlink() or proc.is_file():
        proc.unlink()
    proc.mkdir(exist_ok=True)
    (proc / "cpuinfo").write_text("".join(CPU_INFO.format(n=n) for n in range(cpus)))
    for n in range(cpus):
        ident = root / "sys" / "devices" / "system" / "cpu" / f"cpu{n}" / "regs" / "identification"
        ident.mkdir(parents=True, exist_ok=True)
        (ident / "midr_el1").write_text(CPU_MIDR + "\n")
