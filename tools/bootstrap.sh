#!/usr/bin/env bash
# Print the path of a Python (>= 3.11) whose venv holds the pipeline's pinned tools,
# creating the venv on first use from requirements/lock.txt (every package pinned with its
# sha256, installed with --require-hashes). The venv lives in the cache, never in the repository.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${OEQ_WHEELS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oeq-wheels}"


find_base_python() {
  local c
  for c in "${OEQ_WHEELS_TOOL_PYTHON:-}" python3 python3.13 python3.12 python3.11 \
           /opt/python/cp312-cp312/bin/python /opt/python/cp311-cp311/bin/python; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  echo "bootstrap: no Python >= 3.11 found (tried python3, python3.13 ... python3.11); install one or set OEQ_WHEELS_TOOL_PYTHON" >&2
  return 1
}

LOCK="$REPO/requirements/lock.txt"
key="$(sha256sum <"$LOCK" | cut -c1-12)"
VENV="$CACHE/venv-tools-$key"
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  # One maker at a time: a second process (an editor's test run beside `make test`) waits, then finds it made.
  mkdir -p "$CACHE"
  exec 9>"$VENV.lock"
  flock 9
fi
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  base="$(find_base_python)"
  echo "bootstrap: creating $VENV with $base" >&2
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$base" -m venv "$VENV"
  # The log lives in TMPDIR, not beside the venv: on a full disk pip could not write it there.
  log="$(mktemp "${TMPDIR:-/tmp}/oeq-wheels-bootstrap.XXXXXX")"
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r "$LOCK" \
       >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "bootstrap: installing the pinned tools failed (log above)" >&2; exit 1
  fi
  rm -f "$log"
  touch "$VENV/.complete"
fi
echo "$VENV/bin/python"
