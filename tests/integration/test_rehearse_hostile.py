"""`make rehearse-ci REHEARSE_CI_FLAGS=--hostile`: release.yml's last mile under act, attacked (checks/last_mile.py).
`make test` runs the scenarios that fit its budget, seeded with the full recorded set: a PyPI wheel of the artifact
with injected code and its RECORD made to match, an ambiguous zip among the native wheels, and an earlier release
attested by another workflow. Each must publish nothing and say why in one line. The full run (every scenario, the
clean one too) is recorded by hand before a release: records/runs/*-hostile-rehearsal.json."""
import subprocess

import pytest

from support import REPO
from support.capabilities import unavailable
from oeq_wheels.checks import last_mile, rehearse_ci

pytestmark = pytest.mark.big_disk  # the full set, copied into each scenario's folder

IN_MAKE_TEST = ("artifact-tampered", "ambiguous-zip", "foreign-signer")


def test_hostile_scenarios_publish_nothing_and_each_says_why_in_one_line(release_set):
    why = rehearse_ci.cannot_run_here()
    if why:
        unavailable("act", why)  # a skip, or a failure where OEQ_WHEELS_TEST_REQUIRE names act
    flags = f"--hostile {' '.join(IN_MAKE_TEST)} --keep-caches --seed {release_set}"
    r = subprocess.run(["make", "rehearse-ci", f"REHEARSE_CI_FLAGS={flags}"], cwd=REPO, capture_output=True, text=True,
                       timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    lines = out.splitlines()
    for name in IN_MAKE_TEST:
        scenario = last_mile.SCENARIOS[name]
        assert f"rehearse-ci: scenario {name}: as expected (act exit 1)" in lines, name
        (refused,) = [line for line in lines if line.startswith(f"rehearse-ci: {name}: refused: ")]
        assert scenario.refusal in refused and "Traceback" not in out
    assert f"rehearse-ci: hostile: {len(IN_MAKE_TEST)} of {len(IN_MAKE_TEST)} scenario(s) as expected" in lines
