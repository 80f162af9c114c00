"""README's test command brings up a real container engine of its own (tools/ci/engine.sh), or says in one
line why it cannot, and the tests go on: here with fake engines and a bare PATH."""
import os
import shutil
import subprocess
import sys

from support import REPO

ENGINE_SH = str(REPO / "tools" / "ci" / "engine.sh")


def bare_path(tmp_path, uid: int, apt_log=None, tools=None):
    """A PATH with a shell and coreutils but no engine; `id -u` says uid; apt-get records its call and fails as
    apt does; `tools` are more fake programs (name -> shell body)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("bash", "env", "dirname", "cat", "mktemp", "mkdir", "rm", "seq", "sleep", "grep", "tail", "kill",
                 "printf", "sha256sum", "cut", "chmod", "awk", "sort", "xargs"):
        os.symlink(shutil.which(tool), bin_ / tool)
    (bin_ / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if apt_log:
        (bin_ / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {apt_log}\n'
                                      '[ "$1" = install ] && echo "E: Unable to locate package $4"\nexit 100\n')
    for name, body in (tools or {}).items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
    for f in bin_.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return str(bin_)


def engine_up(path, tmp_path):
    script = (f"source {ENGINE_SH}; engine_up; echo rc=$?; echo DOCKER=$OEQ_WHEELS_ENGINE_DOCKER; "
              "echo PODMAN=$OEQ_WHEELS_ENGINE_PODMAN; engine_down")
    return subprocess.run(["bash", "-c", script], env={"PATH": path, "HOME": "/nonexistent",
                                                       "OEQ_WHEELS_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=120)


def states(r) -> dict:
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if line.startswith(("DOCKER=", "PODMAN=")))


def test_not_root_both_engines_are_a_named_skip(tmp_path):
    r = engine_up(bare_path(tmp_path, 1000), tmp_path)
    assert r.stderr.strip().splitlines() == [
        "test.sh: no container engine of our own (needs root or password-free sudo, and apt-get); the real-engine "
        "tests skip"]
    reason = ("skip: no container engine of our own: starting one needs root (or password-free sudo) and apt-get "
              "(tools/ci/engine.sh)")
    assert "rc=0" in r.stdout and states(r) == {"DOCKER": reason, "PODMAN": reason}


def test_as_root_a_failed_install_is_a_failure_naming_apt_and_its_last_line(tmp_path):
    log = tmp_path / "apt.log"
    r = engine_up(bare_path(tmp_path, 0, log), tmp_path)
    assert "installing docker.io debootstrap podman runc (Debian packages)" in r.stderr
    assert "install -y -qq docker.io debootstrap podman runc" in log.read_text()
    why = ("fail: apt-get install docker.io debootstrap podman runc failed: "
           "E: Unable to locate package docker.io")
    assert states(r) == {"DOCKER": why, "PODMAN": why}, r.stdout + r.stderr


def test_a_dockerd_that_cannot_start_and_a_missing_podman_fail_with_why(tmp_path):
    log = tmp_path / "apt.log"
    path = bare_path(tmp_path, 0, log, tools={
        "dockerd": 'echo "failed to start daemon: error initializing graphdriver: no space left" >&2; exit 1',
        "docker": "exit 1", "debootstrap": "exit 0", "runc": "exit 0"})
    r = engine_up(path, tmp_path)
    got = states(r)
    assert got["DOCKER"] == ("fail: dockerd did not start (overlay2, then vfs): failed to start daemon: error "
                             "initializing graphdriver: no space left"), r.stdout + r.stderr
    assert got["PODMAN"] == "fail: apt-get install podman failed: E: Unable to locate package podman"


def test_not_root_with_password_free_sudo_the_engines_come_up_through_sudo(tmp_path):
    """GitHub's runner: not root, password-free sudo. The daemon and podman run through sudo, the socket is the
    user's group's."""
    log = tmp_path / "sudo.log"
    path = bare_path(tmp_path, 1000, tools={
        "sudo": f'echo "$*" >> {log}; [ "$1" = -n ] && shift; exec "$@"', "true": "exit 0",
        "dockerd": "exec sleep 30", "docker": "exit 0", "debootstrap": "exit 0", "runc": "exit 0",
        "podman": "exit 0", "apt-get": "exit 0"})
    r = engine_up(path, tmp_path)
    assert states(r) == {"DOCKER": "up", "PODMAN": "up"}, r.stdout + r.stderr
    calls = log.read_text()
    assert "/bin/dockerd -H unix://" in calls and "--group 1000" in calls and "-n env CONTAINERS_CONF=" in calls
    assert "through sudo" in r.stderr


def test_engines_that_come_up_are_up(tmp_path):
    path = bare_path(tmp_path, 0, tools={
        "dockerd": "exec sleep 30", "docker": "exit 0", "debootstrap": "exit 0", "runc": "exit 0",
        "podman": "exit 0", "apt-get": "exit 0"})
    r = engine_up(path, tmp_path)
    assert states(r) == {"DOCKER": "up", "PODMAN": "up"}, r.stdout + r.stderr


def test_the_suites_processes_write_no_bytecode():
    """The test command sets PYTHONDONTWRITEBYTECODE: with bytecode written, a worker importing a module of the
    repository for the first time adds a __pycache__ to it while tests/integration/test_container.py checks that a build wrote
    nothing there, and a test importing from a cached venv changes that venv."""
    assert sys.flags.dont_write_bytecode
    r = subprocess.run([sys.executable, "-c", "import sys; print(sys.flags.dont_write_bytecode)"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "1", r.stdout + r.stderr


def test_as_root_with_apt_the_test_command_requires_every_capability_by_default():
    """Where the suite can bring engines, emulation and act's runner user up itself, failing to is a failure unless the
    caller says otherwise (OEQ_WHEELS_TEST_REQUIRE set, even empty)."""
    script = (f'source {REPO / "tools/ci/require.sh"}; echo "R=${{OEQ_WHEELS_TEST_REQUIRE-unset}}"')
    for uid, apt, preset, want in ((0, True, None, "engines,emulation,act"), (1000, True, None, "unset"),
                                   (0, False, None, "unset"), (0, True, "", ""), (0, True, "engines", "engines")):
        env = {"PATH": "/usr/bin:/bin", "OEQ_TEST_UID": str(uid), "OEQ_TEST_APT": "1" if apt else ""}
        if preset is not None:
            env["OEQ_WHEELS_TEST_REQUIRE"] = preset
        r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
        assert r.stdout.strip() == f"R={want}", (uid, apt, preset, r.stdout, r.stderr)


def test_the_workers_units_name_test_files_that_exist():
    """tests/plugin.py's units of work for the test command's workers: a test file renamed without its entry would
    leave its unit silently (a multi-GB file then running beside another), and an order naming no unit orders
    nothing."""
    from support import plugin
    stems = {p.stem for p in (REPO / "tests").glob("*/test_*.py")}
    assert len(stems) == len(list((REPO / "tests").glob("*/test_*.py")))  # a unit is a stem: both tiers' differ
    assert set(plugin.SHARED_UNIT) <= stems, set(plugin.SHARED_UNIT) - stems
    units = {plugin.unit_of(f"tests/{s}.py::t") for s in stems}
    assert set(plugin.LONGEST_FIRST) <= units, set(plugin.LONGEST_FIRST) - units
    assert plugin.unit_of("tests/test_interrupts.py::t") == plugin.unit_of("tests/test_build.py::t")
    # The multi-GB files: one chain, and each of OWN_CHAIN's its own (so at most 1 + len(OWN_CHAIN) at once).
    assert set(plugin.OWN_CHAIN) <= set(plugin.BIG_DISK)
    chains = {plugin.unit_of(f"tests/{s}.py::t") for s in plugin.BIG_DISK}
    assert len(chains) == 1 + len(set(plugin.OWN_CHAIN.values())), chains


def test_the_pinned_xdist_still_splits_scopes_where_the_units_hook_in():
    """The scheduler (tests/plugin.py pytest_xdist_make_scheduler) overrides pytest-xdist's private
    LoadScopeScheduling._split_scope. An xdist that stopped calling it would split by file again, silently: the
    big-disk files would then run beside each other. The pin is hash-locked; this holds an update to it."""
    import inspect

    from support import plugin
    from xdist.scheduler import LoadScopeScheduling
    assert "self._split_scope(" in inspect.getsource(LoadScopeScheduling)
    assert inspect.signature(LoadScopeScheduling._split_scope).parameters.keys() == {"self", "nodeid"}
    assert "def _split_scope(self, nodeid: str)" in inspect.getsource(plugin.pytest_xdist_make_scheduler)


def test_make_test_passes_pytest_arguments_through():
    """A contributor's loop: `make test ARGS='-k name tests/test_x.py'` runs the same test command on a selection."""
    # As a top-level make: inside `make test`, MAKEFLAGS and ARGS would come with the environment.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "ARGS")}
    make = ["make", "--no-print-directory", "-n", "test"]
    r = subprocess.run([*make, "ARGS=-k verify tests/integration/test_verify.py"], cwd=REPO, capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0 and r.stdout.strip() == "tools/ci/test.sh -k verify tests/integration/test_verify.py", r.stdout
    r = subprocess.run(make, cwd=REPO, capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "tools/ci/test.sh"  # README's command, unchanged


# What makes a multi-GB tree outside the shared caches for a while, as a test calls it: a test file calling one of
# these carries `pytestmark = pytest.mark.big_disk` (tests/plugin.py), so that it never runs beside another.
HEAVY = {
    "installmatrix.run(": "installs each torch with pip or uv into temporary venvs (pip without a cache)",
    "emulated_pypi_torch_venv(": "the emulated aarch64 torch stack",
    "transient=": "a torch venv and its own uv cache in the test's folder",
    'run_cli("rehearse"': "README's install line with pip: torch and its NVIDIA wheels from the registry",
    "clean_install.sh": "FastMACE's install steps in a fresh venv",
    'run_cli("install-matrix"': "the install matrix",
}


def heavy_unmarked(files) -> list[str]:
    from support import plugin
    return [f"{f.name} calls {call} ({why}) without pytestmark = pytest.mark.big_disk" for f in files
            for call, why in HEAVY.items() if call in f.read_text() and not plugin.marks_big_disk(f.read_text())]


def test_a_test_file_that_makes_multi_gb_trees_says_so():
    from support import plugin
    assert not heavy_unmarked(sorted((REPO / "tests" / "integration").glob("test_*.py")))
    assert {"test_aarch64", "test_fastmace_rules", "test_install_matrix"} <= set(plugin.BIG_DISK)


def test_an_unmarked_heavy_test_file_is_named(tmp_path):
    plain = tmp_path / "test_new.py"
    plain.write_text("from oeq_wheels.release import installmatrix\n\ndef test_x():\n    installmatrix.run([])\n")
    marked = tmp_path / "test_marked.py"
    marked.write_text("import pytest\n\npytestmark = pytest.mark.big_disk\n" + plain.read_text())
    in_a_string = tmp_path / "test_string.py"  # the mark's line inside a script the test runs is no mark
    in_a_string.write_text('SCRIPT = """\nimport x\n\npytestmark = pytest.mark.big_disk\n"""\n' + plain.read_text())
    assert heavy_unmarked([plain, marked, in_a_string]) == [
        f"{name} calls installmatrix.run( (installs each torch with pip or uv into temporary venvs (pip without a "
        "cache)) without pytestmark = pytest.mark.big_disk" for name in ("test_new.py", "test_string.py")]


def test_a_whole_run_needs_the_disk_its_measured_peak_asks_less_what_the_caches_hold():
    from support import plugin
    assert plugin.disk_need_gib(0) == plugin.EMPTY_CACHE_PEAK_GIB  # empty caches: the whole peak
    assert plugin.disk_need_gib(plugin.EMPTY_CACHE_PEAK_GIB - 20) == 20
    assert plugin.disk_need_gib(30) == plugin.RUN_TRANSIENT_GIB  # filled caches: what a run installs for a while


def test_too_little_free_disk_is_one_line_naming_the_need_and_the_fix(tmp_path, monkeypatch):
    import collections
    from support import plugin
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(plugin.shutil, "disk_usage", lambda p: usage(0, 0, 9 * plugin.GIB))
    why = plugin.disk_shortfall(tmp_path / "no-cache-yet" / "oeq-wheels", tmp_path)
    assert why and "\n" not in why and "9.0 GiB free" in why and f"about {plugin.EMPTY_CACHE_PEAK_GIB} GiB there" \
        in why and "make test-unit" in why, why
    monkeypatch.setattr(plugin.shutil, "disk_usage", lambda p: usage(0, 0, 40 * plugin.GIB))
    assert plugin.disk_shortfall(tmp_path / "no-cache-yet" / "oeq-wheels", tmp_path) is None


def test_the_whole_suite_is_refused_before_it_starts_where_the_disk_is_short_and_a_selection_is_not(monkeypatch):
    import types
    from support import plugin
    import pytest
    from support import pypi_mirror
    monkeypatch.setenv(pypi_mirror.ENV, "off")  # no mirror started by the calls below
    monkeypatch.setattr(plugin, "disk_shortfall", lambda cache, tmp: "1.0 GiB free where / is; ...")
    whole = types.SimpleNamespace(args_source=pytest.Config.ArgsSource.TESTPATHS)
    with pytest.raises(pytest.UsageError, match="not enough free disk for the whole suite: 1.0 GiB free"):
        plugin.pytest_configure(whole)
    plugin.pytest_configure(types.SimpleNamespace(args_source=pytest.Config.ArgsSource.ARGS))  # make test ARGS=FILE
