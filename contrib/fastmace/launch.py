#!/usr/bin/env python3
"""Run a FastMACE 1.0.0 command with the proposed rules (oeq_rules.py) put over its functions in-process.

    python3 contrib/fastmace/launch.py -m fastmace.cli doctor
    python3 contrib/fastmace/launch.py tools/fastmace_smoke.py OUT.json --model M

Nothing is written into FastMACE's files: the rules are installed in this process before the command runs,
as ``python -m`` or a script would run it (``runpy``). Prints one line to stderr saying they are installed.
"""
import atexit
import json
import os
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oeq_rules  # noqa: E402

oeq_rules.install()


def _report():
    """LAUNCH_REPORT=PATH: what the process ended with (OEQ_JIT_EXTENSION, which OEq extension it loaded)."""
    extlib = sys.modules.get("openequivariance._torch.extlib")
    with open(os.environ["LAUNCH_REPORT"], "w") as f:
        json.dump({"OEQ_JIT_EXTENSION": os.environ.get("OEQ_JIT_EXTENSION"),
                   "USE_PRECOMPILED_EXTENSION": getattr(extlib, "USE_PRECOMPILED_EXTENSION", None),
                   "BUILT_EXTENSION": getattr(extlib, "BUILT_EXTENSION", None),
                   "extension_module": getattr(getattr(extlib, "extension_module", None), "__file__", None)}, f)


if os.environ.get("LAUNCH_REPORT"):
    atexit.register(_report)
print(f"launch.py: FastMACE {oeq_rules.FASTMACE_VERSION} with the proposed OEq rules ({oeq_rules.__file__})",
      file=sys.stderr, flush=True)
args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
if args[0] == "-m":
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    sys.path[0] = str(Path(args[0]).resolve().parent)
    runpy.run_path(args[0], run_name="__main__")
