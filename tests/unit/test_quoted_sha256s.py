"""Every full sha256 that README.md and docs/ quote is a wheel of today's recorded set (records/release.json) or sits
in a section marked as history, so that a superseded wheel's sha256 never reads as today's bytes. History is, with
its subsections: a section of docs/validation.md whose heading's date is earlier than its first section's (the
current set, held equal to records/release.json by tests/unit/test_recorded.py), and any section whose heading is
followed by a `<!-- history: why -->` line."""
from __future__ import annotations

import re

from oeq_wheels.release import recorded

REPO = recorded.REPO
LOG = "docs/validation.md"  # newest first: its first section is the current set, each later one dated
SHA256 = re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{64}(?![0-9a-fA-F])")
HEADING = re.compile(r"(#{1,6}) ")
DATE = re.compile(r"\((\d{4}-\d{2}-\d{2})\)\s*$")
MARKER = re.compile(r"<!-- history: \S.* -->")


def documents() -> list[str]:
    return ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


def quoted(text: str, dated: bool) -> list[tuple[int, str, bool]]:
    """(line number, sha256, whether its section is history) for each full sha256 of a Markdown text; `dated`: a
    heading dated before the first `## ` heading's date marks history too."""
    out, stack, current = [], [], None  # stack: (level, history) of the headings the line is under
    fenced = under_heading = False  # in a code block; only blank lines since the last heading
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced  # a `#` in a code block is a comment, not a heading
        heading = None if fenced else HEADING.match(line)
        if heading:
            level, date = len(heading.group(1)), DATE.search(line)
            if dated and level == 2 and current is None:
                current = date.group(1) if date else ""
            while stack and stack[-1][0] >= level:
                stack.pop()
            earlier = bool(dated and current and date and date.group(1) < current)
            stack.append((level, earlier or any(h for _, h in stack)))
            under_heading = True
        elif under_heading and stack and MARKER.fullmatch(line.strip()):
            stack[-1] = (stack[-1][0], True)
        elif line.strip():
            under_heading = False
        history = bool(stack) and stack[-1][1]
        out += [(n, sha, history) for sha in SHA256.findall(line)]
    return out


def strays(doc: str, text: str, current: set[str]) -> list[str]:
    return [f"{doc}:{n}: {sha[:16]}… is not in records/release.json and its section is not marked as history"
            for n, sha, history in quoted(text, doc == LOG) if sha not in current and not history]


def test_every_quoted_sha256_is_of_the_recorded_set_or_in_a_history_section():
    current = set(recorded.load().wheels.values())
    found = [s for doc in documents() for s in strays(doc, (REPO / doc).read_text(), current)]
    assert found == [], "\n".join(found)


def test_an_edited_sha256_of_the_first_table_is_caught():
    """The first table is the current set: one digit changed there is a stray, named by its line."""
    current = set(recorded.load().wheels.values())
    text = (REPO / LOG).read_text()
    first = text.split("\n## ")[1]
    name, sha = re.search(r"^\| `([^`]+\.whl)` \| `([0-9a-f]{64})` \|", first, re.M).groups()
    edited = text.replace(f"| `{name}` | `{sha}` |", f"| `{name}` | `{sha[:-1]}{'0' if sha[-1] != '0' else '1'}` |", 1)
    assert strays(LOG, text, current) == []
    (line,) = strays(LOG, edited, current)
    n = 1 + text[:text.index(f"| `{name}` |")].count("\n")
    assert line.startswith(f"{LOG}:{n}: ")


def test_history_is_an_earlier_dated_section_or_a_marked_one_with_its_subsections():
    a, b = "a" * 64, "b" * 64
    doc = "\n".join([
        "# Log", "",
        "## Today's set (2026-12-05)", f"`{a}`",            # line 4: the current set
        "```sh", "# a comment, not a heading", f"{a}", "```",  # line 7: still the current section
        "## A run on other bytes (2026-12-05)", "", "<!-- history: a rebuild, never released -->", f"{a}",  # 12
        "### Its details", f"{a}",                          # line 14: a subsection of history
        "## Another run (2026-12-05)", f"{a}",              # line 16: not marked
        "<!-- history: not under its heading -->", f"{a}",  # line 18: a marker elsewhere marks nothing
        "## The set before (2026-12-03)", f"{a}",           # line 20: earlier: history
        "### In a container (2026-12-06)", f"{b}",          # line 22: under history, whatever its date
    ])
    assert quoted(doc, dated=True) == [(4, a, False), (7, a, False), (12, a, True), (14, a, True), (16, a, False),
                                       (18, a, False), (20, a, True), (22, b, True)]
    assert [h for _, _, h in quoted(doc, dated=False)] == [False, False, True, True, False, False, False, False]
