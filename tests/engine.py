"""The container tests' image where the pinned one cannot be pulled: a manylinux-shaped Debian 12.

The pinned quay.io/pypa/manylinux_2_28_x86_64 is used wherever it can be had (CI's test.yml pulls
it). Elsewhere (no registry but PyPI and Debian's) this image stands in: `debootstrap
--variant=minbase` of Debian 12 with g++, binutils, make, git, tar and bash, and this machine's
CPythons at /opt/python/cpXY-cpXY, as manylinux images lay them out. Its compilers are the packages pins.toml
[toolchain] pins (the archive serves those versions), so the build inside uses them as they are and its wheels must
equal the host runner's byte for byte. It trusts what this
host trusts (its CA bundle, e.g. a TLS-terminating proxy's, and pip is told so), since the build
inside downloads the pinned inputs. Its name, oeq-wheels-test/debian12-standin:<content key>, can
never be mistaken for the pinned image. The root file system is cached by that key.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from oeq_wheels import debian, pythons

SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = ("g++", "g++-aarch64-linux-gnu", "binutils", "make", "git", "tar", "bash", "ca-certificates", "xz-utils", "libssl3", "libffi8",
            "libsqlite3-0", "libbz2-1.0", "liblzma5", "zlib1g", "libreadline8", "libncursesw6", "libgdbm6", "libuuid1")
PYTHONS = ("3.11", "3.12")   # the build's (3.11) and the tools' (build_in_container.sh prefers cp312)
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
REPOSITORY = "oeq-wheels-test/debian12-standin"


def _interpreters() -> list[pythons.Interpreter]:
    return [pythons.find(v) for v in PYTHONS]


def key() -> str:
    """What the image holds: the recipe, the CPythons (and their install prefixes) and the host's CA bundle."""
    found = [(i.version, i.full_version, _prefix(i.executable)) for i in _interpreters()]
    ca = hashlib.sha256(HOST_CA.read_bytes()).hexdigest() if HOST_CA.is_file() else None
    return hashlib.sha256(json.dumps([SUITE, MIRROR, PACKAGES, found, ca]).encode()).hexdigest()[:16]


def tag() -> str:
    return f"{REPOSITORY}:{key()}"


def _prefix(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True,
                          check=True).stdout.strip()


def rootfs(cache: Path) -> Path:
    """The image's root file system as a gzipped tar, built once per key (debootstrap: ~1 min). Compressed: the
    engines' stores hold the image unpacked already, and the tar is kept only to import it again (900 MB as a
    plain tar, ~1/3 of it gzipped at level 1, which takes seconds); a tar of another key is removed."""
    out = cache / "test-image" / f"rootfs-{key()}.tar.gz"
    if out.is_file():
        return out
    if not shutil.which("debootstrap"):
        raise RuntimeError("debootstrap is missing (apt-get install debootstrap); the test command installs it as root")
    # As root, or through password-free sudo (GitHub's runner): debootstrap and what reads its root need root.
    sudo = debian.as_root()
    if sudo is None:
        raise RuntimeError("making the test image needs root or password-free sudo (debootstrap)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="oeq-wheels-rootfs-", dir=out.parent)
    try:
        root = Path(tmp) / "root"
        subprocess.run([*sudo, "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root),
                        MIRROR], check=True, capture_output=True)
        if sudo:  # the interpreters and the CA bundle go in as this user
            subprocess.run([*sudo, "chown", f"{os.getuid()}:{os.getgid()}", str(root / "opt"), str(root / "etc"),
                            str(root / "etc" / "ssl" / "certs")], check=True)
        for interp in _interpreters():
            prefix = _prefix(interp.executable)  # kept at its own path: its libpython is found by an absolute RUNPATH
            dest = root / prefix.lstrip("/")
            shutil.copytree(prefix, dest, symlinks=True, ignore=_skip_site_packages(prefix))
            cp = interp.cp_tag
            (root / "opt" / "python").mkdir(parents=True, exist_ok=True)
            os.symlink(prefix, root / "opt" / "python" / f"{cp}-{cp}")
        if HOST_CA.is_file():
            shutil.copyfile(HOST_CA, root / "etc" / "ssl" / "certs" / "ca-certificates.crt")
            (root / "etc" / "pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        part = out.with_name(out.name + f".{os.getpid()}.part")
        if sudo:  # files only root may read (/etc/shadow, /root): tar as root, into a file of this user's
            with open(part, "wb") as f:
                tar = subprocess.Popen([*sudo, "tar", "-C", str(root), "-cf", "-", "."], stdout=subprocess.PIPE)
                gz = subprocess.run(["gzip", "-1"], stdin=tar.stdout, stdout=f, check=True)
                if tar.wait() != 0 or gz.returncode != 0:
                    raise RuntimeError("tar of the test image's root failed")
        else:
            with tarfile.open(part, "w:gz", compresslevel=1) as tf:
                tf.add(root, arcname=".")
        os.replace(part, out)
    finally:
        subprocess.run([*(sudo or []), "rm", "-rf", tmp], capture_output=True)
    for old in out.parent.glob("rootfs-*"):
        if old != out and old.is_file():
            old.unlink()
    return out


def _skip_site_packages(prefix: str):
    """The interpreters as installed, without what was pip-installed into them (venvs bring their own)."""
    def ignore(directory, names):
        d = Path(directory)
        if d.name == "site-packages" and d.parent.parent == Path(prefix) / "lib":
            return [n for n in names if n != "README.txt"]
        if d.name.startswith("python3.") and d.parent == Path(prefix) / "lib":
            return [n for n in names if n in ("test", "idlelib", "tkinter", "turtledemo")]
        return [n for n in names if n == "__pycache__"]
    return ignore


def ensure(client: str, cache: Path, env: dict | None = None) -> str:
    """The test image in the engine of `client` (docker, or a podman wrapper): imported once per key."""
    name = tag()
    if subprocess.run([client, "image", "inspect", name], capture_output=True, env=env).returncode == 0:
        return name
    tar = rootfs(cache)
    with open(tar, "rb") as f:
        subprocess.run([client, "import", "-", name], stdin=f, check=True, capture_output=True, env=env)
    return name
