"""The proof table: every "tested"/"proven" sentence of README.md and the docs (tests/claims.toml), the tests that
prove it, and what they did in this run. conftest.py records each test's outcome and prints the table at the end
of `make test`; tests/unit/test_claims.py holds the file to the documents and to the tests that exist."""
from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLAIMS_FILE = REPO / "tests" / "claims.toml"
# The documents whose proof sentences must each have an entry.
DOCUMENTS = ("README.md", "docs/validation.md", "docs/pipeline.md")
WORDS = re.compile(r"\b(tested|proven|proves)\b", re.I)
NEGATED = re.compile(r"(?:\bnot|\*\*not\*\*)\s+(?:tested|proven)\b", re.I)
MENTIONED = re.compile(r'"(?:tested|proven|proves)"', re.I)  # the word quoted is a mention, not a claim
PROVEN_BY_HEADER = "| | supported | proven by |"


@dataclass
class Claim:
    id: str
    claim: str
    at: list[tuple[str, str]]  # (document, a piece of its text on the claim's line)
    tests: list[str]  # node ids without parameters: tests/test_x.py::test_name
    elsewhere: str = ""  # where else it is proven (the release job, the GPU runbook)


@dataclass
class Outcome:
    state: str  # PASS, FAIL, SKIPPED, NOT RUN, ELSEWHERE
    detail: str = ""
    skipped: list[str] = field(default_factory=list)


def load(path: Path = CLAIMS_FILE) -> list[Claim]:
    data = tomllib.loads(path.read_text())
    return [Claim(c["id"], c["claim"], [tuple(a) for a in c["at"]], list(c.get("tests", [])), c.get("elsewhere", ""))
            for c in data["claim"]]


def sentences(document: Path) -> list[str]:
    """The lines that claim a proof: a proof word neither negated ("not proven" says what is not claimed) nor
    quoted, and every
    row of README's "proven by" table (its negative rows too: they name where else it is proven)."""
    out, in_table = [], False
    for line in document.read_text().splitlines():
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
    """Test ids named by an entry that do not exist: 'claim: id'."""
    out, seen = [], {}
    for c in claims:
        if not c.tests and not c.elsewhere:
            out.append(f"{c.id}: names no test and nowhere else")
        for t in c.tests:
            file, _, name = t.partition("::")
            path = repo / file
            if path not in seen:
                seen[path] = test_functions(path) if path.is_file() else set()
            if name not in seen[path]:
                out.append(f"{c.id}: {t}")
    return out


def _matches(test_id: str, nodeid: str) -> bool:
    return nodeid == test_id or nodeid.startswith(test_id + "[")


def judge(claim: Claim, results: dict[str, tuple[str, str]]) -> Outcome:
    """results: nodeid -> (passed|failed|skipped, skip reason)."""
    if not claim.tests:
        return Outcome("ELSEWHERE", claim.elsewhere)
    ran = {n: r for n, r in results.items() if any(_matches(t, n) for t in claim.tests)}
    if not ran:
        return Outcome("NOT RUN", "none of its tests was selected")
    failed = sorted(n for n, (s, _) in ran.items() if s == "failed")
    skipped = sorted(f"{n}: {why}" for n, (s, why) in ran.items() if s == "skipped")
    if failed:
        return Outcome("FAIL", ", ".join(failed), skipped)
    if skipped:  # the claim as written is not proven by this run (a full run here skips nothing)
        return Outcome("SKIPPED", f"{len(skipped)} of {len(ran)} skipped; {skipped[0]}", skipped)
    return Outcome("PASS", f"{len(ran)} test(s)")


def table(claims: list[Claim], results: dict[str, tuple[str, str]]) -> tuple[list[str], dict[str, Outcome]]:
    judged = {c.id: judge(c, results) for c in claims}
    width = max(len(c.id) for c in claims)
    lines = [f"{c.id:<{width}}  {judged[c.id].state:<9}  {judged[c.id].detail}"[:200] for c in claims]
    return lines, judged
