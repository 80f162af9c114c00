#!/usr/bin/env bash
# The test command (README, `make test`, .ci/run): sets up what it needs, then pytest.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
# The suite's processes write no bytecode, whatever the shell says: the repository and the cached venvs stay as
# they were (tests/integration/test_container.py checks the repository while the other worker imports), and every run does the
# same work.
export PYTHONDONTWRITEBYTECODE=1
# shellcheck source=require.sh
source "$REPO/tools/ci/require.sh"
# A real container engine for the container-runner tests (our own dockerd and podman; tools/ci/engine.sh).
# shellcheck source=engine.sh
source "$REPO/tools/ci/engine.sh"
# Only for a selection with a test marked `engines` (a whole run has them): `make test-unit` or one file of
# another kind starts none.
engine_files="$(grep -l '^pytestmark = pytest.mark.engines' tests/*/test_*.py || true)"
engines=yes
if [ $# -gt 0 ]; then
  selected="$(PYTHONPATH="$REPO" "$PY" -m pytest -p no:cacheprovider --collect-only -q "$@" 2>/dev/null || true)"
  if [ -z "$engine_files" ] || ! grep -qF "$engine_files" <<<"$selected"; then
    engines=no
  fi
fi
if [ "$engines" = yes ]; then
  trap "engine_down || true" EXIT
  # Not under errexit: each step of it says itself what failed (OEQ_WHEELS_ENGINE_*), and the tests act on that.
  set +e
  engine_up
  set -e
fi
set +e
# The pipeline from the checkout; tests/conftest.py adds runtime/ for the pytest process only, so
# that the venvs the tests start import the fastmace_oeq_ext of a wheel, never the checkout's.
# Two worker processes (OEQ_WHEELS_TEST_WORKERS; 0 runs in this one): a test file is one unit, the longest first
# (tests/support/plugin.py), so qemu-, pip- and compiler-bound files overlap on this 2-core machine.
workers="${OEQ_WHEELS_TEST_WORKERS:-2}"
dist=()
[ "$workers" = 0 ] || dist=(-n "$workers")
PYTHONPATH="$REPO" "$PY" -m pytest -p no:cacheprovider -ra "${dist[@]}" "$@"
rc=$?
set -e
# The engines' state last, where nobody misses it: a skip or a failure of them names why.
[ "$engines" = yes ] && for kind in DOCKER PODMAN; do
  state="$(printenv "OEQ_WHEELS_ENGINE_$kind" || true)"
  [ "$state" = up ] || echo "test.sh: container engine ${kind,,}: ${state:-not started}" >&2
done
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$rc"
