"""The install commands users read: README, the site's landing page and the PyPI description show them, the
rehearsal and the clean-install test run them. Made from the pins, so a re-pin changes them everywhere
(repin rewrites README's copies; tests/unit/test_install_lines.py holds README to them)."""
from __future__ import annotations

from .pins import Pins


def ours(pins: Pins) -> list[str]:
    """fastmace-oeq-ext and the binary OpenEquivariance, one pair of lines per CUDA line (the release's CUDA first)."""
    out = []
    for line in (pins.line_builds(n)[0] for n in pins.line_names):
        url = pins.index_url(line.name)
        if line.cuda_major == pins.matrix.cuda_major:
            out.append(f"pip install {pins.package_name} --extra-index-url {url}")
            out.append(f"pip install torch openequivariance=={pins.oeq.version} --extra-index-url {url}")
        else:  # PyPI's plain `torch` is a CUDA 13 build: this line names its torch
            out.append(f"pip install torch=={line.tested_torch[0]} openequivariance=={pins.oeq.version} "
                       f"--extra-index-url {url}")
    return out


def variants(pins: Pins) -> list[str]:
    """Every line from one index, the driver choosing (PEP 825 wheel variants: uv's preview; pip skips them). Beside
    a torch already installed: the driver chooses OEq's line, not torch's (docs/variants.md)."""
    if pins.variants is None:
        return []
    return [f"uv pip install --preview-features wheel-variants openequivariance=={pins.oeq.version} "
            f"--extra-index-url {pins.index_url('variants')}"]


def fastmace(pins: Pins) -> list[str]:
    """FastMACE's own install steps (its README) plus the cu130 index: the compiler-free FastMACE."""
    line = pins.oeq_binary
    return [f"pip install torch=={pins.matrix.torch_version} --index-url {pins.consumer.torch_index}",
            f"pip install cuequivariance-ops-torch-cu{line.cuda_major}",
            f'pip install "{pins.consumer.wheel.name}[oeq]" --extra-index-url {pins.index_url(line.name)}']
