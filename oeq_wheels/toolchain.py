"""The compilers a build uses and what they make: the toolchain (the pinned build root's, a host's, a cross one),
the content-addressed object cache, and the two steps both products share (a shared library linked then
stripped; the -ffile-prefix-map flags that keep build-host paths out of the bytes)."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import buildroot, debian, proc
from .errors import CompileError, LinkError
from .files import sha256_file, sweep_stale, temp_prefix
from .progress import warn

# Headers put before every system directory where the target's glibc is older than the compiler's headers assume.
SHIM_DIR = Path(__file__).parent / "shim"


@dataclass
class Toolchain:
    cxx: str
    cc: str
    strip: str
    version: str  # first line of `cxx --version`
    release: str = ""  # GCC <__VERSION__>, e.g. "GCC 14.2.1 20250110 (Red Hat 14.2.1-11)" (post1's manifest)
    ar: str = "ar"
    root: str = ""     # the pinned build root's key, when its compilers are these (oeq_wheels/buildroot.py)
    _accepts: dict = field(default_factory=dict, repr=False, compare=False)

    def accepts(self, flag: str) -> bool:
        """Whether the C++ compiler takes flag (CMake's check_cxx_compiler_flag), asked once per flag."""
        if flag not in self._accepts:
            res = proc.run([*shlex.split(self.cxx), flag, "-Werror", "-fsyntax-only", "-x", "c++", "-"],
                           input="int main() { return 0; }\n", capture_output=True, text=True, timeout=60)
            self._accepts[flag] = res.returncode == 0
        return self._accepts[flag]

    @classmethod
    def detect(cls, env: dict | None = None) -> "Toolchain":
        env = os.environ if env is None else env
        cxx, cc, strip = env.get("CXX", "g++"), env.get("CC", "gcc"), env.get("STRIP", "strip")
        ar = env.get("AR", "ar")
        if not shlex.split(cxx):
            raise CompileError("CXX is set but empty; unset it (to use g++) or name a C++ compiler")
        try:
            out = proc.run([*shlex.split(cxx), "--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise CompileError(f"C++ compiler {cxx!r} does not run ({exc}); install g++ or set CXX") from exc
        # __VERSION__ is what the compiler says of itself; GCC's lacks the name, so it is added, as
        # Python's platform.python_compiler() does.
        macro = proc.run([*shlex.split(cxx), "-E", "-P", "-x", "c++", "-"], input="__clang__ __VERSION__\n",
                         capture_output=True, text=True, timeout=60)
        words = macro.stdout.strip().split(" ", 1) if macro.returncode == 0 else []
        release = ""
        if len(words) == 2:
            release = words[1].strip('"') if words[0] != "__clang__" else "GCC " + words[1].strip('"')
        return cls(cxx, cc, strip, out.splitlines()[0].strip(), release or out.splitlines()[0].strip(), ar)


def host_arch() -> str:
    """This machine's architecture, as pins.toml's [arch.NAME] names it."""
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())


def cross_toolchain(arch) -> "Toolchain":
    """The compilers for arch (a pins.Arch) on this host: the native toolchain (CXX/CC/STRIP/AR, or g++) on a
    host of that architecture, else Debian's cross toolchain, installed with apt-get when running as root.

    Raises CompileError with the one command that fixes it when neither is there.
    """
    if arch.name == host_arch():
        return Toolchain.detect()
    tools = {k: arch.cross_prefix + v for k, v in (("CXX", "g++"), ("CC", "gcc"), ("STRIP", "strip"), ("AR", "ar"))}
    if not all(shutil.which(v) for v in tools.values()):
        why = debian.ensure(arch.cross_package, tools["CXX"])
        if why:
            raise CompileError(f"no {arch.name} cross compiler ({tools['CXX']}): {why}; install it with "
                               f"`apt-get install {arch.cross_package}` (Debian, Ubuntu) or build only "
                               f"--arch {host_arch()}")
    return Toolchain.detect(tools)


def pinned_host_toolchain(arch) -> "Toolchain":
    """The compilers for arch where this host's own packages are the pinned ones: the packages' own files, by path
    (a different g++ first on PATH, or CXX, is not the pinned toolchain)."""
    prefix = "" if arch.name == host_arch() else arch.cross_prefix
    return Toolchain.detect({k: f"/usr/bin/{prefix}{tool}" for k, tool in
                             (("CXX", "g++"), ("CC", "gcc"), ("STRIP", "strip"), ("AR", "ar"))})


def root_toolchain(arch, root: Path, key: str, where: Path) -> "Toolchain":
    """The compilers for arch (a pins.Arch) in the pinned build root: its native ones for this host's architecture,
    else its cross compilers; each a script in `where` that runs it there (oeq_wheels/buildroot.py)."""
    prefix = "" if arch.name == host_arch() else arch.cross_prefix
    tools = buildroot.shims(root, [prefix + t for t in ("g++", "gcc", "strip", "ar")], where)
    buildroot.probe(tools[prefix + "g++"])
    found = Toolchain.detect({"CXX": tools[prefix + "g++"], "CC": tools[prefix + "gcc"],
                              "STRIP": tools[prefix + "strip"], "AR": tools[prefix + "ar"]})
    return dataclasses.replace(found, root=key)


class ObjectCache:
    """Content-addressed objects: the same source, flags and compiler never compile twice."""

    def __init__(self, root: Path, toolchain: Toolchain, jobs: int):
        self.root = root
        self.toolchain = toolchain
        self.slots = threading.Semaphore(max(1, jobs))
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        root.mkdir(parents=True, exist_ok=True)
        sweep_stale(root)

    def with_toolchain(self, toolchain: Toolchain) -> "ObjectCache":
        """The same cache and compiler slots, compiling with another toolchain (another architecture's)."""
        other = copy.copy(self)  # shallow: the slots, locks and root stay shared
        other.toolchain = toolchain
        return other

    def key(self, source: Path, flags: list[str]) -> str:
        h = hashlib.sha256()
        # The compiler counts by what it says it is and any options in CXX, not by its path.
        # The pinned root's compilers are keyed by the root too: a host compiler may say the same of itself.
        h.update(json.dumps([self.toolchain.version, shlex.split(self.toolchain.cxx)[1:], flags]
                            + ([self.toolchain.root] if self.toolchain.root else [])).encode())
        h.update(source.read_bytes())
        return h.hexdigest()

    def compile(self, source: Path, flags: list[str]) -> tuple[Path, bool]:
        """Return (object path, whether it came from the cache)."""
        key = self.key(source, flags)
        obj = self.root / f"{key}.o"
        with self._key_lock(key):  # Pythons built in parallel share json11: compile it once
            if self._intact(obj):
                return obj, True
            return self._compile(source, flags, key, obj), False

    @staticmethod
    def _sum_file(obj: Path) -> Path:
        return obj.with_name(obj.name + ".sha256")

    def _intact(self, obj: Path) -> bool:
        """A cached object is used only if it still has the sha256 recorded when it was compiled.

        Objects are small (a few MB in all), so each is hashed on every use. A damaged one
        is removed and compiled again, never linked.
        """
        if not obj.is_file():
            return False
        try:
            recorded = self._sum_file(obj).read_text().strip()
        except OSError:
            recorded = None  # from an older oeq-wheels
        if recorded is not None and sha256_file(obj) == recorded:
            return True
        if recorded is not None:
            warn(f"cached object {obj.name} does not match its recorded sha256; compiling it again")
        obj.unlink(missing_ok=True)
        return False

    def _key_lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _compile(self, source: Path, flags: list[str], key: str, obj: Path) -> Path:
        tmp = obj.with_name(temp_prefix(key) + f"{threading.get_ident()}.o")
        cmd = [*shlex.split(self.toolchain.cxx), "-c", str(source), "-o", str(tmp), *flags]
        try:
            with self.slots:
                res = proc.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
                raise CompileError(f"compiling {source.name} failed (exit {res.returncode}):\n{tail}")
            # The sum first, then the object: a reader that sees the object also sees its sum.
            sum_tmp = tmp.with_name(tmp.name + ".sha256")
            sum_tmp.write_text(sha256_file(tmp) + "\n")
            os.replace(sum_tmp, self._sum_file(obj))
            os.replace(tmp, obj)
        finally:
            tmp.unlink(missing_ok=True)
            tmp.with_name(tmp.name + ".sha256").unlink(missing_ok=True)
        return obj


def longest_first(prefix_map: dict[str, str]) -> list[tuple[str, str]]:
    """The build-host paths and their neutral names in one fixed order, the longest path first, for the compiler's
    -ffile-prefix-map flags and the flags the manifest records alike. No path may begin with another (GCC compares
    plain string prefixes, and applies the last flag that matches, the shorter path, where the manifest's
    replacement applies the first, the longer): such a path would get two names, so it is refused."""
    ordered = sorted(prefix_map.items(), key=lambda kv: -len(kv[0]))
    for i, (longer, _) in enumerate(ordered):
        shorter = next((o for o, _ in ordered[i + 1:] if longer.startswith(o)), None)
        if shorter:
            raise ValueError(f"prefix map: {longer} begins with {shorter}; the build's trees must have apart names")
    return ordered


def prefix_map_flags(prefix_map: dict[str, str]) -> list[str]:
    """-ffile-prefix-map for each build-host path (longest_first)."""
    return [f"-ffile-prefix-map={src}={dst}" for src, dst in longest_first(prefix_map)]


def link_stripped(toolchain: Toolchain, args: list[str], out: Path, what: str) -> Path:
    """A shared library linked from args (objects, libraries, options) into out.unstripped, then stripped of
    what no dynamic link needs (--strip-unneeded) into out."""
    linked = out.with_name(out.name + ".unstripped")
    try:
        res = proc.run([*shlex.split(toolchain.cxx), *args, "-o", str(linked)], capture_output=True, text=True)
        if res.returncode != 0:
            raise LinkError(f"{what} failed (exit {res.returncode}):\n{(res.stderr or res.stdout).strip()[-3000:]}")
        res = proc.run([*shlex.split(toolchain.strip), "--strip-unneeded", "-o", str(out), str(linked)],
                       capture_output=True, text=True)
        if res.returncode != 0:
            raise LinkError(f"stripping {out.name} failed: {(res.stderr or res.stdout).strip()}")
    finally:
        linked.unlink(missing_ok=True)
    return out
