"""A pytest plugin for bench/suite.py: each test's wall time and the CPU time it and the processes it waited for
used (setup, call and teardown together; a session fixture counts in the first test that asks for it), one JSON
line per test appended to $OEQ_WHEELS_BENCH_CPU. Work done by a daemon (dockerd, podman's conmon) is not a child
of the test and is not counted here; /proc/stat's total in bench/suite.py counts it."""
from __future__ import annotations

import json
import os
import resource
import time

import pytest

LOG = os.environ.get("OEQ_WHEELS_BENCH_CPU")


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Not for a test's own pytest runs (tests/integration/test_test_command_engines.py runs the test command): their tests are this one's.
    os.environ.pop("OEQ_WHEELS_BENCH_CPU", None)
    t0, own, kids = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    if LOG is None:  # a test's own pytest run: it inherited the plugin, not the file
        return
    line = {"test": item.nodeid, "wall": round(time.monotonic() - t0, 2),
            "cpu": round(_cpu(resource.RUSAGE_SELF) - own + _cpu(resource.RUSAGE_CHILDREN) - kids, 2)}
    with open(LOG, "a") as f:  # one short line per write: workers never interleave
        f.write(json.dumps(line) + "\n")
