"""Progress a person can follow: stage lines, the heartbeat, -q and -v."""
import re
import time

from support.cli import run_cli
from oeq_wheels import progress, proc


def test_stage_prints_start_and_end_and_a_heartbeat_when_quiet_too_long(capsys, monkeypatch):
    """A stage quiet past HEARTBEAT_S is named by the heartbeat: waited for, not timed (a loaded machine is slow)."""
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    err = ""
    with progress.Stage("cp311", "compile", detail=lambda: "3 of 4 objects"):
        deadline = time.monotonic() + 60
        while "still running" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
    err += capsys.readouterr().err
    assert "[cp311] compile  started" in err
    assert re.search(r"still running: \[cp311\] compile \d+s \(3 of 4 objects\)", err), err
    assert re.search(r"\[cp311\] compile  ok +\d+\.\ds", err), err


def test_quiet_hides_progress_but_not_warnings_and_verbose_shows_commands(capsys):
    try:
        progress.set_level(progress.QUIET)
        with progress.Stage("all", "fetch"):
            progress.warn("a warning")
        assert capsys.readouterr().err == "a warning\n"
        progress.set_level(progress.VERBOSE)
        proc.run(["true"])
        assert "$ true" in capsys.readouterr().err
    finally:
        progress.set_level(progress.NORMAL)


def test_download_progress_reads_pips_raw_lines():
    from oeq_wheels.inputs.fetch import _Progress
    p = _Progress()
    p.start("torch.whl")
    p.line("torch.whl", "Progress 50000000 of 100000000")
    assert re.fullmatch(r"downloading torch\.whl 50/100 MB at [\d.]+ MB/s", p.detail())
    p.line("torch.whl", "Progress 100000000 of 100000000")
    assert p.finish("torch.whl").startswith("100 MB in")


def test_q_and_v_are_accepted_before_and_after_the_verb():
    for args in (["-q", "pythons"], ["pythons", "-q"], ["pythons", "-v"]):
        r = run_cli(*args)
        assert r.returncode == 0 and "3.11" in r.stdout, (args, r.stderr)
    r = run_cli("pythons", "-q", "-v")
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_every_verb_has_help():
    from oeq_wheels.cli import parser
    sub = next(a for a in parser()._actions if a.dest == "cmd")
    for verb in sub.choices:
        r = run_cli(verb, "--help")
        assert r.returncode == 0 and r.stdout.startswith("usage: oeq-wheels " + verb), verb
        assert "--quiet" in r.stdout, verb


def test_every_verb_has_its_own_function():
    """cli.VERBS maps each verb of the parser to one function, and nothing else (a verb added to one and not the
    other fails here, not at a user's first call)."""
    from oeq_wheels.cli import VERBS, parser
    sub = next(a for a in parser()._actions if a.dest == "cmd")
    assert set(VERBS) == set(sub.choices)
    assert len(set(VERBS.values())) == len(VERBS)
