"""Where a build runs: on this host, or in a container of the pinned toolchain (oeq_wheels/buildimage.py).

The container's image is the build image made from the pinned packages (the released bytes), or OEQ_WHEELS_IMAGE:
docker/IMAGE names quay.io's manylinux_2_28 for users who want it; its compilers are not the pinned ones, so a build
there needs --toolchain host and its wheels are not the released bytes.

The CLI parses every option once; the container runner (run_container.sh, thin glue
around the engine) receives OUTDIR first and the options in canonical form, and the
build inside the container is this same CLI with --runner host.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from . import proc, settings
from .errors import BuildImageError, ImageUnavailable, UsageError
from .progress import say

RUN_CONTAINER = Path(__file__).resolve().parent.parent / "tools" / "release" / "oeq_wheels" / "run_container.sh"
IMAGE_FILE = Path(__file__).resolve().parent.parent / "docker" / "IMAGE"
PULL_TIMEOUT = 600  # seconds: the pinned image is ~1 GB; an unreachable registry fails in seconds


def manylinux_image() -> str:
    """quay.io's manylinux_2_28 image, pinned by digest (docker/IMAGE): a choice, not the released bytes."""
    return next((l.strip() for l in IMAGE_FILE.read_text().splitlines() if l.strip() and not l.startswith("#")), "")


def image() -> str | None:
    """The image the user named (OEQ_WHEELS_IMAGE), else None: the build image of the pinned toolchain."""
    return settings.current().image


def pull_cause(stderr: str) -> str:
    """The reason in an engine's pull error, short: 'quay.io: no such host', 'manifest unknown', ..."""
    text = " ".join(stderr.split())
    text = re.sub(r"^.*?Error(?: response from daemon)?:\s*", "", text, flags=re.I) or text
    host = re.search(r"https?://([^/\"]+)/", text)
    last = text.rsplit(": ", 1)[-1].strip().rstrip(".")
    return f"{host.group(1)}: {last}" if host and host.group(1) not in last else last or "no reason given"


def ensure_image(name: str | None = None) -> str:
    """The image present in the engine: the pinned toolchain's, made and imported once; a named one, pulled if
    needed; else ImageUnavailable naming the cause."""
    name = name or image()
    client = engine()
    if name is None:
        from . import buildimage
        from .files import default_cache
        from .pins import load
        try:
            return buildimage.ensure(client, load(), default_cache())
        except BuildImageError as exc:
            raise ImageUnavailable(f"the build image cannot be made for {client}: {exc}") from None
    if proc.run([client, "image", "inspect", name], capture_output=True).returncode == 0:
        return name
    say(f"oeq-wheels: pulling {name} with {client} (once; later runs reuse it)")
    try:
        r = proc.run([client, "pull", name], capture_output=True, text=True, timeout=PULL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(f"the build image {name} is not in {client}'s store and pulling it took over "
                               f"{PULL_TIMEOUT} s") from None
    if r.returncode != 0:
        raise ImageUnavailable(f"the build image {name} is not in {client}'s store and cannot be pulled "
                               f"({pull_cause(r.stderr or r.stdout)})")
    return name


def engine() -> str:
    """The container client: docker, or DOCKER=podman / docker.exe / a stand-in."""
    return os.environ.get("DOCKER", "docker")


def _engine_answers() -> bool:
    client = engine()
    if not shutil.which(client):
        return False
    return proc.run([client, "info"], capture_output=True).returncode == 0


def choose(runner: str) -> str | None:
    """The image to build in for --runner auto|host|docker, or None for this host. auto means whatever works here:
    the container when the engine answers and has (or can make or pull) the image, else this host, with a notice."""
    if runner == "host":
        return None
    if _engine_answers():
        try:
            return ensure_image()
        except ImageUnavailable as exc:
            if runner == "auto":
                say(f"oeq-wheels: {exc}; building on this host instead (--runner host)")
                return None
            fix = ("pull it where its registry is reachable, set OEQ_WHEELS_IMAGE to an image "
                   f"{engine()} has, or build with --runner host") if image() else \
                "build with --runner host (the same toolchain, through bubblewrap)"
            raise UsageError(f"{exc}; {fix}") from None
    if runner == "auto":
        say(f"oeq-wheels: no container engine answers '{engine()} info'; building on this host (--runner host)")
        return None
    raise UsageError(f"--runner docker, but '{engine()} info' fails: no working container engine. Start Docker "
                     "(or set DOCKER=podman, DOCKER=docker.exe), or use --runner host")


def container_args(outdir: Path, pythons: list[str] | None, matrix: str | None, force: bool,
                   jobs: int | None, arches: list[str] | None = None, toolchain: str = "pinned") -> list[str]:
    """OUTDIR first, then the build options in canonical form."""
    args = [str(outdir)]
    if pythons is not None:
        args += ["--python", ",".join(pythons)]
    if matrix:
        args += ["--matrix", matrix]
    if arches is not None:
        args += ["--arch", ",".join(arches)]
    if toolchain != "pinned":
        args += ["--toolchain", toolchain]
    if force:
        args.append("--force")
    if jobs:
        args += ["--jobs", str(jobs)]
    return args


def exec_container(args: list[str], name: str):
    """Hand the process over to the container runner (it handles its own signals and cleanup), in image `name`."""
    if not RUN_CONTAINER.is_file():
        raise UsageError(f"the container runner needs a checkout of oeq-wheels ({RUN_CONTAINER} is missing); "
                         "run from a clone, or use --runner host")
    os.environ[settings.IMAGE] = name  # the container runner's (tools/release/oeq_wheels/run_container.sh)
    os.execv(str(RUN_CONTAINER), [str(RUN_CONTAINER), *args])
