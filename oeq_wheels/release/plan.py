"""What release.yml takes from pins.toml instead of writing it in (a re-pin then needs no workflow edit): the
clean-install job's CPythons and the install-matrix rows of the build job."""
from __future__ import annotations

import json

from ..pins import Pins


def release_plan(pins: Pins) -> dict[str, str]:
    """GitHub Actions outputs (name -> value): `pythons`, a JSON list of the release matrix's CPythons;
    `x86_64_torches`, fastmace-oeq-ext's torch and each x86_64 line's floor (the one line's: CUDA 12.8's 2.10.0;
    `--torch` of install-matrix); `aarch64_torches`, the floor of each aarch64 line."""
    x86 = [pins.matrix.torch_version] + [l.tested_torch[0] for l in pins.oeq_lines if l.arch.name == "x86_64"]
    arm = [l.tested_torch[0] for l in pins.oeq_lines if l.arch.name == "aarch64"]
    return {"pythons": json.dumps(list(pins.matrix.pythons)),
            "x86_64_torches": ",".join(dict.fromkeys(x86)),
            "aarch64_torches": ",".join(dict.fromkeys(arm))}
