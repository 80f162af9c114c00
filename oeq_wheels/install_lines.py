"""The install commands users read: README, the site's landing page and the PyPI description show them, the
rehearsal and the clean-install test run them. Made from the pins, so a re-pin changes them everywhere
(repin rewrites README's copies; tests/unit/test_install_lines.py holds README to them)."""
from __future__ import annotations

from .pins import Pins


def ours(pins: Pins) -> list[str]:
    """fastmace-oeq-ext and the binary OpenEquivariance, one pair of lines per line's index (one line serves every
    CUDA torch: pip and uv take the torch they find, or PyPI's)."""
    out = []
    for line in (pins.line_builds(n)[0] for n in pins.line_names):
        url = pins.index_url(line.name)
        out.append(f"pip install {pins.package_name} --extra-index-url {url}")
        out.append(f"pip install torch openequivariance=={pins.oeq.version} --extra-index-url {url}")
    return out


def fastmace(pins: Pins) -> list[str]:
    """FastMACE's own install steps (its README) plus our index: the compiler-free FastMACE."""
    line = pins.oeq_binary
    return [f"pip install torch=={pins.matrix.torch_version} --index-url {pins.consumer.torch_index}",
            f"pip install cuequivariance-ops-torch-cu{pins.matrix.cuda_major}",
            f'pip install "{pins.consumer.wheel.name}[oeq]" --extra-index-url {pins.index_url(line.name)}']
