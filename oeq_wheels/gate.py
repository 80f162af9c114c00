"""Which product's gate a wheel goes through, by its project name: for the callers that take either product
(`oeq-wheels verify`, publish). Here, above both gates, so that the common part (gate_common.py) imports no product."""
from __future__ import annotations

from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from . import pins as pins_mod
from .ext.gate import verify_wheel
from .oeq.gate import verify_oeq_binary
from .gate_common import Verdict
from .tags import split_variant


def verify_any(wheel: Path, p: pins_mod.Pins | None = None, cache: Path | None = None) -> Verdict:
    """Either product's whole gate, chosen by the wheel's project name. p: the pins to check against (None: a
    fastmace-oeq-ext wheel's own manifest matrix; the release pins for openequivariance). cache: where the gate
    fetches what it compares with (None: the default cache)."""
    try:
        is_oeq = canonicalize_name(parse_wheel_filename(split_variant(wheel.name)[0])[0]) == "openequivariance"
    except InvalidWheelFilename:  # verify_wheel reports the bad name
        is_oeq = False
    return verify_oeq_binary(wheel, p or pins_mod.load(), cache=cache) if is_oeq else verify_wheel(wheel, p, cache=cache)
