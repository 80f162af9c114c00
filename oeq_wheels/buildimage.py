"""The container runner's image: the pinned toolchain as a Debian root that the engine imports.

The same packages as the build root (oeq_wheels/buildroot.py), installed as Debian installs them, so that a build in a
container (where bubblewrap cannot run) finds its own toolchain to be the pinned one (build.toolchain_maker checks it
with dpkg-query and `dpkg --verify`) and makes the released bytes:
- `debootstrap --variant=minbase` of pins.toml's Debian release from its archive, with what a build needs to run
  (BASE: the CA bundle, xz, the CPythons' shared libraries), the archive's signature checked against Debian's
  archive keyring (--keyring: never trusted on first use over http). These base packages are the suite's of the day
  (debootstrap takes no versions); the compilers, binutils and libc are the pinned .debs below, checked in the root;
- every pinned toolchain package from its .deb, fetched by its pinned sha256 and installed with dpkg in the root
  (whatever version the archive serves today), then checked in the root against the pins;
- this host's CPythons of the pinned versions, at their own prefixes (their libpython is found by an absolute
  RUNPATH) and at /opt/python/cpXY-cpXY as manylinux lays them out, without what was pip-installed into them;
- this host's CA bundle (the build inside downloads the pinned inputs, perhaps through a TLS-terminating proxy).
Its name, oeq-wheels/build-root:<key>, says what it holds; the root file system is cached by that key as a gzipped tar,
kept only to import it again into another engine. debootstrap and dpkg need root: root, or password-free sudo.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import proc
from . import buildroot, debian
from .inputs import fetch, pythons
from . import pins as pins_mod
from .errors import BuildImageError, PythonNotFound
from .files import locked, try_locked
from .progress import say

FORMAT = 2                      # of the image: a change here makes new images
REPOSITORY = "oeq-wheels/build-root"
# What a build needs to run beside the toolchain: bash, tar and coreutils come with minbase; the CPythons link these.
BASE = ("ca-certificates", "xz-utils", "libssl3", "libffi8", "libsqlite3-0", "libbz2-1.0", "liblzma5", "zlib1g",
        "libreadline8", "libncursesw6", "libgdbm6", "libuuid1")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def interpreters(pins: pins_mod.Pins) -> list[pythons.Interpreter]:
    """This host's CPythons of the versions pins.toml [toolchain.pythons] names (those it has)."""
    out = []
    for v in (v for v in pins.toolchain.pythons if not pins_mod.free_threaded(v)):  # the build makes those itself
        try:
            out.append(pythons.find(v))
        except PythonNotFound:
            say(f"oeq-wheels: NOTE: no CPython {v} here, so the build image has none (builds for it fail there)")
    return out


@functools.lru_cache(maxsize=None)  # key(), rootfs() and the ld.so.conf each want it: one process per CPython
def _prefix(python: str) -> str:
    return proc.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                    check=True).stdout.strip()


def key(pins: pins_mod.Pins, interps: list[pythons.Interpreter]) -> str:
    """What the image holds: the recipe, the toolchain root's key, the CPythons and their prefixes, the CA bundle."""
    tc = pins.toolchain
    found = [(i.version, i.full_version, _prefix(i.executable)) for i in interps]
    ca = hashlib.sha256(HOST_CA.read_bytes()).hexdigest() if HOST_CA.is_file() else None
    debs = tc.for_host(_machine())
    return hashlib.sha256(json.dumps([FORMAT, tc.debian, tc.archive, BASE, buildroot.key(debs), found, ca]
                                     ).encode()).hexdigest()[:16]


def _machine() -> str:
    return os.uname().machine


def tag(pins: pins_mod.Pins, interps: list[pythons.Interpreter]) -> str:
    return f"{REPOSITORY}:{key(pins, interps)}"


def _tar(cache: Path, name: str) -> Path:
    return cache / "build-image" / f"rootfs-{name}.tar.gz"


def rootfs(pins: pins_mod.Pins, cache: Path, interps: list[pythons.Interpreter]) -> Path:
    """The image's root file system as a gzipped tar, made once per key (~3 min: debootstrap, dpkg, gzip -1). The
    caller holds the key's lock (ensure), so no other run is writing this key's tar."""
    tc, name = pins.toolchain, key(pins, interps)
    out = _tar(cache, name)
    if out.is_file():
        return out
    for killed in out.parent.glob(out.name + ".*.part"):  # a killed run's: none is live while the lock is held
        killed.unlink(missing_ok=True)
    sudo = debian.as_root()
    if sudo is None:
        raise BuildImageError("making the build image needs root or password-free sudo (debootstrap, dpkg)")
    for package, program, needed in (("debootstrap", "debootstrap", ""),
                                     ("debian-archive-keyring", str(debian.ARCHIVE_KEYRING),
                                      " (Debian's archive keys: debootstrap checks the archive's signature with them)"),
                                     ("gpgv", "gpgv", " (debootstrap checks the archive's signature with it)")):
        why = debian.ensure(package, program)
        if why:
            raise BuildImageError(f"making the build image needs {package}{needed}: {why}; install {package} "
                                  f"(`apt-get install {package}`)")
    debs = tc.for_host(_machine())
    items = [pins_mod.Pinned(d.name, d.version, Path(d.file).name, d.sha256, url=tc.archive + d.file) for d in debs]
    files = fetch.ensure(items, cache, say)
    say(f"oeq-wheels: making the build image {REPOSITORY}:{name} (Debian {tc.debian}, {len(debs)} pinned toolchain "
        "packages; once per key)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="oeq-wheels-image-", dir=out.parent)
    try:
        root = Path(tmp) / "root"
        run = lambda *cmd: proc.run([*sudo, *cmd], capture_output=True, text=True)  # noqa: E731
        res = run("debootstrap", "--variant=minbase", f"--keyring={debian.ARCHIVE_KEYRING}",
                  f"--include={','.join(BASE)}", tc.debian, str(root), tc.archive)
        if res.returncode != 0:
            raise BuildImageError(f"debootstrap {tc.debian} from {tc.archive} failed: "
                                  f"{(res.stderr or res.stdout).strip().splitlines()[-1:]}")
        incoming = root / "tmp" / "oeq-wheels-debs"
        run("mkdir", "-p", str(incoming))
        run("chown", f"{os.getuid()}:{os.getgid()}", str(incoming), str(root / "opt"), str(root / "etc"),
            str(root / "etc" / "ssl" / "certs"))
        for d in debs:
            shutil.copyfile(files[Path(d.file).name], incoming / Path(d.file).name)
        res = run("chroot", str(root), "env", "DEBIAN_FRONTEND=noninteractive", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                  "sh", "-c", "dpkg -i /tmp/oeq-wheels-debs/*.deb")
        if res.returncode != 0:
            raise BuildImageError(f"installing the pinned toolchain in the image failed: "
                                  f"{(res.stderr or res.stdout).strip()[-300:]}")
        shutil.rmtree(incoming)
        for interp in interps:
            prefix = _prefix(interp.executable)  # kept at its own path: its libpython is found by an absolute RUNPATH
            dest = root / prefix.lstrip("/")
            run("mkdir", "-p", str(dest.parent))
            run("chown", f"{os.getuid()}:{os.getgid()}", str(dest.parent))
            shutil.copytree(prefix, dest, symlinks=True, ignore=pythons.as_installed(Path(prefix)))
            (root / "opt" / "python").mkdir(parents=True, exist_ok=True)
            os.symlink(prefix, root / "opt" / "python" / f"{interp.cp_tag}-{interp.cp_tag}")
        # A shared CPython (setup-python's on GitHub's runner) finds its libpython only on the loader's path there:
        # in the image, through ld.so.conf, as a system install would.
        conf = root / "etc" / "ld.so.conf.d"
        run("mkdir", "-p", str(conf))
        run("chown", f"{os.getuid()}:{os.getgid()}", str(conf))
        (conf / "oeq-wheels-cpythons.conf").write_text("".join(f"{_prefix(i.executable)}/lib\n" for i in interps))
        res = run("chroot", str(root), "/sbin/ldconfig")
        if res.returncode != 0:
            raise BuildImageError(f"ldconfig in the build image failed: {(res.stderr or res.stdout).strip()[-300:]}")
        differs = buildroot.host_difference(debs, inside=(*sudo, "chroot", str(root)))
        if differs:
            raise BuildImageError(f"the build image's toolchain is not the pinned one ({differs})")
        if HOST_CA.is_file():  # the root's own bundle is root's file: replaced (its folder is this user's), not written
            ca = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"
            ca.unlink(missing_ok=True)
            shutil.copyfile(HOST_CA, ca)
            (root / "etc" / "pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        part = out.with_name(out.name + f".{os.getpid()}.part")
        with open(part, "wb") as f:  # as root where sudo: the root holds files only root may read (/etc/shadow)
            tar = subprocess.Popen([*sudo, "tar", "-C", str(root), "-cf", "-", "."], stdout=subprocess.PIPE)
            gz = subprocess.run(["gzip", "-1"], stdin=tar.stdout, stdout=f)  # a pipe from tar: not proc.run's
            if tar.wait() != 0 or gz.returncode != 0:
                part.unlink(missing_ok=True)
                raise BuildImageError("tar of the build image's root failed")
        os.replace(part, out)
    finally:
        proc.run([*sudo, "rm", "-rf", tmp], capture_output=True, cleanup=True)
    return out


def remove_stale(keep: Path) -> None:
    """The other keys' root file systems, and a killed run's .part of them, each only while no run holds its key's
    lock (a run making or importing one holds it: never another run's live .part or the tar it imports). The lock
    files stay: removing one that a run waits on would let a third run lock a new file of the same name."""
    bases = {e.name.split(".tar.gz", 1)[0] for e in keep.parent.glob("rootfs-*")}
    for base in sorted(bases):
        tar = keep.with_name(base + ".tar.gz")
        if tar == keep:
            continue
        with try_locked(tar) as free:
            if free:
                for f in [tar, *keep.parent.glob(tar.name + ".*.part")]:
                    f.unlink(missing_ok=True)


def ensure(client: str, pins: pins_mod.Pins, cache: Path, env: dict | None = None) -> str:
    """The build image in the engine of `client` (docker, podman, a wrapper): made and imported once per key. Runs
    at once take turns per key (the second waits, naming the first, then finds it made); the root file systems of
    other keys are removed only when no run uses them."""
    interps = interpreters(pins)
    name = tag(pins, interps)
    inspect = lambda: proc.run([client, "image", "inspect", name], capture_output=True,  # noqa: E731
                               env=env).returncode == 0
    if inspect():
        return name
    tar = _tar(cache, key(pins, interps))
    with locked(tar, holder=f"pid {os.getpid()}, making or importing {name}",
                waiting=lambda who: say(f"oeq-wheels: another run is making the build image {name} ({who}); "
                                        "waiting for it")):
        if inspect():  # the run waited for imported it into this engine
            return name
        rootfs(pins, cache, interps)
        with open(tar, "rb") as f:
            res = proc.run([client, "import", "-", name], stdin=f, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise BuildImageError(f"{client} import of the build image failed: "
                                  f"{(res.stderr or res.stdout).strip()[-200:]}")
    remove_stale(tar)
    return name
