"""The run's hooks (loaded by tests/conftest.py's pytest_plugins): the workers' units of work and their order, the
disk a whole run needs, the kept mirror of PyPI for the run's installs, and the proof table."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import REPO, claims
from support.capabilities import REQUIRE


# The suite runs in worker processes (pytest-xdist; tools/ci/test.sh says how many): its qemu-, pip- and
# compiler-bound files overlap. A test file is one unit of work, so that its module fixtures are made once; files
# sharing a session fixture too costly to make twice are one unit, and so are the files that make multi-GB
# trees for a while (a fresh torch stack: pip's install, a transient uv cache, the emulated aarch64 stacks), so
# that two of those never coincide and the suite's peak disk stays what one of them adds. Such a file says so itself,
# `pytestmark = pytest.mark.big_disk`; tests/unit/test_test_command.py fails for a file that calls what makes such a
# tree (HEAVY there) without it.
def marks_big_disk(source: str) -> bool:
    """Whether a test file's module-level pytestmark names pytest.mark.big_disk (read as Python: a string of the
    file that holds such a line is not a mark)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr == "big_disk" for n in ast.walk(node.value))
    return False


BIG_DISK = tuple(sorted(p.stem for p in (REPO / "tests" / "integration").glob("test_*.py")
                        if marks_big_disk(p.read_text())))
# FastMACE's rules install their torches without most of NVIDIA's wheels (a few GB at a time): a chain of their own,
# beside the other multi-GB files' one (what that saves in time and peak disk: docs/testing.md).
OWN_CHAIN = {"test_fastmace_rules": "big-disk-rules"}
SHARED_UNIT = {"test_interrupts": "test_build",  # resumed_build, the suite's one independent second build
               **{stem: OWN_CHAIN.get(stem, "big-disk") for stem in BIG_DISK}}
# Units are handed out in this order, then the rest as collected: the longest (seconds, fresh clone, 2 cores:
# docs/benchmarks.md) start first, so that no worker is left alone with one of them at the end.
LONGEST_FIRST = ("big-disk", "big-disk-rules", "test_container", "test_build", "test_runtime_oeq", "test_fastmace",
                 "test_release")


def unit_of(nodeid: str) -> str:
    stem = Path(nodeid.split("::")[0]).stem
    return SHARED_UNIT.get(stem, stem)


# Free disk a whole run needs (measured: docs/benchmarks.md): its peak above empty caches, of which what the caches
# already hold counts toward it, and what a run installs for a while (kept with a margin), which never does.
# Too little is refused at the start in one line, not met twenty minutes in as ENOSPC deep in a test.
EMPTY_CACHE_PEAK_GIB = 33
RUN_TRANSIENT_GIB = 10
GIB = 1 << 30


def disk_need_gib(cached_gib: float) -> float:
    """Free GiB a whole run needs on the cache's file system, the caches already holding cached_gib."""
    return max(RUN_TRANSIENT_GIB, EMPTY_CACHE_PEAK_GIB - cached_gib)


def _existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def disk_shortfall(cache: Path, tmp: Path) -> str | None:
    """Why a whole run would fill the disk (one line, with the fix), or None: the cache's file system against
    disk_need_gib, and the temporary folder's, where it is another, against what a run installs for a while."""
    cached = 0.0
    if cache.is_dir():  # du counts a hard-linked file once, as the disk holds it
        du = subprocess.run(["du", "-skx", str(cache)], capture_output=True, text=True)
        cached = int(du.stdout.split()[0]) * 1024 / GIB if du.returncode == 0 and du.stdout else 0.0
    where, tmp_fs = _existing(cache), _existing(tmp)
    needs = [(where, disk_need_gib(cached))]
    if tmp_fs.stat().st_dev != where.stat().st_dev:
        needs.append((tmp_fs, RUN_TRANSIENT_GIB))
    for path, need in needs:
        free = shutil.disk_usage(path).free / GIB
        if free < need:
            return (f"{free:.1f} GiB free where {path} is; the whole suite needs about {need:.0f} GiB there "
                    f"(about {EMPTY_CACHE_PEAK_GIB} GiB above empty caches, {cached:.0f} GiB of them in {cache} now; "
                    f"docs/benchmarks.md): free space, or run a part of it (make test-unit, make test ARGS=FILE)")
    return None


_MIRROR: list = []  # the run's PyPI mirror, in the process that started it


def pytest_configure(config):
    """A whole run's disk is checked first (disk_shortfall). Then one kept mirror of PyPI for the run's installs
    (support/pypi_mirror.py): started by the process that starts the workers, which inherit its URL;
    OEQ_WHEELS_PYPI_MIRROR=off (or a URL) leaves it out."""
    from oeq_wheels.files import default_cache
    from support import pypi_mirror
    if hasattr(config, "workerinput"):
        return
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:  # no files named: the whole suite
        import tempfile
        short = disk_shortfall(default_cache(), Path(tempfile.gettempdir()))
        if short:
            raise pytest.UsageError(f"not enough free disk for the whole suite: {short}")
    if os.environ.get(pypi_mirror.ENV):
        return
    serving = pypi_mirror.serving(default_cache() / "pypi-mirror")
    _MIRROR.append(serving.__enter__())
    os.environ[pypi_mirror.ENV] = _MIRROR[0].index

    def stop():
        os.environ.pop(pypi_mirror.ENV, None)
        serving.__exit__(None, None, None)
    config.add_cleanup(stop)


def pytest_collection_modifyitems(config, items):
    rank = {u: i for i, u in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(unit_of(it.nodeid), len(rank)))  # stable: collection order within a rank


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without it (OEQ_WHEELS_TEST_WORKERS=0) never called
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with our units as scopes, in collection order. (Its own loadgroup marks cannot be
    used: pytest 9 no longer takes the node IDs it rewrites to carry the group.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # the order is LONGEST_FIRST's
    return ByUnit(config, log)


# The proof table (support/claims.py): each test's outcome, then each claim's at the end of the run (in the
# process that reports it: the only one without xdist, the controller with it).
_RESULTS: dict[str, tuple[str, str]] = {}
# nodeid -> the sonames a test recorded (record_property) under each of claims.NOTES: its load stubs, the real
# NVIDIA libraries it saw loaded; the proof table prints them under the test's row.
_NOTES: dict[str, dict[str, list[str]]] = {}


def _reports(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_runtest_logreport(report):
    for key, value in getattr(report, "user_properties", ()):
        if key in claims.NOTES:
            notes = _NOTES.setdefault(key, {})
            notes[report.nodeid] = sorted(set(notes.get(report.nodeid, [])) | set(value))
    before = _RESULTS.get(report.nodeid, ("passed", ""))
    if report.failed:
        _RESULTS[report.nodeid] = ("failed", "")
    elif report.skipped and before[0] != "failed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _RESULTS[report.nodeid] = ("skipped", reason.removeprefix("Skipped: "))
    elif report.when == "call" and report.nodeid not in _RESULTS:
        _RESULTS[report.nodeid] = ("passed", "")


_TABLE: list = []  # (lines, judged), made once at the end of the run


def _claims_table():
    if not _TABLE:
        _TABLE.append(claims.table(claims.load(), _RESULTS, _NOTES))
    return _TABLE[0]


def pytest_sessionfinish(session, exitstatus):
    """Under OEQ_WHEELS_TEST_REQUIRE, a claim with a skipped test fails the run."""
    if not REQUIRE or not _RESULTS or not _reports(session.config):
        return
    _, judged = _claims_table()
    if any(o.state == "SKIPPED" for o in judged.values()) and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _MIRROR and (_MIRROR[0].fetched or _MIRROR[0].from_store):
        m = _MIRROR[0]
        terminalreporter.write_line(f"PyPI through the kept mirror ({m.store}): {m.fetched / 1e9:.2f} GB of files "
                                    f"fetched from PyPI, {m.from_store / 1e9:.2f} GB served from the store")
    if not _RESULTS or not _reports(config):
        return
    lines, judged = _claims_table()
    terminalreporter.section("proof table (tests/claims.toml)")
    for line in lines:
        terminalreporter.write_line(line)
    if REQUIRE and any(o.state == "SKIPPED" for o in judged.values()):
        terminalreporter.write_line("a claim's test was skipped under OEQ_WHEELS_TEST_REQUIRE: that is a failure")
