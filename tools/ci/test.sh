#!/usr/bin/env bash
# The test command (README, `make test`, .ci/run): sets up its own venv, then pytest.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
set +e
PYTHONPATH="$REPO" "$PY" -m pytest -p no:cacheprovider -ra "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$rc"
