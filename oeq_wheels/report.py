"""REPORT.json and REPORT.md: what one build made, from what, and how long it took."""
from __future__ import annotations

import json
from pathlib import Path

from packaging.utils import parse_wheel_filename

from .files import write_atomic
from .tags import split_variant


def write_report(where: Path, pins, rows: list[dict], failures: dict, elapsed: float, toolchain,
                 stem: str = "REPORT") -> Path:
    """Write where/STEM.json and STEM.md atomically; return the .md path."""
    entry = lambda p: {"name": p.name, "version": p.version, "file": p.file, "sha256": p.sha256}
    cps = sorted({next(iter(parse_wheel_filename(split_variant(r["wheel"])[0])[3])).interpreter for r in rows})
    ext_cps = [c for c in cps if c in pins.matrix.torch_wheels]  # OEq's CPythons may be more than the torch's
    inputs_ = [entry(p) for p in dict.fromkeys(pins.all_inputs(ext_cps) + pins.oeq_binary_inputs())]
    data = {"package": pins.package_name, "version": pins.version, "matrix": pins.matrix.name,
            "oeq_binary_versions": {l.name: l.version(pins.oeq.version) for l in pins.oeq_lines},
            "compiler": toolchain.version, "elapsed_s": round(elapsed, 1), "wheels": rows,
            "failures": failures, "inputs": inputs_}
    lines = [f"# {pins.package_name} {pins.version} (matrix {pins.matrix.name}) and openequivariance "
             f"{', '.join(data['oeq_binary_versions'].values())}", "",
             f"Built with {toolchain.version} in {elapsed:.1f} s.", "",
             "| wheel | tag (proven by auditwheel) | size | sha256 | seconds per stage |", "|---|---|---|---|---|"]
    for r in rows:
        stages = ", ".join(f"{k} {v}" for k, v in r["timings"].items())
        lines.append(f"| {r['wheel']} | {r['tag']} | {r['size'] / 1024:.0f} KiB | `{r['sha256']}` | {stages} |")
    for who, why in failures.items():
        lines.append(f"| {who}: FAILED | | | | {why.splitlines()[0][:200]} |")
    lines += ["", "## Inputs", "", "| file | sha256 |", "|---|---|"]
    lines += [f"| {i['file']} | `{i['sha256']}` |" for i in inputs_]
    for name, text in ((f"{stem}.json", json.dumps(data, indent=2) + "\n"), (f"{stem}.md", "\n".join(lines) + "\n")):
        write_atomic(where / name, text)
    return where / f"{stem}.md"
