"""What some integration tests need beyond the checkout: container engines, emulation, act's runner user.

The suite brings them up itself where it can (tools/ci/engine.sh, the emulated root file systems, act's runner user:
checks/rehearse_ci.py): where it cannot (not root, no apt-get, no password-free sudo), their tests are SKIPPED by
name with the reason; where a capability is named in OEQ_WHEELS_TEST_REQUIRE (`.ci/run` names them all), such a skip
is a FAILURE instead.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REQUIRE = {c.strip() for c in os.environ.get("OEQ_WHEELS_TEST_REQUIRE", "").split(",") if c.strip()}
CAPABILITIES = ("engines", "emulation", "act")
unknown = REQUIRE - set(CAPABILITIES)
if unknown:
    raise pytest.UsageError(f"OEQ_WHEELS_TEST_REQUIRE names {', '.join(sorted(unknown))}; it takes "
                            f"{', '.join(CAPABILITIES)}")


def unavailable(capability: str, reason: str):
    """This test's capability cannot be had here: a skip with the reason, or a failure where it is required."""
    if capability in REQUIRE:
        pytest.fail(f"{capability} required (OEQ_WHEELS_TEST_REQUIRE) but not available: {reason}", pytrace=False)
    pytest.skip(reason)


def build_image(client: str, cache: Path, env: dict | None = None) -> str:
    """The container tests' image in the engine of `client` (docker, or a podman wrapper): the product's build image
    (oeq_wheels/buildimage.py), the pinned toolchain's. Its compilers are the pinned packages, so the build inside
    makes the released bytes: its wheels must equal the host runner's byte for byte. Made once per key into the cache
    the tests use, imported into each engine."""
    from oeq_wheels import buildimage, pins
    return buildimage.ensure(client, pins.load(), cache, env)
