"""The container tests' image: the product's build image (oeq_wheels/buildimage.py), the pinned toolchain's.

Its compilers are the pinned packages, so the build inside makes the released bytes: its wheels must equal the host
runner's byte for byte. Made once per key into the cache the tests use, imported into each engine.
"""
from __future__ import annotations

from pathlib import Path

from oeq_wheels import buildimage, pins


def ensure(client: str, cache: Path, env: dict | None = None) -> str:
    """The build image in the engine of `client` (docker, or a podman wrapper)."""
    return buildimage.ensure(client, pins.load(), cache, env)
