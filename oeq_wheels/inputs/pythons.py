"""Find a CPython interpreter (with its headers) for each requested X.Y; never a fixed path.

Looked at, in order: manylinux images' /opt/python/cpXY-cpXY, pyenv's versions
directory, then python3.X on PATH. Free-threaded builds are skipped (a different ABI).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import BuildError, PythonNotFound
from ..files import sha256_file, temp_prefix
from ..pins import cp_tag, free_threaded

PROBE = (
    "import sys, sysconfig, json, os;"
    "inc = sysconfig.get_path('include', scheme='posix_prefix');"
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'full': sys.version.split()[0],"
    " 'impl': sys.implementation.name, 'include': inc,"
    " 'has_header': os.path.isfile(os.path.join(inc, 'Python.h')),"
    " 'gil_disabled': bool(sysconfig.get_config_var('Py_GIL_DISABLED'))}))"
)


@dataclass(frozen=True)
class Interpreter:
    version: str       # "3.12"
    full_version: str  # "3.12.1"
    executable: str
    include: str

    @property
    def cp_tag(self) -> str:
        return cp_tag(self.version)


def _pyenv_root() -> Path | None:
    root = os.environ.get("PYENV_ROOT")
    if root:
        return Path(root)
    exe = shutil.which("pyenv")
    if exe:
        try:
            return Path(proc.run([exe, "root"], capture_output=True, text=True, check=True).stdout.strip())
        except (OSError, subprocess.CalledProcessError):
            pass
    default = Path.home() / ".pyenv"
    return default if default.is_dir() else None


def _version_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in name.split("."))


def candidates(version: str, manylinux_root: str = "/opt/python") -> list[str]:
    tag = cp_tag(version)
    out = [f"{manylinux_root}/{tag}-{tag}/bin/python"]
    root = _pyenv_root()
    if root and (root / "versions").is_dir():
        names = [p.name for p in (root / "versions").iterdir()
                 if p.name.startswith(version + ".") and p.name[len(version) + 1:].isdigit()]
        out += [str(root / "versions" / n / "bin" / "python") for n in sorted(names, key=_version_key, reverse=True)]
    exe = shutil.which(f"python{version}")
    if exe:
        out.append(exe)
    return out


def probe(executable: str) -> dict | None:
    if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
        return None
    try:
        res = proc.run([executable, "-I", "-c", PROBE], capture_output=True, text=True, timeout=30)
        return json.loads(res.stdout) if res.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def find(version: str, manylinux_root: str = "/opt/python") -> Interpreter:
    seen = []
    for exe in candidates(version, manylinux_root):
        info = probe(exe)
        if info is None:
            continue
        seen.append(f"{info['version']} at {exe}")
        if (info["impl"] == "cpython" and info["version"] == version and info["has_header"]
                and not info["gil_disabled"]):
            return Interpreter(version, info["full"], exe, info["include"])
    raise PythonNotFound(version, seen)


def find_all(versions: list[str], manylinux_root: str = "/opt/python") -> dict[str, Interpreter]:
    """Interpreters for all versions, or one error naming every missing one and what was found."""
    found, missing = {}, []
    for v in versions:
        try:
            found[v] = find(v, manylinux_root)
        except PythonNotFound:
            missing.append(v)
    if missing:
        others = sorted({(i.version, i.executable) for i in discover_all(manylinux_root)})
        have = "; ".join(f"{v} ({exe})" for v, exe in others) or "none"
        raise PythonNotFound(
            f"no usable CPython {', '.join(missing)} (with headers, not free-threaded) found in "
            f"{manylinux_root}/cpXY-cpXY, pyenv versions or python3.X on PATH. Found: {have}. "
            "Install it (e.g. `pyenv install 3.X`) or build only the others with --python."
        )
    return found


def discover_all(manylinux_root: str = "/opt/python") -> list[Interpreter]:
    out = []
    for minor in range(8, 16):
        try:
            out.append(find(f"3.{minor}", manylinux_root))
        except PythonNotFound:
            pass
    return out


def as_installed(prefix: Path, keep: tuple[str, ...] = ()):
    """A copytree filter: a CPython as installed, without what was pip-installed into it (venvs bring their own;
    keep: the packages whose names start so stay), its test suite and GUI parts, or bytecode."""
    def ignore(directory, names):
        d = Path(directory)
        if d.name == "site-packages" and d.parent.parent == prefix / "lib":
            return [n for n in names if n != "README.txt" and not n.startswith(keep)]
        if d.name.startswith("python3.") and d.parent == prefix / "lib":
            return [n for n in names if n in ("test", "idlelib", "tkinter", "turtledemo")]
        return [n for n in names if n == "__pycache__"]
    return ignore


_DEFINE = re.compile(r"^#define\s+(\w+)\b.*$", re.M)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


_QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def abi_pyconfig(include: Path) -> bytes:
    """pyconfig.h as an extension reads it: its #define lines whose names Python.h or a header it includes names,
    sorted. The rest (which libraries and functions configure found on the build host: curses, readline) no
    extension's compile sees."""
    include = Path(include)
    used: set[str] = set()
    todo, seen = [include / "Python.h"], set()
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file() or path.name == "pyconfig.h":
            continue
        seen.add(path)
        text = path.read_text(errors="replace")
        used |= set(_IDENT.findall(text))
        todo += [d / name for name in _QUOTED.findall(text) for d in (path.parent, include)]
    text = (include / "pyconfig.h").read_text(errors="replace")
    return "\n".join(sorted(m.group(0).strip() for m in _DEFINE.finditer(text) if m.group(1) in used)).encode()


def headers_digest(include: Path, abi_only: bool = False) -> str:
    """What a CPython's C headers are: every file's relative name and sha256, in order. abi_only: pyconfig.h by what
    the other headers read of it (abi_pyconfig): for a CPython configured on the build host (inputs/freethreaded.py),
    whose pyconfig.h also says what that host's libraries are."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(include).rglob("*") if p.is_file()):
        rel = path.relative_to(include).as_posix()
        sha = hashlib.sha256(abi_pyconfig(include)).hexdigest() if abi_only and rel == "pyconfig.h" \
            else sha256_file(path)
        h.update(f"{rel}\0{sha}\n".encode())
    return h.hexdigest()


def headers(interp: Interpreter, cache: Path) -> tuple[Path, str]:
    """(the interpreter's C headers as a build input, their digest): copied once into the cache, named by content,
    where the pinned build root sees them as well (a system CPython's lie under the host's /usr, which the root
    replaces). The compiler's prefix map names them python3.X, so where they lie does not reach the bytes."""
    abi_only = free_threaded(interp.version)  # configured here: pyconfig.h also names this host's libraries
    digest = headers_digest(Path(interp.include), abi_only)
    # named as an installed CPython names them (include/python3.X), in a folder named by content
    target = cache / "extract" / f"cpython-{interp.full_version}-headers-{digest[:16]}" / f"python{interp.version}"
    if not (target / ".complete").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(temp_prefix(target.name) + "tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(interp.include, tmp, symlinks=False)
        # Debian's pyconfig.h picks the architecture's own from <TRIPLET/python3.X/pyconfig.h> in /usr/include.
        for rel in re.findall(r"#\s*include\s*<([\w.-]+/python3\.\d+/pyconfig\.h)>", (tmp / "pyconfig.h").read_text()):
            if (Path("/usr/include") / rel).is_file():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path("/usr/include") / rel, tmp / rel)
        if headers_digest(Path(interp.include), abi_only) != digest:
            raise BuildError(f"CPython {interp.full_version}'s headers ({interp.include}) changed while copied")
        (tmp / ".complete").write_text(digest)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    return target.resolve(), digest
