#!/usr/bin/env bash
# Build the fastmace-oeq-ext wheels into OUTDIR.
#   build.sh [--runner auto|host|docker] [--python 3.11,3.12] [--matrix NAME] [--force] OUTDIR
# --runner auto (default) uses a container engine when "$DOCKER info" answers and
# the host otherwise. Everything else is passed to `oeq-wheels build`.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DOCKER="${DOCKER:-docker}"
runner=auto
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runner) runner="${2:?--runner needs auto, host or docker}"; shift 2 ;;
    --runner=*) runner="${1#--runner=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

engine_ok() { command -v "$DOCKER" >/dev/null 2>&1 && "$DOCKER" info >/dev/null 2>&1; }

case "$runner" in
  host) ;;
  auto)
    if engine_ok; then runner=docker
    else echo "build.sh: no container engine answers '$DOCKER info'; building on this host (--runner host)" >&2; runner=host
    fi ;;
  docker)
    engine_ok || { echo "build.sh: --runner docker, but '$DOCKER info' fails: no working container engine. Start Docker (or set DOCKER=docker.exe / podman), or use --runner host." >&2; exit 2; } ;;
  *) echo "build.sh: unknown runner '$runner' (auto, host or docker)" >&2; exit 2 ;;
esac

if [ "$runner" = docker ]; then
  exec "$REPO/tools/release/oeq_wheels/run_container.sh" "${args[@]}"
fi
PY="$("$REPO/tools/bootstrap.sh")"
# From a checkout: the pipeline (oeq_wheels) and the runtime package it ships (runtime/fastmace_oeq_ext).
PYTHONPATH="$REPO:$REPO/runtime${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m oeq_wheels build "${args[@]}"
