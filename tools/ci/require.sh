# Sourced by tools/ci/test.sh: which capabilities a skip may not hide (OEQ_WHEELS_TEST_REQUIRE, read by
# tests/support/capabilities.py). Where the suite brings engines, emulation and act's runner user up itself (root
# with apt-get), failing to is a failure by default; set OEQ_WHEELS_TEST_REQUIRE (empty: nothing required) to choose otherwise.
# OEQ_TEST_UID / OEQ_TEST_APT stand in for `id -u` and apt-get in tests/unit/test_test_command.py.
if [ -z "${OEQ_WHEELS_TEST_REQUIRE+x}" ]; then
  _uid="${OEQ_TEST_UID:-$(id -u)}"
  if [ -n "${OEQ_TEST_APT+x}" ]; then _apt="$OEQ_TEST_APT"; else _apt="$(command -v apt-get || true)"; fi
  if [ "$_uid" = 0 ] && [ -n "$_apt" ]; then
    export OEQ_WHEELS_TEST_REQUIRE=engines,emulation,act
  fi
  unset _uid _apt
fi
