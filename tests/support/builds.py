"""A build run watched from outside (support.cli.start_cli) and what it leaves: shared by the interrupt tests and the
suite's independent second build (tests/integration/conftest.py resumed_build); and the wheel of one line in OUTDIR."""
import re
import subprocess
import time
from pathlib import Path

import pytest

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


def oeq_wheel_of(outdir: Path, line: str, arch: str = "x86_64", tag: str = "*") -> Path:
    """The one binary openequivariance wheel of an OEq line (its name: pins.oeq_binary.name), architecture and Python tag (cp311-cp311;
    any, where outdir holds one CPython's build) in outdir's OUTDIR-extra."""
    from oeq_wheels import pins
    from oeq_wheels.output import extra_dir
    version = pins.load().oeq_line(line, arch).version(pins.load().oeq.version)
    (whl,) = extra_dir(outdir).glob(f"openequivariance-{version}-{tag}-*_{arch}.whl")
    return whl
