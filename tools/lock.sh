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
exec "$PY" -m uv pip compile -q --universal --generate-hashes --python-version 3.11 \
  --custom-compile-command "tools/lock.sh" requirements/consumer.in -o requirements/consumer.txt
