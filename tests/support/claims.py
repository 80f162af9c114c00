"""The proof table: every "tested"/"proven" sentence of README.md and the docs (tests/claims.toml), the tests that
prove it, and what they did in this run. support/plugin.py records each test's outcome and prints the table at the end
of `make test`; tests/unit/test_claims.py holds the file to the documents and to the tests that exist."""
from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLAIMS_FILE = REPO / "tests" / "claims.toml"
# The documents whose proof sentences must each have an entry.
# Every document but CHANGELOG.md (what was done, not what holds): README and CONTRIBUTING, and docs/.
DOCUMENTS = tuple(sorted(p.relative_to(REPO).as_posix() for p in [*REPO.glob("*.md"), *REPO.glob("docs/*.md")]
                         if p.name != "CHANGELOG.md"))
WORDS = re.compile(r"\b(tested|proven|proves)\b|\(`?make test`?\)", re.I)
NEGATED = re.compile(r"(?:\bnot|\*\*not\*\*)\s+(?:tested|proven)\b", re.I)
MENTIONED = re.compile(r'"(?:tested|proven|proves)"', re.I)  # the word quoted is a mention, not a claim
PROVEN_BY_HEADER = "| | supported | proven by |"
TESTS_LIST_HEADER = "## What make test tests"  # docs/testing.md: each item of its list is a claim


@dataclass
class Row:
    """One case a claim covers (a torch, a CPython, an engine): the tests that prove it here, or where else it is
    proven. A row without tests of its own is ELSEWHERE, whatever checks the claim's text."""
    name: str
    tests: list[str] = field(default_factory=list)  # node ids: tests/<tier>/test_x.py::test_name, optionally [param]
    elsewhere: str = ""


@dataclass
class Claim:
    id: str
    claim: str
    at: list[tuple[str, str]]  # (document, a piece of its text on the claim's line)
    tests: list[str]  # a claim without rows: node ids of its one row
    elsewhere: str = ""  # where else it is proven (the release job, the GPU runbook)
    rows: list[Row] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # tests of the claim's text (a workflow's YAML): not evidence

    def evidence(self) -> list[Row]:
        """The claim's rows; a claim written without rows is one row of its tests (and its elsewhere, if it has
        no tests)."""
        return self.rows or [Row("", list(self.tests), "" if self.tests else self.elsewhere)]


@dataclass
class Outcome:
    state: str  # PASS, PARTIAL, FAIL, SKIPPED, NOT RUN, ELSEWHERE, STALE (a run record of other bytes than today's)
    detail: str = ""
    skipped: list[str] = field(default_factory=list)


def pinned() -> dict:
    """What claims.toml's text may name by placeholder ({floor}, {newest}, ...), from pins.toml: no version is
    spelled twice, and a re-pin moves the rows and the quoted documents' lines with it."""
    from oeq_wheels import pins as pins_mod
    pins = pins_mod.load()
    # The one line's torches (x86_64's): its oldest is PyPI's CUDA 12.8 torch (the line's torch matrix), the rest CUDA 13
    line = pins.oeq_binary
    cu12, cu13 = line.tested_torch[:1], line.tested_torch[1:]
    return {"fastmace": pins.consumer.wheel.version, "matrix_torch": pins.matrix.torch_version, "cuda13": cu13,
            "floor": cu13[0], "newest": cu13[-1], "between": ", ".join(cu13[1:-1]), "cuda12": cu12[0]}


def _rows(entry: dict, values: dict) -> list[Row]:
    """A row, or with `each = "<line>"` one row per torch the line is tested with ({torch} in its text)."""
    torches = values[entry["each"]] if "each" in entry else [None]
    return [Row(fill(entry["name"], values, torch), [fill(t, values, torch) for t in entry.get("tests", [])],
                fill(entry.get("elsewhere", ""), values, torch)) for torch in torches]


def fill(text: str, values: dict, torch: str | None = None) -> str:
    return text.format(**values, **({"torch": torch} if torch else {}))


def load(path: Path = CLAIMS_FILE) -> list[Claim]:
    data, v = tomllib.loads(path.read_text()), pinned()
    return [Claim(c["id"], fill(c["claim"], v), [(doc, fill(text, v)) for doc, text in c["at"]],
                  [fill(t, v) for t in c.get("tests", [])], fill(c.get("elsewhere", ""), v),
                  [row for r in c.get("row", []) for row in _rows(r, v)], list(c.get("checks", [])))
            for c in data["claim"]]


def sentences(document: Path) -> list[str]:
    """The lines that claim a proof: a proof word neither negated ("not proven" says what is not claimed) nor
    quoted, every row of README's "proven by" table (its negative rows too: they name where else it is proven), and
    the first line of every item of its Tests list."""
    out, in_table, in_list = [], False, False
    for line in document.read_text().splitlines():
        if line.startswith("#"):
            in_list = line.strip() == TESTS_LIST_HEADER
        elif in_list and line.startswith("- "):  # an item's first line
            out.append(line)
            continue
        if line.strip() == PROVEN_BY_HEADER:
            in_table = True
            continue
        if in_table and line.startswith("|"):
            if not line.startswith("|---"):
                out.append(line)
            continue
        in_table = False
        if WORDS.search(NEGATED.sub("", MENTIONED.sub("", line))):
            out.append(line)
    return out


def unclaimed(claims: list[Claim], repo: Path = REPO) -> list[str]:
    """Proof sentences of DOCUMENTS with no entry: 'document: line'."""
    out = []
    for doc in DOCUMENTS:
        anchors = [text for c in claims for d, text in c.at if d == doc]
        out += [f"{doc}: {line.strip()[:100]}" for line in sentences(repo / doc) if not any(a in line for a in anchors)]
    return out


def missing_anchors(claims: list[Claim], repo: Path = REPO) -> list[str]:
    """Entries whose text is no longer in their document."""
    return [f"{c.id}: {d} has no {t!r}" for c in claims for d, t in c.at if t not in (repo / d).read_text()]


def test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test_")}


def missing_tests(claims: list[Claim], repo: Path = REPO) -> list[str]:
    """Test ids named by an entry (its rows' and its checks') that do not exist, and rows proven nowhere:
    'claim: id'."""
    out, seen = [], {}
    for c in claims:
        for row in c.evidence():
            if not row.tests and not row.elsewhere:
                out.append(f"{c.id}: {'row ' + repr(row.name) + ' ' if row.name else ''}names no test and nowhere else")
        if c.rows and c.tests:
            out.append(f"{c.id}: has rows and tests of its own; name them in its rows")
        for t in [t for row in c.evidence() for t in row.tests] + c.checks:
            file, _, name = t.partition("::")
            path = repo / file
            if path not in seen:
                seen[path] = test_functions(path) if path.is_file() else set()
            if name.split("[", 1)[0] not in seen[path]:
                out.append(f"{c.id}: {t}")
    return out


def collected(repo: Path = REPO) -> set[str]:
    """Every node id the suite collects (pytest --collect-only, in a process of its own)."""
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only",
                        "-q"], capture_output=True, text=True, cwd=repo,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return {line.strip() for line in r.stdout.splitlines() if "::" in line}


def missing_parameters(claims: list[Claim], repo: Path = REPO) -> list[str]:
    """Ids with a [parameter] that the suite does not collect (the parameter was renamed or left the pins): 'claim: id'."""
    wanted = [(c.id, t) for c in claims for row in c.evidence() for t in row.tests if t.endswith("]")]
    have = collected(repo) if wanted else set()
    return [f"{cid}: {t}" for cid, t in wanted if t not in have]


def _matches(test_id: str, nodeid: str) -> bool:
    return nodeid == test_id or nodeid.startswith(test_id + "[")


def _elsewhere(row: Row) -> Outcome:
    """A row proven elsewhere: ELSEWHERE, each run record it names (records/runs/) with its date and CURRENT or
    STALE against today's recorded bytes; FAIL when a named record is missing, unreadable or says it failed."""
    from oeq_wheels.checks import run_records
    d = run_records.describe(row.elsewhere)
    return Outcome("FAIL" if d.broken else "STALE" if d.stale else "ELSEWHERE", d.text)


def _judge_row(row: Row, results: dict[str, tuple[str, str]]) -> Outcome:
    if not row.tests:
        return _elsewhere(row)
    ran = {n: r for n, r in results.items() if any(_matches(t, n) for t in row.tests)}
    if not ran:
        return Outcome("NOT RUN", "none of its tests was selected")
    failed = sorted(n for n, (s, _) in ran.items() if s == "failed")
    skipped = sorted(f"{n}: {why}" for n, (s, why) in ran.items() if s == "skipped")
    if failed:
        return Outcome("FAIL", ", ".join(failed), skipped)
    if skipped:  # the row as written is not proven by this run (a full run here skips nothing)
        return Outcome("SKIPPED", f"{len(skipped)} of {len(ran)} skipped; {skipped[0]}", skipped)
    absent = [t for t in row.tests if not any(_matches(t, n) for n in ran)]
    if absent:  # a narrowed run (-k, a tier, a file): what it left out is not proven by it
        return Outcome("PARTIAL", f"{len(ran)} test(s); {len(absent)} of its {len(row.tests)} not run: {absent[0]}")
    return Outcome("PASS", f"{len(ran)} test(s)")


def judge(claim: Claim, results: dict[str, tuple[str, str]]) -> Outcome:
    """results: nodeid -> (passed|failed|skipped, skip reason). A claim PASSes when every row with tests here
    passed; its detail counts the rows proven here and names those proven elsewhere or not run (a narrowed run)."""
    rows = claim.evidence()
    judged = [(r, _judge_row(r, results)) for r in rows]
    if not claim.rows:  # one row: its own outcome
        return judged[0][1]
    here = [(r, o) for r, o in judged if o.state != "ELSEWHERE"]
    named = lambda state: [r.name for r, o in judged if o.state == state]
    failed = [o.detail for _, o in judged if o.state == "FAIL"]
    if failed:
        return Outcome("FAIL", f"rows {', '.join(named('FAIL'))}: {'; '.join(failed)}")
    skipped = [s for _, o in judged for s in o.skipped]
    if skipped:
        return Outcome("SKIPPED", f"rows {', '.join(named('SKIPPED'))}: {skipped[0]}", skipped)
    stale = [(r, o) for r, o in judged if o.state == "STALE"]
    if stale:  # what a row says ran elsewhere ran other bytes than today's: the claim is not proven for these
        return Outcome("STALE", "; ".join(f"row {r.name}: {o.detail}" for r, o in stale))
    passed, elsewhere, partial = named("PASS"), named("ELSEWHERE"), named("PARTIAL")
    not_run = named("NOT RUN") + partial
    if not here:
        return Outcome("ELSEWHERE", "; ".join(f"{r.name}: {o.detail}" for r, o in judged))
    if not passed and not partial:
        return Outcome("NOT RUN", "none of its tests was selected")
    detail = f"{len(passed)}/{len(rows)} rows here"
    if not_run:
        detail += f"; {len(not_run)} not run: {', '.join(not_run)}"
    if elsewhere:
        detail += f"; {len(elsewhere)} elsewhere: " + ", ".join(elsewhere)
    return Outcome("PARTIAL" if not_run else "PASS", detail)


# What a test may record (record_property(key, sonames)) for the proof table to print under its row, and the words
# for an empty set.
NOTES = {"load stubs": "none (NVIDIA's wheels whole)", "real NVIDIA libraries": "none"}


def note_lines(claim: Claim, notes: dict[str, dict[str, list[str]]], indent: int) -> list[str]:
    """Under a claim's line, for each row whose tests recorded a note (NOTES: the exact sonames of the load stubs
    that stood in for NVIDIA's libraries, the real ones seen loaded): one line per distinct set, with its tests."""
    out = []
    for row in claim.evidence():
        for key, empty in NOTES.items():
            sets: dict[tuple[str, ...], list[str]] = {}
            for nodeid, names in sorted(notes.get(key, {}).items()):
                if any(_matches(t, nodeid) for t in row.tests):
                    sets.setdefault(tuple(names), []).append(nodeid.split("::")[-1])
            for names, tests in sets.items():
                out.append(f"{'':<{indent}}{row.name or claim.id}: {key} ({len(names)}, {len(tests)} test(s)): "
                           f"{', '.join(names) or empty}")
    return out


def table(claims: list[Claim], results: dict[str, tuple[str, str]],
          notes: dict[str, dict[str, list[str]]] | None = None) -> tuple[list[str], dict[str, Outcome]]:
    """The proof table's lines (a claim per line, its rows' notes under it) and each claim's outcome.
    notes: NOTES key -> nodeid -> the sonames the test recorded under it."""
    judged = {c.id: judge(c, results) for c in claims}
    width = max(len(c.id) for c in claims)
    lines = []
    for c in claims:
        # whole: a state that cut text would hide (a STALE record's bytes) is the line's to show
        lines.append(f"{c.id:<{width}}  {judged[c.id].state:<9}  {judged[c.id].detail}")
        lines += note_lines(c, notes or {}, width + 13)
    return lines, judged
