"""Running `oeq-wheels build` as a separate process, as a user does, and looking at what it leaves: shared by the
interrupt tests and the suite's independent second build (conftest.resumed_build)."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "runtime"


def cli(args, cache: Path, tmpdir: Path, **env) -> subprocess.Popen:
    tmpdir.mkdir(exist_ok=True)
    e = dict(os.environ, PYTHONPATH=f"{REPO}:{RUNTIME}", OEQ_WHEELS_CACHE=str(cache), TMPDIR=str(tmpdir), **env)
    return subprocess.Popen([sys.executable, "-m", "oeq_wheels", *map(str, args)], env=e, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(p: subprocess.Popen, pattern: str, timeout: float = 300) -> list[str]:
    seen, t0 = [], time.monotonic()
    for line in p.stderr:
        seen.append(line)
        if re.search(pattern, line):
            return seen
        assert time.monotonic() - t0 < timeout, "".join(seen)
    pytest.fail(f"the run ended before {pattern!r}:\n{''.join(seen)}")


def finish(p: subprocess.Popen, seen: list[str]) -> tuple[int, str]:
    out, err = p.communicate(timeout=300)
    return p.returncode, "".join(seen) + err


def hidden(*dirs: Path) -> list[str]:
    return [str(f) for d in dirs if d.exists() for f in d.rglob(".*")]


def processes_of(tmpdir: Path, but: int | None = None) -> list[str]:
    """Every process started under the run's own TMPDIR (the CLI, compilers and their children), by command."""
    mark = f"TMPDIR={tmpdir}".encode()  # the run makes its own TMPDIR inside this one
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int(proc.name) != but and mark in (proc / "environ").read_bytes():
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


def private_cache(root: Path, cache: Path,
                  share: tuple[str, ...] = ("downloads", "members", "stubs", "extract", "buildroot")) -> Path:
    """Shares the downloads and unpacked inputs (or only `share` of them), not the objects: a build in it really
    compiles."""
    root.mkdir()
    for sub in share:
        (cache / sub).mkdir(parents=True, exist_ok=True)
        (root / sub).symlink_to(cache / sub)
    return root


def wheels_in(out: Path) -> set[str]:
    """The wheels in OUTDIR and OUTDIR-extra, by name."""
    from oeq_wheels.output import extra_dir
    return {p.name for d in (out, extra_dir(out)) if d.exists() for p in d.glob("*.whl")}
