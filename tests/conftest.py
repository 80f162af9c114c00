"""Shared fixtures (the pipeline's cache, a real cp311 build, torch venvs), the two tiers' rules, the workers' units
of work and the proof table."""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "runtime"  # the fastmace_oeq_ext package, kept out of the repository root so that
sys.path[:0] = [str(REPO), str(RUNTIME)]  # a process started there never imports it instead of a wheel's

from oeq_wheels import build, debian, pins as pins_mod, driver_stub  # noqa: E402
from builds import cli, finish, hidden, private_cache, processes_of, wait_for, wheels_in  # noqa: E402
from oeq_wheels.files import KEEP_DIR_VAR, default_cache, locked  # noqa: E402
from oeq_wheels.output import extra_dir  # noqa: E402

# Hypothesis keeps caches (source constants, Unicode tables) in ./.hypothesis, database or not: in the pipeline's
# cache instead, so that a run writes nothing into the checkout. Read when its plugin first collects, after this.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(default_cache() / "hypothesis"))


# Capabilities the suite brings up itself where it can (tools/ci/engine.sh, the emulated root file systems, act's
# runner user: checks/rehearse_ci.py): where it cannot (not root, no apt-get, no password-free sudo), their tests are
# SKIPPED by name with the reason; where a capability is named here (`.ci/run` names them all), such a skip is a
# FAILURE instead.
REQUIRE = {c.strip() for c in os.environ.get("OEQ_WHEELS_TEST_REQUIRE", "").split(",") if c.strip()}
CAPABILITIES = ("engines", "emulation", "act")
unknown = REQUIRE - set(CAPABILITIES)
if unknown:
    raise pytest.UsageError(f"OEQ_WHEELS_TEST_REQUIRE names {', '.join(sorted(unknown))}; it takes "
                            f"{', '.join(CAPABILITIES)}")


def unavailable(capability: str, reason: str):
    """This test's capability cannot be had here: a skip with the reason, or a failure where it is required."""
    if capability in REQUIRE:
        pytest.fail(f"{capability} required (OEQ_WHEELS_TEST_REQUIRE) but not available: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def emulation():
    """qemu-user and Debian's arm64 root file systems: brought up by the tests themselves where root (or a
    password-free sudo) can install them; elsewhere these tests are skipped by name, or fail where required."""
    arch = pins_mod.load().arches["aarch64"]
    if debian.as_root() is None and not shutil.which(arch.qemu):
        unavailable("emulation", f"{arch.qemu} is missing and installing qemu-user-static and debootstrap needs root "
                                 "(the test command installs them as root)")
    return arch


def run_cli(*args, env=None, cwd=None):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(RUNTIME)]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "oeq_wheels", *args], capture_output=True, text=True,
                          env=e, cwd=cwd or REPO)


@pytest.fixture(scope="session")
def cache() -> Path:
    return default_cache()


@pytest.fixture(scope="session", autouse=True)
def _kept_work_in_basetemp(tmp_path_factory):
    """What a check keeps on purpose (a failed install's venv, ~5 GB) goes under this session's base folder, which
    the next session removes (pyproject.toml: tmp_path_retention_count), rather than into /tmp for good."""
    kept = tmp_path_factory.getbasetemp() / "kept"
    kept.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:  # the session-wide monkeypatch: restored as it was at the end
        mp.setenv(KEEP_DIR_VAR, str(kept))
        yield


@pytest.fixture(scope="session")
def cp311_wheel(tmp_path_factory, cache) -> Path:
    """The wheel for CPython 3.11 (the same run builds every OEq line's cp311 wheel: cu130 for x86_64 and,
    cross-compiled, aarch64; cu128), with the pipeline's own cache: the objects `make wheels` left, else compiled
    there. The suite's real compile in an empty object cache is resumed_build (below), held byte-identical
    to this one by test_interrupts.py."""
    out = tmp_path_factory.mktemp("wheels") / "dist"
    # One worker at a time (all share the session's base folder): the first compiles what the cache lacks, the
    # others wait and then only link, instead of compiling the same objects at once on the same cores.
    with locked(tmp_path_factory.getbasetemp().parent / "cp311-build"):
        rows, failures = build.run(build.Options(out, ["3.11"], cache=cache))
    assert not failures, failures
    pins = pins_mod.load()
    assert len(rows) == len(pins.ext_variants) + 2 * len(pins.oeq_lines)  # each line's wheel and its variant
    (whl,) = out.glob("*.whl")
    return whl


@pytest.fixture(scope="session")
def resumed_build(tmp_path_factory, cache):
    """The suite's one independent second build: the cp311 set (every line and architecture) in an object cache of
    its own, stopped with SIGTERM while the compilers run, then run again to the end. Records what the interrupt
    left (for the interrupt test); returns the finished OUTDIR (for the reproducibility test), those facts and its
    cache, whose objects are the cp311 ones alone (test_build's failing-CPython build starts from them).
    Its input trees are its own, linked from the shared member and stub stores (nothing fetched or stored again);
    that members and whole files give the same wheels is tests/unit/test_members.py's (and bench/run.py --fetch-equal's)."""
    root = tmp_path_factory.mktemp("resumed")
    c = private_cache(root / "cache", cache, share=("downloads", "members", "stubs", "buildroot"))
    out, tmp = root / "dist", root / "tmp"
    p = cli(["build", out, "--python", "3.11", "--runner", "host"], c, tmp)
    seen = wait_for(p, r"\[cp311\] compile +started")
    # Stopped once a compiler is at work (waited for, not timed: a loaded machine starts it later).
    deadline = time.monotonic() + 300
    running = processes_of(tmp, but=p.pid)
    while not any("cc1plus" in c for c in running) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
        running = processes_of(tmp, but=p.pid)
    p.send_signal(signal.SIGTERM)
    rc, err = finish(p, seen)
    facts = dict(running=running, rc=rc, err=err, left=processes_of(tmp), wheels=wheels_in(out),
                 hidden=hidden(out, extra_dir(out), c / "objects"), tmp=list(tmp.iterdir()))
    # The next run uses what the interrupted one left.
    p = cli(["build", out, "--python", "3.11", "--runner", "host", "-q"], c, tmp)
    facts["resumed"] = finish(p, [])
    return out, facts, c


def oeq_wheel_of(outdir: Path, line: str, arch: str = "x86_64", tag: str = "*") -> Path:
    """The one binary openequivariance wheel of an OEq line (cu130, cu128), architecture and Python tag (cp311-cp311;
    any, where outdir holds one CPython's build) in outdir's OUTDIR-extra."""
    version = pins_mod.load().oeq_line(line, arch).version(pins_mod.load().oeq.version)
    (whl,) = extra_dir(outdir).glob(f"openequivariance-{version}-{tag}-*_{arch}.whl")
    return whl


@pytest.fixture(scope="session")
def cp311_oeq_wheel(cp311_wheel) -> Path:
    """The CUDA 13 line's binary openequivariance wheel for CPython 3.11, built beside cp311_wheel."""
    return oeq_wheel_of(cp311_wheel.parent, "cu130")


def x86_64_oeq_wheel(tmp_path_factory, cache, python: str) -> Path:
    """The CUDA 13 line's x86_64 wheel of one CPython, built with every line's beside it."""
    out = tmp_path_factory.mktemp(f"py{python}") / "dist"
    with locked(tmp_path_factory.getbasetemp().parent / "cp311-build"):  # one build at a time, as cp311_wheel
        rows, failures = build.run(build.Options(out, [python], cache=cache, arches=["x86_64"]))
    assert not failures, failures
    return oeq_wheel_of(out, "cu130")


@pytest.fixture(scope="session")
def abi3_oeq_wheel(tmp_path_factory, cache) -> Path:
    """The CUDA 13 line's stable-ABI x86_64 wheel (cp312-abi3: CPython 3.12 and every later one)."""
    return x86_64_oeq_wheel(tmp_path_factory, cache, "3.12")


@pytest.fixture(scope="session")
def ft_oeq_wheel(tmp_path_factory, cache) -> Path:
    """The CUDA 13 line's free-threaded x86_64 wheel (cp314-cp314t), the cu128 line's beside it."""
    return x86_64_oeq_wheel(tmp_path_factory, cache, "3.14t")


@pytest.fixture(scope="session")
def cp311_oeq_aarch64_wheel(cp311_wheel) -> Path:
    """The CUDA 13 line's aarch64 wheel for CPython 3.11, cross-compiled beside cp311_wheel."""
    return oeq_wheel_of(cp311_wheel.parent, "cu130", "aarch64")


@pytest.fixture(scope="session")
def cp311_oeq_cu12_wheel(cp311_wheel) -> Path:
    """The CUDA 12 line's binary openequivariance wheel for CPython 3.11, built beside cp311_wheel."""
    return oeq_wheel_of(cp311_wheel.parent, "cu128")


@pytest.fixture(scope="session")
def oeq_ops(cache) -> list[str]:
    """Every operator OEq registers under torch.ops.libtorch_tp_jit, read from the pinned sdist's C++ sources
    (tests/oeq_operators.py): what a load must register, exactly."""
    from oeq_wheels.inputs import fetch
    import oeq_operators
    pin = pins_mod.load().oeq
    ops = oeq_operators.from_sdist(fetch.ensure([pin], cache)[pin.file])
    assert ops, f"no {oeq_operators.NAMESPACE} operator found in {pin.file}'s sources"
    return ops


@pytest.fixture(scope="session")
def torch_base(cache) -> Path:
    """The cached venv with the release matrix's torch for CPython 3.11; never installed into (see torch_venv)."""
    from oeq_wheels.checks import venvs
    return venvs.torch_venv(pins_mod.load(), cache)


@pytest.fixture
def torch_venv(torch_base, tmp_path) -> Path:
    """This test's own venv over torch_base: what it installs stays in tmp_path."""
    from oeq_wheels.checks import venvs
    return venvs.overlay(torch_base, tmp_path / "torch-venv")


@pytest.fixture(scope="session")
def libcuda_stub(tmp_path_factory, cp311_wheel) -> Path:
    """A directory with a stub libcuda.so.1 made from the shipped library's own driver symbols."""
    import zipfile
    d = tmp_path_factory.mktemp("stub")
    with zipfile.ZipFile(cp311_wheel) as zf:
        lib = d / "lib.so"
        lib.write_bytes(zf.read("fastmace_oeq_ext/libtorch_tp_jit.so"))
    return driver_stub.stub_for_library(lib, d / "lib").parent


@pytest.fixture(scope="session")
def oeq_stack(torch_base, cp311_wheel, tmp_path_factory, cache) -> Path:
    """A venv over torch_base with OpenEquivariance's Python package, its dependencies and the cp311
    wheel, made once a session; tests use oeq_venv, their own copy of what it adds."""
    from oeq_wheels.checks import venvs
    venv = venvs.overlay(torch_base, tmp_path_factory.mktemp("oeq-stack") / "venv")
    venvs.install_oeq_stack(venv, pins_mod.load(), cache, [cp311_wheel], tmp_path_factory.mktemp("oeqwheel"))
    return venv


@pytest.fixture
def oeq_venv(oeq_stack, tmp_path) -> Path:
    """oeq_stack as this test's own venv: what the test installs or removes stays in tmp_path."""
    from oeq_wheels.checks import venvs
    return venvs.overlay(oeq_stack, tmp_path / "oeq-venv")


@pytest.fixture(scope="session")
def fastmace_base(cache) -> Path:
    """The cached venv: the matrix's torch as PyTorch's index serves it (consumer_torch) and FastMACE for CPython
    3.11; never installed into (see fastmace_venv)."""
    from oeq_wheels.checks import venvs
    return venvs.consumer_venv(pins_mod.load(), cache)


@pytest.fixture
def fastmace_venv(fastmace_base, tmp_path) -> Path:
    """This test's own venv over fastmace_base."""
    from oeq_wheels.checks import venvs
    return venvs.overlay(fastmace_base, tmp_path / "fastmace-venv")


@pytest.fixture(scope="session")
def cp311_plain_oeq(tmp_path_factory, cache) -> Path:
    """OpenEquivariance as a user's sdist build leaves it: the pinned version, no precompiled extension."""
    from oeq_wheels.oeq import wheel as oeqpy
    return oeqpy.build_pure(pins_mod.load(), tmp_path_factory.mktemp("plain-oeq"), cache)


@pytest.fixture
def sentinels(tmp_path) -> tuple[Path, Path]:
    """A bin directory whose g++, c++, ninja and nvcc log their call and fail; and the log."""
    from oeq_wheels.checks import sentinels as s
    log = tmp_path / "sentinel.log"
    return s.make(tmp_path / "sentinel-bin", log), log


@pytest.fixture(scope="session")
def post1_wheel(cache, tmp_path_factory):
    """The owner's published fastmace-oeq-ext (post1) for cp311: the real one, by pins.toml's sha256."""
    pin = pins_mod.load().consumer.published
    from oeq_wheels.inputs import fetch
    return fetch.ensure([pin], cache)[pin.file]


@pytest.fixture(scope="session")
def post1_manifest(post1_wheel) -> dict:
    """post1's own manifest.json: the torch and OEq it was built for, fixed whatever pins.toml's are."""
    import json
    import zipfile
    return json.loads(zipfile.ZipFile(post1_wheel).read("fastmace_oeq_ext/manifest.json"))


@pytest.fixture(scope="session")
def post1_torch(post1_manifest) -> str:
    """The torch post1 was built for, from its own manifest."""
    return post1_manifest["torch"]


UPLOAD_PASSWORD = "pypirc-S3cret-never-printed"


@pytest.fixture
def upload_server(tmp_path):
    """pypiserver on loopback; uploads need user `owner` with UPLOAD_PASSWORD, reading does not; never falls back
    to PyPI. Yields its root URL and its package directory."""
    from passlib.apache import HtpasswdFile
    from oeq_wheels.checks import hosts
    pkgs = tmp_path / "packages"
    pkgs.mkdir()
    ht = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    ht.set_password("owner", UPLOAD_PASSWORD)
    ht.save()
    with hosts.pypiserver(pkgs, tmp_path / "server.log", "-a", "update", "-P", str(tmp_path / "htpasswd"),
                          "--disable-fallback") as url:
        yield url, pkgs


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
    import ast
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return any(isinstance(n, ast.Attribute) and n.attr == "big_disk" for n in ast.walk(node.value))
    return False


BIG_DISK = tuple(sorted(p.stem for p in (REPO / "tests" / "integration").glob("test_*.py")
                        if marks_big_disk(p.read_text())))
# FastMACE's rules install their torches without most of NVIDIA's wheels (a few GB at a time): a chain of their own,
# beside the other multi-GB files' one. Measured on a second run (2026-12-05, 2 cores): 15.1 min instead of 17.4, the
# suite's transient peak 11.0 GiB above the start (one chain: ~10).
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


# The unit tier (tests/unit, `make test-unit`) builds nothing, installs no torch, starts no engine or emulation and
# reaches no network: its tests may not ask for these fixtures (collection fails naming the test), and each runs
# with connections off loopback refused and a dead proxy for the programs it starts.
UNIT_TIER = REPO / "tests" / "unit"
INTEGRATION_ONLY = {"cache", "cp311_wheel", "resumed_build", "cp311_oeq_wheel", "abi3_oeq_wheel", "ft_oeq_wheel",
                    "cp311_oeq_aarch64_wheel",
                    "cp311_oeq_cu12_wheel", "torch_base", "torch_venv", "libcuda_stub", "oeq_stack", "oeq_venv",
                    "fastmace_base", "fastmace_venv", "cp311_plain_oeq", "post1_wheel", "post1_manifest", "post1_torch",
                    "emulation", "oeq_ops"}
OFFLINE = "the unit tier reaches no network (tests/unit); move this test to tests/integration"


def in_unit_tier(item) -> bool:
    return Path(str(item.path)).is_relative_to(UNIT_TIER)


def _loopback(address) -> bool:
    host = address[0] if isinstance(address, tuple) else None
    if host is None:  # AF_UNIX and the like
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def tier_violations(items) -> list[str]:
    """'nodeid asks for FIXTURES' for each unit-tier test that asks for an integration fixture."""
    return sorted(f"{it.nodeid} asks for {', '.join(sorted(INTEGRATION_ONLY & set(it.fixturenames)))}"
                  for it in items if in_unit_tier(it) and INTEGRATION_ONLY & set(it.fixturenames))


@pytest.fixture(autouse=True)
def _unit_tier_offline(request, monkeypatch):
    if not in_unit_tier(request.node):
        yield
        return
    def loopback_only(real):
        def connect(self, address):
            if not _loopback(address):
                raise OSError(f"{OFFLINE}: {address[0]}")
            return real(self, address)
        return connect

    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, loopback_only(getattr(socket.socket, name)))
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(k, "http://127.0.0.1:9")  # discard: nothing answers
    for k in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(k, "127.0.0.1,localhost,::1")
    yield


_MIRROR: list = []  # the run's PyPI mirror, in the process that started it


# Free disk a whole run needs (docs/benchmarks.md, 2026-12-05): its peak is about 33 GiB above empty caches (32.2
# measured); what the caches already hold counts toward that, and what a run installs for a while (8.5 GiB above its
# start, measured; 10 kept) never does.
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


def pytest_configure(config):
    """A whole run's disk is checked first (disk_shortfall). Then one kept mirror of PyPI for the run's installs
    (oeq_wheels.checks.pypi_mirror): started by the process that starts the workers, which inherit its URL;
    OEQ_WHEELS_PYPI_MIRROR=off (or a URL) leaves it out."""
    from oeq_wheels.checks import pypi_mirror
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
    wrong = tier_violations(items)
    if wrong:
        raise pytest.UsageError("a unit test asks for an integration fixture (move it to tests/integration): "
                                + "; ".join(wrong))
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


# The proof table (tests/claims.py): each test's outcome, then each claim's at the end of the run (in the
# process that reports it: the only one without xdist, the controller with it).
_RESULTS: dict[str, tuple[str, str]] = {}
# nodeid -> the sonames a test recorded (record_property) under each of claims.NOTES: its load stubs, the real
# NVIDIA libraries it saw loaded; the proof table prints them under the test's row.
_NOTES: dict[str, dict[str, list[str]]] = {}


def _reports(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_runtest_logreport(report):
    import claims
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
        import claims
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
