#!/usr/bin/env bash
# Print the path of a Python (>= 3.11) whose venv holds the pipeline's pinned tools,
# creating the venv on first use from requirements/lock.txt (every package pinned with its
# sha256, installed with --require-hashes). The venv lives in the cache, never in the repository, and the cache is
# no trust root: before each use the venv is checked against requirements/tools-venv.json, its content digest pinned
# per CPython minor (tools/venv_check.py), and one that differs is refused in one line.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${OEQ_WHEELS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oeq-wheels}"
PINNED="$REPO/requirements/tools-venv.json"

# The CPython that runs the tools: the first candidate >= 3.11 whose minor requirements/tools-venv.json pins (else the
# first >= 3.11, which the check then refuses in one line); printed as its real path.
find_base_python() {
  local c first="" real candidates=(python3 python3.13 python3.12 python3.11 /opt/python/cp312-cp312/bin/python
                                    /opt/python/cp311-cp311/bin/python)
  [ -z "${OEQ_WHEELS_TOOL_PYTHON:-}" ] || candidates=("$OEQ_WHEELS_TOOL_PYTHON")  # named: that one or none
  for c in "${candidates[@]}"; do
    "$c" -c '' >/dev/null 2>&1 || continue
    real="$("$c" -I -S -c '
import json, os, sys
if sys.version_info < (3, 11): sys.exit(1)
try: pinned = json.load(open(sys.argv[1]))
except (OSError, ValueError): pinned = {}
import platform
print(os.path.realpath(sys.executable)); sys.exit(0 if "%d.%d-%s" % (*sys.version_info[:2], platform.machine()) in pinned else 3)' "$PINNED" 2>/dev/null)" \
      && { echo "$real"; return 0; }
    [ $? -eq 3 ] && [ -z "$first" ] && first="$real"
  done
  [ -n "$first" ] && { echo "$first"; return 0; }
  echo "bootstrap: no Python >= 3.11 found (tried ${candidates[*]}); install one or set OEQ_WHEELS_TOOL_PYTHON" >&2
  return 1
}

LOCK="$REPO/requirements/lock.txt"
base="$(find_base_python)"
# One venv per lock and per CPython (its real path): another CPython gets its own, never a venv made by another.
key="$( (sha256sum <"$LOCK"; echo "$base") | sha256sum | cut -c1-12)"
VENV="$CACHE/venv-tools-$key"
check() { "$base" -I -S "$REPO/tools/venv_check.py" "${1:-check}" "$VENV" "$PINNED"; }
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  # One maker at a time: a second process (an editor's test run beside `make test`) waits, then finds it made.
  mkdir -p "$CACHE"
  exec 9>"$VENV.lock"
  flock 9
fi
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
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
  # What the venv module installed beside pip and the lock does not pin (setuptools, on CPython 3.11) goes: the venv
  # holds the lock's wheels and nothing else.
  extra="$("$VENV/bin/python" -I -c '
import importlib.metadata as m, re, sys
pinned = {re.sub(r"[-_.]+", "-", l.split("==")[0]).lower() for l in open(sys.argv[1]) if "==" in l and not l.startswith("#")}
print(" ".join(sorted({d.metadata["Name"] for d in m.distributions() if re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() not in pinned})))' "$LOCK")"
  if [ -n "$extra" ] && ! "$VENV/bin/python" -m pip uninstall -q -y --disable-pip-version-check $extra >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "bootstrap: removing $extra from the tools venv failed (log above)" >&2; exit 1
  fi
  rm -f "$log"
  [ -z "${OEQ_WHEELS_TOOLS_PIN:-}" ] || check pin   # tools/lock.sh: the pins follow the lock
  touch "$VENV/.complete"
fi
check
echo "$VENV/bin/python"
