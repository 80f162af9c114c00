"""`python -m fastmace_oeq_ext`: how OEq's host extension will be provided here, and why.

The first line is the verdict; then every candidate considered, taken or refused
with its reason (the same resolve() that activate() uses). Exit 0 when the host
extension can be provided, 1 when not, 2 for a usage error.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import decision as r

INSTALL_HINT = ("install them, or install the fastmace-oeq-ext wheel that matches this environment, "
                "or OpenEquivariance's binary wheel (no compiler needed)")


def verdict(res: r.Resolution, env: dict) -> tuple[str, list[str], int]:
    """The verdict line, extra lines, and the exit code."""
    chosen = res.chosen
    prebuilt = res.reason("prebuilt")
    not_used = f"; prebuilt not used: {prebuilt}" if prebuilt else ""
    tools = env.get("tools", {})
    found = ", ".join(f"{t} {p}" for t, p in tools.items() if p) or "no g++/ninja found"
    if res.error:
        return f"host extension: unusable; {res.error}", [], 1
    if chosen is None:
        missing = [t for t, p in tools.items() if not p]
        extra = [f"missing: {', '.join(missing)} ({INSTALL_HINT})"] if missing else []
        return f"host extension: unusable; nothing can provide it ({found}){not_used}", extra, 1
    if chosen.name == "oeq-precompiled":
        return f"host extension: OpenEquivariance precompiled ({chosen.path}); no compiler needed", [], 0
    if chosen.name == "prebuilt":
        try:
            m = r.load_manifest()
            name = f"{m.package} {m.extension_version}"
        except (OSError, r.ManifestError):
            name = "fastmace-oeq-ext"
        return f"host extension: prebuilt ({name}, {chosen.path}); no compiler needed", [], 0
    if chosen.name == "nvidia-wheels":
        return f"host extension: built from the NVIDIA wheels with the host toolchain ({found}){not_used}", [], 0
    return f"host extension: built with the host toolchain ({found}){not_used}", [], 0


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    ap = argparse.ArgumentParser(prog="python -m fastmace_oeq_ext", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the decision and every candidate as JSON")
    args = ap.parse_args(argv)
    try:
        env = r.environment()
        res = r.resolve(env)
    except ValueError as exc:  # a bad FASTMACE_OEQ_PREBUILT or OEQ_CUDA_FROM_WHEELS value
        if args.json:
            print(json.dumps({"host_extension": None, "error": str(exc), "candidates": []}), file=out)
        else:
            print(f"host extension: unusable; {exc}", file=out)
        return 1
    line, extra, rc = verdict(res, env)
    consumer = r.consumer_verdict(env)  # what FastMACE, which forces OEq's JIT path, will do
    if consumer is not None:
        extra = [consumer.line(), *extra]
    if args.json:
        print(json.dumps({"host_extension": res.chosen.name if res.chosen and not res.error else None,
                          "verdict": line, "mode": res.mode, "error": res.error,
                          "consumer": None if consumer is None else
                          {"name": consumer.consumer, "uses_prebuilt": consumer.uses, "reason": consumer.reason,
                           "fix": consumer.fix},
                          "candidates": [{"name": c.name, "taken": c.taken, "reason": c.reason, "path": c.path}
                                         for c in res.candidates]}, indent=2), file=out)
        return rc
    print(line, file=out)
    for e in extra:
        print(e, file=out)
    print("considered:", file=out)
    for c in res.candidates:
        print(f"  {'taken  ' if c.taken else 'refused'}  {c.name}: {c.reason}", file=out)
    return rc
