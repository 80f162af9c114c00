"""Records of runs made elsewhere (the GPU machine, a release host): data, not prose.

A record is one JSON file under records/runs/, written by the tool that ran (tools/gpu_check.py,
tools/gpu_fastmace.sh through tools/run_record.py): when and from which commit it ran, on what machine, each
wheel's sha256 as computed where it ran, and each result. docs/validation.md's sentences about such a run are
checked against its record by tests, and the proof table of `make test` prints each record an ELSEWHERE row names
with its date and whether its wheels are today's bytes (records/release.json): CURRENT, or STALE naming the first
wheel that is not.

Standard library only: tests/support/claims.py reads it while judging the suite.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from ..errors import RecordError, UsageError
from ..release import recorded as recorded_mod

SCHEMA = "oeq-wheels-run-record/1"
DIR = Path(__file__).resolve().parents[2] / "records" / "runs"
RELATIVE = "records/runs"
MAX_BYTES = 4 << 20  # a record is a few kB to a few hundred kB; anything larger is not one
MACHINE_KEYS = ("device", "driver", "python", "torch")


@dataclasses.dataclass(frozen=True)
class RunRecord:
    path: Path
    tool: str
    date: str
    commit: str
    machine: dict
    wheels: dict[str, str]  # file name -> sha256 computed where it ran
    ok: bool
    results: dict
    notes: list[str]

    def staleness(self, today: recorded_mod.Recorded) -> list[str]:
        """Why this record's wheels are not today's bytes, a line per wheel; empty when every one is."""
        out = []
        for name, digest in sorted(self.wheels.items()):
            want = today.wheels.get(name)
            if want is None:
                out.append(f"{name} is not a file of today's recorded set")
            elif want != digest:
                out.append(f"{name} ran as {digest[:16]}…, today's bytes are {want[:16]}…")  # 16: tell apart
        return out

    def summary(self, today: recorded_mod.Recorded) -> str:
        """One line for the proof table: the record, its date, its verdict and CURRENT or STALE."""
        stale = self.staleness(today)
        return (f"{RELATIVE}/{self.path.name} ({self.date}, {'ok' if self.ok else 'FAILED'}, "
                + ("CURRENT" if not stale else f"STALE: {stale[0]}" + (f" (+{len(stale) - 1})" if len(stale) > 1 else ""))
                + ")")


def parse(data: bytes, path: Path) -> RunRecord:
    """A run record from a file's bytes; RecordError naming the file and the problem otherwise."""
    where = f"{RELATIVE}/{path.name}"
    if len(data) > MAX_BYTES:
        raise RecordError(f"{where} is {len(data)} bytes, over {MAX_BYTES}: not a run record")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"{where} is not JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise RecordError(f"{where} is not a run record: its \"schema\" must be {SCHEMA!r}")
    problems = []
    if not isinstance(raw.get("tool"), str) or not raw.get("tool"):
        problems.append("\"tool\" (the command that ran) is missing")
    if not (isinstance(raw.get("date"), str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["date"])):
        problems.append("\"date\" must be YYYY-MM-DD")
    if not (isinstance(raw.get("commit"), str) and re.fullmatch(r"[0-9a-f]{40}", raw["commit"])):
        problems.append("\"commit\" must be the 40-hex commit the tool ran from")
    machine = raw.get("machine")
    if not isinstance(machine, dict) or not all(isinstance(machine.get(k), str) and machine[k] for k in MACHINE_KEYS):
        problems.append(f"\"machine\" must name {', '.join(MACHINE_KEYS)}")
    wheels = raw.get("wheels")
    if not isinstance(wheels, dict) or not wheels or not all(
            isinstance(k, str) and k.endswith(".whl") and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)
            for k, v in wheels.items()):
        problems.append("\"wheels\" must map each wheel's file name to the sha256 computed where it ran")
    if not isinstance(raw.get("ok"), bool):
        problems.append("\"ok\" must be true or false")
    if not isinstance(raw.get("results"), dict):
        problems.append("\"results\" must be an object")
    notes = raw.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        problems.append("\"notes\" must be a list of sentences")
    if problems:
        raise RecordError(f"{where}: {'; '.join(problems)}")
    return RunRecord(path, raw["tool"], raw["date"], raw["commit"], machine, dict(wheels), raw["ok"],
                     raw["results"], list(notes))


def write(path: Path, tool: str, commit: str, machine: dict, wheels: list[Path], ok: bool, results: dict,
          notes: list[str], date: str | None = None) -> RunRecord:
    """Write a run record (whole, or nothing: a temporary file renamed) and read it back as every reader will."""
    import hashlib
    import time

    from ..files import write_atomic
    record = {"schema": SCHEMA, "tool": tool, "date": date or time.strftime("%Y-%m-%d"), "commit": commit,
              "machine": machine, "ok": ok, "results": results, "notes": notes,
              "wheels": {w.name: hashlib.sha256(Path(w).read_bytes()).hexdigest() for w in wheels}}
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"  # ASCII: json's default
    rec = parse(text.encode(), Path(path))  # a record this module would refuse is never written
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), text)
    return rec


def checkout_commit() -> str:
    """The commit of this checkout, for a record made here; UsageError where it has none or has changes (a record
    names the exact code that ran)."""
    from .. import proc
    repo = DIR.parents[1]
    try:
        head = proc.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = proc.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True)
    except OSError:
        raise UsageError("a run record names its commit, and git is not here; install git") from None
    if head.returncode != 0:
        raise UsageError(f"a run record names its commit, and {repo} is no git checkout; run from a clone")
    if dirty.stdout.strip():
        raise UsageError("a run record names the exact code that ran, and this checkout has uncommitted changes: "
                         "commit or stash them first")
    return head.stdout.strip()


def load(path: Path) -> RunRecord:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot read {path} ({exc.strerror or exc})") from None
    return parse(data, Path(path))


def all_records(directory: Path | None = None) -> list[RunRecord]:
    return [load(p) for p in sorted(Path(directory or DIR).glob("*.json"))]


def named_in(text: str) -> list[str]:
    """The run records a sentence (a claim row's `elsewhere`) names: records/runs/NAME.json."""
    return re.findall(rf"{re.escape(RELATIVE)}/([\w.+-]+\.json)", text)


@dataclasses.dataclass
class Described:
    text: str            # the sentence, each record it names replaced by its summary
    broken: list[str]    # records named that are missing, unreadable, or say their run failed
    stale: list[str]     # records named whose wheels are not today's bytes


def describe(text: str, directory: Path | None = None, today: recorded_mod.Recorded | None = None) -> Described:
    """A sentence (a claim row's `elsewhere`) with each run record it names summarised in place."""
    out = Described(text, [], [])
    for name in named_in(text):
        try:
            rec = load(Path(directory or DIR) / name)
            today = today or recorded_mod.load()
            line = rec.summary(today)
            if not rec.ok:
                out.broken.append(name)
            if rec.staleness(today):
                out.stale.append(name)
        except (RecordError, UsageError) as exc:
            line = f"{RELATIVE}/{name} (UNREADABLE: {exc})"
            out.broken.append(name)
        out.text = out.text.replace(f"{RELATIVE}/{name}", line, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    """python3 -s -m oeq_wheels.checks.run_records [FILE...]: each record's line; exit 1 if any is unreadable."""
    import sys
    files = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or sorted(DIR.glob("*.json"))
    today, rc = recorded_mod.load(), 0
    for f in files:
        try:
            rec = load(f)
            tool = rec.tool.split(" --note", 1)[0]  # the notes are in the file; the line names the command
            print(f"{rec.summary(today)}  {tool}; {rec.machine['device']}, torch {rec.machine['torch']}")
        except RecordError as exc:
            print(f"oeq-wheels: error: {exc}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
