"""The recorded set: the release's allow-list, records/release.json.

Every file a release may publish, by exact name and sha256: the bytes `make wheels` gives for the pins, which the
GPU proofs ran and docs/validation.md's first table shows. Every door checks against it: the gate's `publish
--require-recorded`, the release workflow's preflight (PyPI's files and the GitHub release's assets that are
already there), each job that uploads, and the Pages site, which lists a release's file only if that release's own
tag records it. A file the set does not name, or names with other bytes, is refused in one line naming the file.
As TUF's targets role does for a mirror: what the index serves is what the tagged commit signed off, never what a
mutable release asset or its SHA256SUMS says.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .. import proc
from ..errors import OeqWheelsError, Refused, UsageError, report
from ..files import not_a_file, sha256_file

REPO = Path(__file__).resolve().parents[2]
RELATIVE = Path("records") / "release.json"
PATH = REPO / RELATIVE
# A recorded set is a few KB: a larger file is no set of ours (and is never read whole).
MAX_BYTES = 1 << 20


def release_asset_name(name: str) -> str:
    """The name GitHub gives a release asset: every character but letters, digits, '.', '-', '_' becomes '.',
    and leading or trailing periods go (as documented above, and as observed: `a+b` -> `a.b`)."""
    return re.sub(r"[^A-Za-z0-9._-]", ".", name).strip(".")


@dataclass(frozen=True)
class Recorded:
    version: str
    wheels: dict[str, str]   # exact file name -> sha256
    source: str              # where it was read, for messages

    def problem(self, name: str, sha256: str) -> str | None:
        """Why a file of this name and sha256 is not ours to publish, or None."""
        want = self.wheels.get(name)
        if want is None:
            return f"{name} is not in the recorded set ({self.source})"
        if want != sha256:
            return f"{name} has sha256 {sha256[:16]}…, the recorded set ({self.source}) says {want[:16]}…"
        return None

    def problems(self, files: list[Path]) -> list[str]:
        """Why each of these files is not ours to publish, a line per file that is not (one that is no regular file,
        or larger than any of ours, is never read)."""
        return [p for f in files if (p := not_a_file(f, MAX_FILE) or self.problem(f.name, sha256_file(f)))]

    def refuse_unrecorded(self, files: list[Path], what: str) -> None:
        """Refused (one line naming each file) unless every file is recorded with its bytes."""
        problems = self.problems(files)
        if problems:
            raise Refused(f"refusing to {what}: {'; '.join(problems)}")

    def refuse_incomplete(self, files: list[Path], what: str) -> None:
        """Refused unless `files` are exactly the recorded set: every recorded file, nothing else, the recorded bytes."""
        self.refuse_unrecorded(files, what)
        missing = sorted(set(self.wheels) - {f.name for f in files})
        if missing:
            raise Refused(f"refusing to {what}: the recorded set ({self.source}) also names {', '.join(missing)}, "
                          "which is not among the files given; download every artifact of the release")


# No file of ours comes near this (a wheel is under 1 MB, SHA256SUMS a few KB): a larger one is refused unread.
MAX_FILE = 64 << 20


def parse(data: bytes, source: str) -> Recorded:
    """A recorded set from the bytes of records/release.json; UsageError naming the problem otherwise."""
    if len(data) > MAX_BYTES:
        raise UsageError(f"{source} is {len(data)} bytes, no recorded set; restore records/release.json from git")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{source} is not JSON ({type(exc).__name__}); restore records/release.json "
                         "from git") from None
    wheels = raw.get("wheels") if isinstance(raw, dict) else None
    version = raw.get("version") if isinstance(raw, dict) else None
    if not isinstance(version, str) or not isinstance(wheels, dict) or not wheels or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9_.+-]+\.whl", k) and isinstance(v, str)
            and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in wheels.items()):
        raise UsageError(f"{source} is no recorded set: it needs \"version\" and \"wheels\" (file name -> sha256, "
                         "64 hex digits); restore records/release.json from git")
    return Recorded(version, dict(wheels), source)


def load(path: Path = PATH) -> Recorded:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the recorded set {path}: {exc.strerror}; restore records/release.json "
                         "from git") from None
    return parse(data, str(path))


def at_tag(tag: str, repo: Path = REPO) -> Recorded:
    """The recorded set of the commit a release tag names (git show TAG:records/release.json): what that release may
    serve, whatever its assets say now."""
    if not re.fullmatch(r"v[0-9][A-Za-z0-9.+_-]*", tag):
        raise UsageError(f"{tag!r} is not a release tag (v<version>); name a tag of this repository")
    res = proc.run(["git", "-C", str(repo), "show", f"refs/tags/{tag}:{RELATIVE.as_posix()}"],
                   capture_output=True)
    if res.returncode != 0:
        raise Refused(f"release {tag}: its tag has no {RELATIVE.as_posix()} in this clone "
                      f"({res.stderr.decode(errors='replace').strip()[:200]}); fetch the tags (checkout with "
                      "fetch-depth: 0), or the release predates the recorded set and is not served")
    return parse(res.stdout, f"{RELATIVE.as_posix()} at {tag}")


def new_assets(existing: Path, files: list[Path]) -> list[Path]:
    """The files a release does not hold yet. Every asset it does hold must be one of `files`, byte for byte (under
    the name the host gives it): a re-run completes a release, and never replaces or keeps other bytes."""
    ours = {release_asset_name(f.name): f for f in files}
    problems = []
    for a in sorted(p for p in existing.iterdir() if p.is_file()) if existing.is_dir() else []:
        mine = ours.get(a.name)
        if mine is None or sha256_file(mine) != sha256_file(a):
            problems.append(f"{a.name} ({'not a file of this release' if mine is None else 'other bytes than ours'})")
    if problems:
        raise Refused(f"refusing to publish: the release already holds assets that are not ours: {'; '.join(problems)}; "
                      "delete them from the release by hand (a released file is never replaced), then run again")
    return [f for n, f in ours.items() if not (existing / n).is_file()]


def main(argv: list[str] | None = None) -> int:
    """The doors' checks, standard library only, so that a job that uploads runs no third-party code before it:

      python3 -m oeq_wheels.release.recorded check [--tag TAG] [--complete] FILE...
      python3 -m oeq_wheels.release.recorded new-assets EXISTING_DIR FILE...   (prints the files to upload)
      python3 -m oeq_wheels.release.recorded notes                             (the release notes, from the set)
    """
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python3 -m oeq_wheels.release.recorded")
    sub = ap.add_subparsers(dest="verb", required=True)
    c = sub.add_parser("check", help="every file (wheels; a SHA256SUMS by its lines) is in the recorded set")
    c.add_argument("--tag", help="the set of this release tag's commit (default: records/release.json here)")
    c.add_argument("--complete", action="store_true", help="and the wheels are the whole set")
    c.add_argument("files", nargs="+", type=Path)
    sub.add_parser("notes", help="the release notes: the recorded set, each file with its sha256 (Markdown)")
    n = sub.add_parser("new-assets", help="refuse assets that are not ours; print the files not yet attached")
    n.add_argument("existing", type=Path)
    n.add_argument("files", nargs="+", type=Path)
    a = ap.parse_args(argv)
    try:
        if a.verb == "notes":
            print(notes(load()))
            return 0
        if a.verb == "new-assets":
            print("\n".join(str(f) for f in new_assets(a.existing, a.files)))
            return 0
        record = at_tag(a.tag) if a.tag else load()
        wheels = [f for f in a.files if f.name != "SHA256SUMS"]
        for sums in (f for f in a.files if f.name == "SHA256SUMS"):
            check_sums(sums, record, complete=a.complete)
        (record.refuse_incomplete if a.complete else record.refuse_unrecorded)(wheels, "publish")
        print(f"recorded: {len(a.files)} file(s) are the recorded bytes ({record.source})", file=sys.stderr)
        return 0
    except OeqWheelsError as exc:  # as cli.main: one line, the class's exit code
        return report(exc)


def notes(record: Recorded) -> str:
    """The release's notes, from the recorded set alone: what the release may carry, each file by its sha256."""
    rows = "".join(f"| `{name}` | `{digest}` |\n" for name, digest in sorted(record.wheels.items()))
    return (f"Release {record.version}: exactly the files of `{RELATIVE.as_posix()}` at this tag, the bytes the GPU "
            "proofs ran (docs/validation.md). Verify a download with `sha256sum` against this table and "
            "`gh attestation verify FILE --repo OWNER/NAME`.\n\n| file | sha256 |\n|---|---|\n" + rows)


def check_sums(path: Path, record: Recorded, complete: bool = False) -> None:
    """A SHA256SUMS (ours, about to be attached; or a release's) names recorded files only, with their bytes."""
    named = {}
    # a line per recorded file, each under 200 bytes: a larger file is no SHA256SUMS of ours, refused unread
    problem = not_a_file(path, limit=200 * len(record.wheels))
    if problem:
        raise Refused(f"{path.parent.name}/{path.name}: {problem}")
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)", line.strip())
        problem = record.problem(m.group(2), m.group(1)) if m else "not a sha256sum line"
        if not problem and m.group(2) in named:
            problem = f"{m.group(2)} is named twice"
        if problem:
            raise Refused(f"{path.parent.name}/{path.name} line {n} disagrees with {record.source}: {problem}")
        named[m.group(2)] = m.group(1)
    if complete and set(named) != set(record.wheels):
        raise Refused(f"{path} names {len(named)} files, {record.source} {len(record.wheels)}: "
                      f"{sorted(set(record.wheels) ^ set(named))[:5]}")


if __name__ == "__main__":
    raise SystemExit(main())
