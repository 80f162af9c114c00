"""The OEQ_WHEELS_* environment variables the pipeline reads: read here and nowhere else in oeq_wheels.
docs/pipeline.md's settings table says what each does; a unit test
holds the two to the same names.

Each call reads the environment as it is then: the CLI sets KEEP_DIR for the run, the container runner IMAGE for its
child, and the test suite sets them per test."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

CACHE = "OEQ_WHEELS_CACHE"
KEEP_DIR = "OEQ_WHEELS_KEEP_DIR"
IMAGE = "OEQ_WHEELS_IMAGE"
FETCH = "OEQ_WHEELS_FETCH"
PYPI_MIRROR = "OEQ_WHEELS_PYPI_MIRROR"
DEBUG = "OEQ_WHEELS_DEBUG"
NAMES = (CACHE, KEEP_DIR, IMAGE, FETCH, PYPI_MIRROR, DEBUG)
FETCH_MODES = ("members", "whole")


@dataclass(frozen=True)
class Settings:
    cache: Path            # OEQ_WHEELS_CACHE, else $XDG_CACHE_HOME/oeq-wheels (~/.cache/oeq-wheels)
    keep_dir: str | None   # OEQ_WHEELS_KEEP_DIR: where a check's work kept on purpose goes
    image: str | None      # OEQ_WHEELS_IMAGE: the image the user named for --runner docker (None: the pinned one)
    fetch_value: str       # OEQ_WHEELS_FETCH as set: checked only where it is used (fetch)
    pypi_mirror: str | None  # OEQ_WHEELS_PYPI_MIRROR: the test suite's mirror of PyPI (its URL; off: none)
    debug: bool = False    # OEQ_WHEELS_DEBUG=1: an expected failure also prints its traceback (for maintainers)

    @property
    def fetch(self) -> str:
        """How inputs are fetched: "members" (the default; by range, with link stubs) or "whole"."""
        if self.fetch_value not in FETCH_MODES:
            raise UsageError(f"{FETCH}={self.fetch_value!r} is not one of {', '.join(FETCH_MODES)}; unset it or "
                                 "pick one")
        return self.fetch_value


def current() -> Settings:
    """The settings as the environment says now."""
    env = os.environ
    cache = env.get(CACHE)
    return Settings(
        cache=Path(cache) if cache else Path(env.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oeq-wheels",
        keep_dir=env.get(KEEP_DIR),
        image=env.get(IMAGE) or None,
        fetch_value=env.get(FETCH, "members"),
        pypi_mirror=env.get(PYPI_MIRROR),
        debug=env.get(DEBUG) == "1",
    )
