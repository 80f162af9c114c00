"""Free-threaded CPythons (PEP 703), built here from a pinned source tarball.

No archive that this machine and GitHub's runners both reach ships one: Debian's and Ubuntu's python3.X packages
are GIL builds, and python.org and python-build-standalone are out of reach. So each [freethreaded."X.Yt"] of
pins.toml is CPython's release tarball (fetched from its url, checked against its sha256), configured with
--disable-gil and installed into the cache, keyed by that sha256. A build needs only its headers (configure and
`make inclinstall`: about 30 s); the tests need the interpreter too (`make`: minutes, once per cache). What
configure writes into pyconfig.h depends on the host, so the headers are held to [toolchain.pythons] like every
other CPython's (build.pythons_with_headers).
"""
from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

from .. import proc
from ..errors import FreeThreadedError
from ..files import locked, temp_prefix
from ..pins import FreeThreaded
from . import fetch
from .pythons import Interpreter

# configure's and make's environment: the host's compiler with no flags of the caller's (a build's CC may be a
# sentinel or a cross compiler).
DROP = ("CC", "CXX", "CFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH", "LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")


def _root(ft: FreeThreaded, cache: Path) -> Path:
    return cache / "cpython" / f"{ft.source.version}t-{ft.source.sha256[:16]}"


def _run(cmd: list[str], cwd: Path, what: str, log: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    res = proc.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n{res.stdout}{res.stderr}")
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
        raise FreeThreadedError(f"free-threaded CPython: {what} failed (exit {res.returncode}): {' | '.join(tail)} "
                                f"(log: {log}); CPython's build needs a C compiler, make, and the -dev packages of "
                                "zlib, libffi and OpenSSL")


def _configured(ft: FreeThreaded, cache: Path, log=lambda s: None) -> Path:
    """The source tree, configured for a prefix inside the cache (the caller holds the lock)."""
    root = _root(ft, cache)
    src = root / "src"
    if (src / "pyconfig.h").is_file() and (src / "Makefile").is_file():
        return src
    tarball = fetch.ensure([ft.source], cache, log)[ft.source.file]
    shutil.rmtree(src, ignore_errors=True)
    tmp = root / temp_prefix("src")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"oeq-wheels: configuring free-threaded CPython {ft.source.version} (--disable-gil)")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
    top = next(p for p in tmp.iterdir() if p.is_dir())
    _run(["./configure", "--disable-gil", f"--prefix={root / 'prefix'}"], top, "configure", root / "build.log")
    os.rename(top, src)
    shutil.rmtree(tmp, ignore_errors=True)
    return src


def headers(ft: FreeThreaded, cache: Path, log=lambda s: None) -> Interpreter:
    """The CPython with its C headers installed (its interpreter may not be built: `executable` may not exist)."""
    root = _root(ft, cache)
    prefix, name = root / "prefix", f"python{ft.version}"
    with locked(root):
        if not (root / ".headers").is_file():
            src = _configured(ft, cache, log)
            _run(["make", "inclinstall"], src, "make inclinstall", root / "build.log")
            (root / ".headers").write_text(ft.source.sha256)
    return Interpreter(ft.version, ft.source.version, str(prefix / "bin" / name), str(prefix / "include" / name))


def interpreter(ft: FreeThreaded, cache: Path, log=lambda s: None) -> Interpreter:
    """The CPython built and installed (with pip, from its ensurepip): once per cache."""
    interp = headers(ft, cache, log)
    root = _root(ft, cache)
    with locked(root):
        if not (root / ".complete").is_file():
            log(f"oeq-wheels: building free-threaded CPython {ft.source.version} (once per cache; a few minutes)")
            src = _configured(ft, cache, log)
            _run(["make", f"-j{os.cpu_count() or 1}"], src, "make", root / "build.log")
            _run(["make", "install"], src, "make install", root / "build.log")
            probe = proc.run([interp.executable, "-c", "import sys; print(sys._is_gil_enabled())"],
                             capture_output=True, text=True)
            if probe.returncode != 0 or probe.stdout.strip() != "False":
                raise FreeThreadedError(f"the CPython built in {root} does not run without the GIL: "
                                        f"{(probe.stderr or probe.stdout).strip()[-300:]}")
            (root / ".complete").write_text(ft.source.sha256)
    return interp
