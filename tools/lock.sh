#!/usr/bin/env bash
# Re-lock the pipeline's tools: requirements/lock.txt (every package, exact version and sha256)
# from the direct pins in requirements/tools.txt and test.txt, and requirements/consumer.txt (what the
# consumer tests install beside FastMACE) from consumer.in. Run after changing any of them.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
"$PY" -m uv pip compile -q --universal --generate-hashes --python-version 3.11 \
  --custom-compile-command "tools/lock.sh" requirements/test.txt -o requirements/lock.txt
# requirements/tools-venv.json: the tools venv's content digest per CPython minor (tools/venv_check.py), each made from
# the new lock in an empty cache with every CPython 3.11 or newer found here.
echo "{}" >requirements/tools-venv.json
pyenv_root="$(pyenv root 2>/dev/null || true)"
for v in 3.11 3.12 3.13 3.14; do
  py=""
  for c in "python$v" ${pyenv_root:+"$pyenv_root"/versions/"$v".*/bin/python"$v"}; do
    if "$c" -c '' >/dev/null 2>&1; then py="$c"; break; fi
  done
  [ -n "$py" ] || { echo "lock: no CPython $v here: requirements/tools-venv.json pins none for it" >&2; continue; }
  tmp="$(mktemp -d)"
  OEQ_WHEELS_CACHE="$tmp" OEQ_WHEELS_TOOL_PYTHON="$py" OEQ_WHEELS_TOOLS_PIN=1 tools/bootstrap.sh >/dev/null
  rm -rf "$tmp"
done
exec "$PY" -m uv pip compile -q --universal --generate-hashes --python-version 3.11 \
  --custom-compile-command "tools/lock.sh" requirements/consumer.in -o requirements/consumer.txt
