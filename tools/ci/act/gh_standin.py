"""Rehearsal stand-in for the GitHub CLI's release commands (oeq_wheels/checks/rehearse_ci.py; bin/gh runs it with
the stand-ins' own Python): releases kept in $OEQ_REHEARSAL_GITHUB/releases/TAG, assets stored under the names
GitHub gives them (site.release_asset_name)."""
import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

sys.path[:0] = [os.environ["OEQ_REHEARSAL_REPO"], os.path.join(os.environ["OEQ_REHEARSAL_REPO"], "runtime")]
from oeq_wheels.release.site import release_asset_name  # noqa: E402

ROOT = Path(os.environ["OEQ_REHEARSAL_GITHUB"]) / "releases"


def release(tag: str) -> Path:
    return ROOT / tag


def attestation(argv: list[str]) -> int:
    """`gh attestation verify FILE --repo R [--signer-workflow W] [--source-ref REF]`: FILE's sha256 is among the
    subjects the attest stand-in recorded, by that signer workflow at that ref where they are given (as gh checks the
    certificate's workflow identity and source ref); a subject attested by another workflow or ref is refused."""
    ap = argparse.ArgumentParser(prog="gh attestation")
    ap.add_argument("verb", choices=["verify"])
    ap.add_argument("file")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--signer-workflow")
    ap.add_argument("--source-ref")
    a = ap.parse_args(argv)
    digest = hashlib.sha256(Path(a.file).read_bytes()).hexdigest()
    attested = Path(os.environ["OEQ_REHEARSAL_GITHUB"]) / "attested.txt"
    # each line: sha256, signer workflow (owner/repo/path), its ref, the subject's path
    rows = [line.split() for line in attested.read_text().splitlines()] if attested.is_file() else []
    ok = a.repo == os.environ["GITHUB_REPOSITORY"] and any(
        len(r) >= 3 and r[0] == digest and a.signer_workflow in (None, r[1]) and a.source_ref in (None, r[2])
        for r in rows)
    if not ok:
        by = f"{a.repo}" + (f", workflow {a.signer_workflow}" if a.signer_workflow else "") + \
            (f" at {a.source_ref}" if a.source_ref else "")
        print(f"gh stand-in: no attestation of {Path(a.file).name} ({digest[:16]}…) by {by}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["attestation"]:
        return attestation(argv[1:])
    if argv[:1] != ["release"]:
        print(f"gh stand-in: only `gh release` is stood in for, not {' '.join(argv[:2])}", file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(prog="gh release")
    ap.add_argument("verb")
    ap.add_argument("args", nargs="*")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--clobber", action="store_true")
    ap.add_argument("--notes-file")
    ap.add_argument("--title")
    ap.add_argument("--verify-tag", action="store_true")
    ap.add_argument("--limit")
    ap.add_argument("--json")
    ap.add_argument("--jq")
    ap.add_argument("--dir")
    ap.add_argument("--pattern", action="append", default=[])
    a = ap.parse_args(argv[1:])
    if a.repo != os.environ["GITHUB_REPOSITORY"]:
        print(f"gh stand-in: --repo {a.repo} is not this repository", file=sys.stderr)
        return 1
    if a.verb == "view":
        return 0 if release(a.args[0]).is_dir() else 1
    if a.verb == "download" and not release(a.args[0]).is_dir():
        print(f"gh stand-in: release not found: {a.args[0]}", file=sys.stderr)
        return 1
    if a.verb in ("create", "upload"):
        tag, files = a.args[0], a.args[1:]
        if a.verb == "create" and release(tag).is_dir():
            print(f"gh stand-in: release {tag} exists", file=sys.stderr)
            return 1
        if a.verb == "upload" and not release(tag).is_dir():
            print(f"gh stand-in: no release {tag}", file=sys.stderr)
            return 1
        assets = release(tag) / "assets"
        assets.mkdir(parents=True, exist_ok=True)
        for f in map(Path, files):
            dest = assets / release_asset_name(f.name)
            if dest.exists() and not a.clobber:
                print(f"gh stand-in: asset {dest.name} exists (use --clobber)", file=sys.stderr)
                return 1
            shutil.copyfile(f, dest)
        if a.notes_file:
            shutil.copyfile(a.notes_file, release(tag) / "notes.md")
        print(f"gh stand-in: release {tag}: {len(files)} asset(s)")
        return 0
    if a.verb == "edit":
        shutil.copyfile(a.notes_file, release(a.args[0]) / "notes.md")
        return 0
    if a.verb == "list":
        tags = sorted(p.name for p in ROOT.iterdir()) if ROOT.is_dir() else []
        if a.jq == ".[].tagName":
            print("".join(f"{t}\n" for t in tags), end="")  # as gh: nothing at all when there is no release
        else:
            print(json.dumps([{"tagName": t} for t in tags]))
        return 0
    if a.verb == "download":
        out = Path(a.dir)
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted((release(a.args[0]) / "assets").iterdir()):
            if not a.pattern or any(fnmatch.fnmatch(f.name, p) for p in a.pattern):
                shutil.copyfile(f, out / f.name)
        return 0
    print(f"gh stand-in: `gh release {a.verb}` is not stood in for", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
