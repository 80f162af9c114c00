#!/usr/bin/env bash
# The build inside the container: the pinned toolchain's build image, or a manylinux_2_28 image (then with
# --toolchain host); it also runs on a plain Linux host:
#   build_in_container.sh OUTDIR [--python 3.11,3.12] [--matrix NAME] [--force] [--jobs N]
# Installs the pinned tools, downloads the pinned inputs by hash, builds and verifies
# every wheel (oeq_wheels build), and exits non-zero on any failure.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
[ $# -ge 1 ] || { echo "usage: build_in_container.sh OUTDIR [build options]" >&2; exit 2; }
outdir="$1"; shift
# manylinux images: the newest GCC toolset, and one of their CPythons for the tools.
for ts in /opt/rh/gcc-toolset-14/enable; do
  # shellcheck disable=SC1090
  [ -f "$ts" ] && source "$ts"
done
if [ -z "${OEQ_WHEELS_TOOL_PYTHON:-}" ] && [ -x /opt/python/cp312-cp312/bin/python ]; then
  export OEQ_WHEELS_TOOL_PYTHON=/opt/python/cp312-cp312/bin/python
fi
PY="$("$REPO/tools/bootstrap.sh")"
# From a checkout: the pipeline (oeq_wheels) and the runtime package it ships (runtime/fastmace_oeq_ext).
PYTHONPATH="$REPO:$REPO/runtime${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m oeq_wheels build "$outdir" --runner host "$@"
