"""One error module (oeq_wheels/errors.py): every error a user can meet is a class there with its exit code, the CLI
catches them once and exits with the class's code; a failed check exits 1, a usage error 2."""
import ast
import builtins
import inspect
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from oeq_wheels import cli, errors, pins as P
from oeq_wheels.settings import KEEP_DIR
from oeq_wheels.release import publish

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "oeq_wheels"

# Each class of errors.py with its exit code, once: a change of code must change this table.
EXIT_CODES = {
    "OeqWheelsError": 1,
    "UsageError": 2,
    "PinsError": 2,
    "RepinError": 2,
    "PythonNotFound": 2,
    "Refused": 1,
    "SiteError": 1,
    "ReleaseError": 1,
    "BuildError": 1,
    "CompileError": 1,
    "LinkError": 1,
    "StableBuildError": 1,
    "VariantError": 1,
    "BuildRootError": 1,
    "BuildImageError": 1,
    "ImageUnavailable": 1,
    "DriverStubError": 1,
    "FetchError": 1,
    "InputError": 1,
    "MemberError": 1,
    "Unsupported": 1,
    "LinkStubError": 1,
    "FreeThreadedError": 1,
    "RegistryError": 1,
    "CompareError": 1,
    "ReversionError": 1,
    "RecordError": 1,
    "EmulationError": 1,
    "LoaderStubError": 1,
    "HostError": 1,
    "RehearsalError": 1,
    "CIRehearsalError": 1,
    "LastMileError": 1,
    "Interrupted": 130,
}

# Exception classes defined outside errors.py, each with why it never reaches the user as an error of its own.
INTERNAL: dict[str, str] = {}


def error_classes() -> dict[str, type]:
    return {n: c for n, c in vars(errors).items()
            if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == errors.__name__}


def test_every_class_of_errors_py_has_the_exit_code_of_the_table():
    classes = error_classes()
    assert sorted(classes) == sorted(EXIT_CODES), "errors.py and the table name other classes"
    assert all(issubclass(c, errors.OeqWheelsError) for c in classes.values())  # what the CLI catches
    assert {n: c.exit_code for n, c in classes.items()} == EXIT_CODES
    # The usage errors are exactly UsageError's family: a subclass cannot silently change family.
    assert {n for n, c in classes.items() if issubclass(c, errors.UsageError)} == \
        {n for n, code in EXIT_CODES.items() if code == 2}


def is_exception_base(base: ast.expr, known: set[str]) -> bool:
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
    builtin = getattr(builtins, name, None)
    return name in known or name.endswith(("Error", "Exception")) or \
        (inspect.isclass(builtin) and issubclass(builtin, BaseException))


def exception_classes_defined(root: Path, known: set[str]) -> list[tuple[str, str]]:
    """(file, class name) of every exception class defined under root, by its source (nothing imported)."""
    out, found = [], True
    while found:  # a subclass of a class found here is an exception class too
        found = False
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and node.name not in known and \
                        any(is_exception_base(b, known) for b in node.bases):
                    known.add(node.name)
                    found = True
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name in known:
                out.append((path.relative_to(REPO).as_posix(), node.name))
    return out


def test_every_exception_class_of_the_package_is_in_errors_py_or_named_internal():
    defined = exception_classes_defined(PACKAGE, set(EXIT_CODES))
    outside = {name: f for f, name in defined if f != "oeq_wheels/errors.py"}
    assert sorted(outside) == sorted(INTERNAL), f"move these to oeq_wheels/errors.py (or name why not): {outside}"
    assert len(defined) == len(EXIT_CODES) + len(INTERNAL), defined  # found by the scan, each once


def test_no_two_exception_classes_share_a_name():
    """Across the pipeline and the runtime package, so that a name in a traceback or a test is one class."""
    defined = [n for f, n in exception_classes_defined(REPO / "oeq_wheels", set(EXIT_CODES))] + \
        [n for f, n in exception_classes_defined(REPO / "runtime" / "fastmace_oeq_ext", set())]
    assert sorted(defined) == sorted(set(defined)), sorted(n for n in defined if defined.count(n) > 1)


@pytest.fixture
def quiet_cli(monkeypatch, tmp_path):
    """cli.main in this process: no signal handlers of its own, the run's variables put back afterwards."""
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)
    monkeypatch.setenv(KEEP_DIR, str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(cli.tempfile, "tempdir", str(tmp_path))  # the run's directory is made (and swept) here


@pytest.mark.parametrize("name", sorted(EXIT_CODES))
def test_the_cli_exits_with_the_class_s_code_in_one_line(name, quiet_cli, monkeypatch, capsys):
    cls = error_classes()[name]

    def fails(args):
        raise cls("what went wrong")

    monkeypatch.setattr(cli, "_dispatch", fails)
    assert cli.main(["pythons"]) == EXIT_CODES[name]
    said = capsys.readouterr().err.strip().splitlines()
    if name == "Interrupted":  # its own line: what the stop left behind
        assert len(said) == 1 and said[0].startswith("oeq-wheels: interrupted (what went wrong)"), said
    else:
        assert said == ["oeq-wheels: error: what went wrong"]


def run_cli(*args, env: dict | None = None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "runtime")]), **(env or {}))
    return subprocess.run([sys.executable, "-m", "oeq_wheels", *args], capture_output=True, text=True, env=env,
                          cwd=REPO)


def forged_wheel(directory: Path) -> Path:
    """A wheel of our name and version that no build made: a zip with a module and no .dist-info."""
    pins = P.load()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{pins.package_name.replace('-', '_')}-{pins.version}-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("fastmace_oeq_ext/__init__.py", "print('forged')\n")
    return wheel


def test_a_failed_publish_check_exits_1_and_a_missing_directory_2(tmp_path):
    """`publish` on a build's output that is not a release (a forged wheel, the rest missing) is a failed check: 1.
    It used to exit 2, as if the command line were wrong."""
    out = tmp_path / "dist"
    forged_wheel(out)
    r = run_cli("publish", str(out), "--dry-run")
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("oeq-wheels: error: refusing to publish: ") and "incomplete fastmace-oeq-ext set" in line
    r = run_cli("publish", str(tmp_path / "nothing"), "--dry-run")
    assert r.returncode == 2 and "is not a directory; build first (make wheels)" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_publish_exits_1_when_a_wheel_of_a_complete_set_fails_verification(tmp_path, quiet_cli, monkeypatch,
                                                                              capsys):
    """The gate's own verdict on each wheel (the set's completeness is the test above's): a forged wheel is refused."""
    out = tmp_path / "dist"
    wheel = forged_wheel(out)
    monkeypatch.setattr(publish, "check_set", lambda outdir, pins: ([wheel], []))
    assert cli.main(["publish", str(out), "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert f"FAIL {wheel.name}" in captured.out
    assert captured.err.strip() == (f"oeq-wheels: error: refusing to publish: 1 wheel(s) failed verification: "
                                    f"{wheel.name} (RECORD check failed: 0 .dist-info/RECORD files (exactly one is "
                                    "expected))")
    assert not (out.parent / "dist-extra" / "SHA256SUMS").exists()  # nothing written for a refused set


def test_the_help_s_exit_code_table_is_the_classes():
    """cli.py's docstring (--help) is the one table of exit codes a user reads: a code there for each family here."""
    table = {int(line.split()[0]): line.split(None, 1)[1] for line in cli.__doc__.splitlines()
             if line[:1] == " " and line.split()[0].isdigit()}
    assert sorted(table) == sorted({0} | set(EXIT_CODES.values())), table
    assert "usage" in table[2] and "failed" in table[1] and "interrupted" in table[130]


@pytest.mark.parametrize("args,env,code,said", [
    (["pins", "--check", "--pins", "/nonexistent/pins.toml"], {}, 2, "cannot read pins file /nonexistent/pins.toml"),
    (["fetch"], {"OEQ_WHEELS_CACHE": "/proc/oeq-wheels-nope"}, 1, "cannot make the download cache"),
    (["site", "/nonexistent/dist"], {}, 2, "/nonexistent/dist is not a directory; build first"),
])
def test_reachable_tracebacks_are_one_line(args, env, code, said):
    """Once tracebacks (FileNotFoundError from the pins check and from a cache that cannot be made), and `site` on a
    missing OUTDIR, which exited 1 where `publish` exits 2: each one line now, with the code of its family."""
    r = run_cli(*args, env=env)
    assert r.returncode == code and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("oeq-wheels: error: ") and said in line, line
