#!/usr/bin/env python3
"""Write a run record (oeq_wheels/checks/run_records.py) for a run made on another machine (the GPU machine),
from what the run left: its JSON outputs and text logs, each wheel it installed (hashed here, where it ran), the
commit of the checkout, and its verdict. Standard library only: the GPU machine has the checkout but no oeq_wheels environment.

    python3 tools/run_record.py --tool "contrib/fastmace/gpu_rules.sh DIR" --commit SHA --wheel W.whl \
        --verdict 0 --json R1=rec/R1.json --text summary=summary.txt --note "..." --out records/runs/NAME.json

--verdict is the run's own exit status or check (0: ok). torch and the GPU are read here, in this process.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: run_records is standard library only
from oeq_wheels.checks import run_records  # noqa: E402
MAX_TEXT = 64 << 10  # the tail of a long log is what tells


def machine() -> dict:
    out = {"python": sys.version.split()[0], "device": "none", "driver": "none", "torch": "none", "cuda": "none"}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
        if q:
            out["device"], out["driver"] = (x.strip() for x in q[0].split(",", 1))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        import torch
        out["torch"], out["cuda"] = torch.__version__, str(torch.version.cuda)
    except ImportError:
        pass
    return out


def pairs(items: list[str], flag: str) -> list[tuple[str, Path]]:
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name:
            sys.exit(f"run_record: {flag} {item!r}: write NAME=FILE")
        out.append((name, Path(path)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the command that ran, as a user would repeat it")
    ap.add_argument("--commit", required=True, help="the 40-hex commit of the checkout it ran from")
    ap.add_argument("--wheel", type=Path, action="append", default=[], required=True)
    ap.add_argument("--verdict", type=int, required=True, help="0 when the run passed its own checks")
    ap.add_argument("--json", action="append", default=[], help="NAME=FILE: a JSON output of the run (repeat)")
    ap.add_argument("--text", action="append", default=[], help="NAME=FILE: a text log of the run (repeat)")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if not re.fullmatch(r"[0-9a-f]{40}", a.commit):
        ap.error("--commit must be the 40-hex commit of this checkout")
    results: dict = {"verdict": a.verdict}
    for name, path in pairs(a.json, "--json"):
        results[name] = json.loads(path.read_text()) if path.is_file() else None
    for name, path in pairs(a.text, "--text"):
        results[name] = path.read_text(errors="replace")[-MAX_TEXT:] if path.is_file() else None
    rec = run_records.write(a.out, a.tool, a.commit, machine(), a.wheel, a.verdict == 0, results, a.note)
    print(f"run_record: wrote {a.out} (ok={rec.ok})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
