#!/usr/bin/env bash
# Build both packages' wheels:  build.sh OUTDIR [--runner auto|host|docker] [--python 3.11,3.12] [--matrix NAME] [--force] [--jobs N] [-q|-v]
# Thin glue: every argument goes unchanged to `oeq-wheels build`, which parses them (in any
# order) and picks the runner (auto: the container when "$DOCKER info" answers, else this host).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
# From a checkout: the pipeline (oeq_wheels) and the runtime package it ships (runtime/fastmace_oeq_ext).
PYTHONPATH="$REPO:$REPO/runtime${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m oeq_wheels build "$@"
