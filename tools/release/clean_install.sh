#!/usr/bin/env bash
# Clean-install check: clean_install.sh WHEEL_DIR [PYTHON]  (PYTHON: X.Y or a path; default 3.11)
# A fresh venv with torch, OpenEquivariance and fastmace-oeq-ext from WHEEL_DIR only; g++, c++,
# ninja and nvcc replaced by failing sentinels; FASTMACE_OEQ_PREBUILT=1; doctor + smoke must pass.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: clean_install.sh WHEEL_DIR [PYTHON]" >&2; exit 2; }
PY="$("$REPO/tools/bootstrap.sh")"
# From a checkout: the pipeline (oeq_wheels) and the runtime package it ships (runtime/fastmace_oeq_ext).
PYTHONPATH="$REPO:$REPO/runtime${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m oeq_wheels clean-install "$@"
