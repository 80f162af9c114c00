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


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, own, kids = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    line = {"test": item.nodeid, "wall": round(time.monotonic() - t0, 2),
            "cpu": round(_cpu(resource.RUSAGE_SELF) - own + _cpu(resource.RUSAGE_CHILDREN) - kids, 2)}
    with open(os.environ["OEQ_WHEELS_BENCH_CPU"], "a") as f:  # one short line per write: workers never interleave
        f.write(json.dumps(line) + "\n")
