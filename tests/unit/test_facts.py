"""Each fact has one home (issue 54): a second spelling of one of these, anywhere in the product, fails here."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("oeq_wheels", "runtime/fastmace_oeq_ext", "bench", "tools")


def modules():
    for top in PRODUCT:
        yield from sorted((REPO / top).rglob("*.py"))


def code_strings(path: Path):
    """(line, text) of each string constant in a module that is not a docstring."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def test_the_driver_soname_is_written_once():
    """libcuda.so.1 as code (a file name, a -l: or -soname argument: no blank in it) only in cudaflags.DRIVER_SONAME;
    prose that names it is free to."""
    home = REPO / "runtime" / "fastmace_oeq_ext" / "cudaflags.py"
    found = [f"{p.relative_to(REPO)}:{line}" for p in modules() if p != home
             for line, s in code_strings(p) if "libcuda.so.1" in s and not any(c.isspace() for c in s)]
    assert not found, f"libcuda.so.1 spelled outside cudaflags.DRIVER_SONAME: {found}"


def test_verify_and_publish_print_a_verdict_one_way(tmp_path):
    """Verdict.said is the one OK/FAIL printout (`verify`, `publish`): its lines as users read them."""
    from oeq_wheels.gate_common import Verdict
    ok = Verdict(tmp_path / "w.whl", facts={"tag": "cp312-cp312-manylinux_2_28_x86_64",
                                            "auditwheel_sym_tag": "manylinux_2_28_x86_64", "torch_abi_audit": "t ok"})
    assert ok.said() == ["OK   w.whl  tag cp312-cp312-manylinux_2_28_x86_64 (auditwheel: manylinux_2_28_x86_64)",
                         "     t ok"]
    bad = Verdict(tmp_path / "w.whl", problems=["a", "b"])
    assert bad.said() == ["FAIL w.whl", "     - a", "     - b"]


def test_which_line_a_wheel_version_is():
    """Pins.line_of, the one answer the gate, publish and the site ask: the exact version, or with any_rebuild the
    label's CUDA part (an earlier rebuild, an ext build naming the line)."""
    from oeq_wheels import pins as pins_mod
    p = pins_mod.load()
    for line in p.oeq_lines:
        version = line.version(p.oeq.version)
        assert p.line_of(version, line.arch.name) == line
        assert p.line_of(version).name == line.name
        cuda, _, n = line.local_version.rpartition(".")
        rebuilt = f"{p.oeq.version}+{cuda}.{int(n) + 7}"
        assert p.line_of(rebuilt) is None
        assert p.line_of(rebuilt, line.arch.name, any_rebuild=True) == line
        assert p.line_of(f"{p.oeq.version}.post9+{cuda}.1.torch0.0.0", any_rebuild=True).name == line.name
    assert p.line_of(f"{p.oeq.version}+oeqwheels.cu99.1", any_rebuild=True) is None


def test_tools_start_through_proc_run():
    """proc.run is the one place a tool is run to its end (stopped with the run, in its own group); a Popen that
    streams (a pipe, a server) is the exception."""
    calls = ("subprocess.run(", "subprocess.call(", "subprocess.check_call(", "subprocess.check_output(")
    found = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "oeq_wheels").rglob("*.py"))
             if p.name != "proc.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if any(c in line for c in calls)]
    assert found == ["oeq_wheels/buildimage.py:" + str(next(
        n for n, l in enumerate((REPO / "oeq_wheels/buildimage.py").read_text().splitlines(), 1)
        if 'subprocess.run(["gzip"' in l))], found


def test_proc_run_feeds_input_and_cleans_up_after_a_stop(monkeypatch):
    import threading

    import pytest

    from oeq_wheels import proc, stop
    assert proc.run(["cat"], input="fed\n", capture_output=True, text=True).stdout == "fed\n"
    monkeypatch.setattr(stop, "_stopped", threading.Event())  # this test's stop, not the session's
    stop.request()
    with pytest.raises(stop.Interrupted):
        proc.run(["true"])
    assert proc.run(["true"], cleanup=True).returncode == 0


def settings_table() -> set[str]:
    """The variables docs/pipeline.md's settings table names (its first column)."""
    text = (REPO / "docs" / "pipeline.md").read_text()
    rows = text[text.index("| variable | what it does |"):].split("\n\n", 1)[0].splitlines()[2:]
    return {r.split("|")[1].strip().strip("`") for r in rows}


def test_the_settings_table_names_what_settings_reads():
    from oeq_wheels import settings
    assert settings_table() == set(settings.NAMES)


def test_only_settings_reads_an_oeq_wheels_variable():
    """An OEQ_WHEELS_* name as code (no blank in the string) only in settings.py: prose may name one."""
    found = [f"{p.relative_to(REPO)}:{line}" for p in sorted((REPO / "oeq_wheels").rglob("*.py"))
             if p.name != "settings.py"
             for line, s in code_strings(p) if "OEQ_WHEELS_" in s and not any(c.isspace() for c in s)]
    assert not found, f"read it through oeq_wheels.settings: {found}"
