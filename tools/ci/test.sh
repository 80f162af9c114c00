#!/usr/bin/env bash
# The test command (README, `make test`, .ci/run): sets up what it needs, then pytest.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
# A real container engine for the container-runner tests (our own dockerd and podman; tools/ci/engine.sh).
# shellcheck source=engine.sh
source "$REPO/tools/ci/engine.sh"
engine_up || true
trap "engine_down || true" EXIT
set +e
# The pipeline from the checkout; tests/conftest.py adds runtime/ for the pytest process only, so
# that the venvs the tests start import the fastmace_oeq_ext of a wheel, never the checkout's.
PYTHONPATH="$REPO" "$PY" -m pytest -p no:cacheprovider -ra "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$rc"
