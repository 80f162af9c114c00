#!/usr/bin/env bash
# The test command (README, `make test`, .ci/run): sets up what it needs, then pytest.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The container-runner tests use bubblewrap as a stand-in container engine.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing bubblewrap (Debian package) for the container-runner tests" >&2
    { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >/dev/null
  else
    echo "test.sh: bubblewrap is missing; install it (e.g. sudo apt-get install bubblewrap) and run again" >&2
    exit 1
  fi
fi
PY="$("$REPO/tools/bootstrap.sh")"
cd "$REPO"
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
