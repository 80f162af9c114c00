"""Where a build runs: on this host, or in the pinned manylinux_2_28 container.

The CLI parses every option once; the container runner (run_container.sh, thin glue
around the engine) receives OUTDIR first and the options in canonical form, and the
build inside the container is this same CLI with --runner host.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .errors import UsageError
from .progress import say

RUN_CONTAINER = Path(__file__).resolve().parent.parent / "tools" / "release" / "oeq_wheels" / "run_container.sh"


def engine() -> str:
    """The container client: docker, or DOCKER=podman / docker.exe / a stand-in."""
    return os.environ.get("DOCKER", "docker")


def _engine_answers() -> bool:
    client = engine()
    if not shutil.which(client):
        return False
    return subprocess.run([client, "info"], capture_output=True).returncode == 0


def choose(runner: str) -> str:
    """'host' or 'docker' for --runner auto|host|docker."""
    if runner == "host":
        return "host"
    if _engine_answers():
        return "docker"
    if runner == "auto":
        say(f"oeq-wheels: no container engine answers '{engine()} info'; building on this host (--runner host)")
        return "host"
    raise UsageError(f"--runner docker, but '{engine()} info' fails: no working container engine. Start Docker "
                     "(or set DOCKER=podman, DOCKER=docker.exe), or use --runner host")


def container_args(outdir: Path, pythons: list[str] | None, matrix: str | None, force: bool,
                   jobs: int | None) -> list[str]:
    """OUTDIR first, then the build options in canonical form."""
    args = [str(outdir)]
    if pythons is not None:
        args += ["--python", ",".join(pythons)]
    if matrix:
        args += ["--matrix", matrix]
    if force:
        args.append("--force")
    if jobs:
        args += ["--jobs", str(jobs)]
    return args


def exec_container(args: list[str]):
    """Hand the process over to the container runner (it handles its own signals and cleanup)."""
    if not RUN_CONTAINER.is_file():
        raise UsageError(f"the container runner needs a checkout of oeq-wheels ({RUN_CONTAINER} is missing); "
                         "run from a clone, or use --runner host")
    os.execv(str(RUN_CONTAINER), [str(RUN_CONTAINER), *args])
