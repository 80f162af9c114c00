#!/usr/bin/env bash
# Re-lock the pipeline's tools: requirements/lock.txt (every package, exact version and sha256)
# from the direct pins in requirements/tools.txt and test.txt. Run after changing either.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
exec "$PY" -m uv pip compile -q --universal --generate-hashes --python-version 3.11 \
  --custom-compile-command "tools/lock.sh" requirements/test.txt -o requirements/lock.txt
