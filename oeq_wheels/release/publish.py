"""Release steps over a build's output: the publish gate and SHA256SUMS.

OUTDIR holds the fastmace-oeq-ext wheels, the only files that go to PyPI;
OUTDIR-extra holds the binary openequivariance wheels of every CUDA line and SHA256SUMS
(attached to the GitHub release, from whose assets oeq_wheels.release.site lays out the index).
"""
from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import proc
from ..registry import PYPI
from .. import pins as pins_mod
from ..errors import Refused, ReleaseError, UsageError
from ..files import sha256_file, write_atomic
from ..gate import verify_any
from ..tags import tag_arch
from ..output import extra_dir
from . import recorded


def redact(url: str) -> str:
    """A URL with any password replaced, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def check_tag(tag: str, pins: pins_mod.Pins) -> str:
    """A release tag must be v + the pinned version, so that what is tagged is what is built."""
    expected = f"v{pins.version}"
    name = tag.removeprefix("refs/tags/")
    if name != expected:
        raise UsageError(f"release tag {tag!r} does not match the pinned version: expected {expected} "
                         "(oeq_wheels/pins.toml); tag the commit with that, or change the pins first")
    return name


def check_repository(repository: str, pins: pins_mod.Pins) -> str:
    """The releasing repository must be the one pins.toml names: the index URLs, README and METADATA derive from it."""
    if repository.lower() != pins.repository.lower():
        raise UsageError(f"this release runs in {repository!r}, but oeq_wheels/pins.toml names {pins.repository!r} "
                         f"as the project's repository (the index would be announced at {pins.site_url}); set "
                         "[package] repository to this repository first")
    return repository


# Upload endpoints whose simple index is not at <upload URL>/simple/.
KNOWN_INDEXES = {"https://upload.pypi.org/legacy/": PYPI,
                 "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/"}


def upload_target(repository: str | None, repository_url: str | None) -> str:
    """The upload URL twine will use, resolved as twine does (options, TWINE_* variables, ~/.pypirc).

    Only the URL is read; credentials stay with twine.
    """
    from twine.utils import get_repository_from_config

    url = repository_url or os.environ.get("TWINE_REPOSITORY_URL")
    name = repository or os.environ.get("TWINE_REPOSITORY") or "pypi"
    try:
        return url or get_repository_from_config("~/.pypirc", name)["repository"]
    except Exception as exc:  # twine's own InvalidConfiguration and friends
        raise UsageError(f"cannot resolve twine repository {name!r}: {exc}; define it in ~/.pypirc "
                         "or pass --repository-url") from None


def index_for(upload_url: str, index_url: str | None) -> str:
    return index_url or KNOWN_INDEXES.get(upload_url) or upload_url.rstrip("/") + "/simple/"


def files_on_index(index_url: str, project: str) -> dict[str, str | None]:
    """The files a PEP 503 index already lists for project, each with the sha256 its link names (None where it names
    none); empty if the index does not know the project."""
    url = index_url.rstrip("/") + "/" + canonicalize_name(project) + "/"
    req = urllib.request.Request(url, headers={"Accept": "text/html", "User-Agent": "oeq-wheels"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            page = r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise ReleaseError(f"cannot read {redact(url)} to check for files already there (HTTP {exc.code}); "
                           "pass --index-url with the repository's simple index") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ReleaseError(f"cannot read {redact(url)} to check for files already there "
                           f"({getattr(exc, 'reason', exc)}); check the network or pass --index-url") from None
    out = {}
    for _q, h in re.findall(r"""href\s*=\s*(["'])(.+?)\1""", page):  # either quote (PEP 503 allows both)
        url, _, fragment = h.partition("#")
        m = re.search(r"(?:^|&)sha256=([0-9a-f]{64})", fragment)
        out[unquote(url.rsplit("/", 1)[-1])] = m.group(1) if m else None
    return out


def already_there(index: str, package: str, ours: list[Path]) -> list[Path]:
    """Which of our files the index already has, each with our bytes; Refused (one line naming each) where it has
    other bytes under our name, or names no sha256 to compare: a released name never changes, so such a file can
    only be someone else's, and skipping it would ship their bytes under ours."""
    there = files_on_index(index, package)
    same, other = [], []
    for w in ours:
        if w.name in there:
            got = there[w.name]
            (same if got == sha256_file(w) else other).append((w, got))
    if other:
        named = "; ".join(f"{w.name} (sha256 there {(got or 'not given')[:16]}…)" for w, got in other)
        raise Refused(f"refusing to publish: {redact(index)} already has {len(other)} of our file name(s) with other "
                      f"bytes: {named}; "
                      "a released file name can never be uploaded again: bump .postN in oeq_wheels/pins.toml and "
                      "rebuild")
    return [w for w, _ in same]


def wheels_in(directory: Path) -> tuple[dict[str, list[Path]], list[str]]:
    """Wheels by canonical project name, and one problem line per file that is no wheel."""
    by_name: dict[str, list[Path]] = {}
    problems = []
    for w in sorted(directory.glob("*.whl")):
        try:
            name = canonicalize_name(parse_wheel_filename(w.name)[0])
        except InvalidWheelFilename as exc:
            problems.append(f"{w.name} is not a valid wheel file name ({exc}); remove it")
            continue
        by_name.setdefault(name, []).append(w)
    return by_name, problems


def _check_set(wheels: list[Path], version: str, pythons: tuple[str, ...], what: str) -> list[str]:
    """Exactly one wheel per pinned Python, all of the pinned version."""
    by_tag: dict[str, list[Path]] = {}
    problems = []
    for w in wheels:
        _, v, _, tags = parse_wheel_filename(w.name)
        if str(v) != version:
            problems.append(f"{w.name} is version {v}, pins say {version}")
        for t in tags:  # a free-threaded CPython's wheel (cp314-cp314t) by its ABI tag, as pins name it (cp314t)
            by_tag.setdefault(t.abi if t.abi == t.interpreter + "t" else t.interpreter, []).append(w)
    want = [pins_mod.cp_tag(v) for v in pythons]
    missing = [t for t in want if t not in by_tag]
    if missing:
        problems.append(f"incomplete {what} set: no wheel for {', '.join(missing)} (build them: make wheels)")
    for t, ws in by_tag.items():
        if len(ws) > 1:
            problems.append(f"several {what} wheels for {t}: {', '.join(w.name for w in ws)}")
        if t not in want:
            problems.append(f"{ws[0].name} is for {t}, which the pins do not release")
    return problems


def check_set(outdir: Path, pins: pins_mod.Pins) -> tuple[list[Path], list[Path]]:
    """(fastmace-oeq-ext wheels in OUTDIR, the served wheels in OUTDIR-extra: binary openequivariance and the
    fastmace-oeq-ext builds that name it), complete; else ReleaseError (a failed check: exit 1). No OUTDIR at all is
    a usage error (exit 2)."""
    if not outdir.is_dir():
        raise UsageError(f"{outdir} is not a directory; build first (make wheels) or name the build's OUTDIR")
    by_name, problems = wheels_in(outdir)
    ours = by_name.pop(canonicalize_name(pins.package_name), [])
    problems += [f"{w.name} does not belong in {outdir} (only {pins.package_name} wheels are uploaded from it)"
                 for ws in by_name.values() for w in ws]
    problems += _check_set(ours, pins.version, pins.matrix.pythons, pins.package_name)
    extra = extra_dir(outdir)
    by_name, more = wheels_in(extra) if extra.is_dir() else ({}, [])
    problems += more
    oeq = by_name.pop("openequivariance", [])
    # The fastmace-oeq-ext builds that name a binary OEq line: served from that line's index, never uploaded.
    served_ext = by_name.pop(canonicalize_name(pins.package_name), [])
    problems += [f"{w.name} does not belong in {extra}" for ws in by_name.values() for w in ws]
    served_variants = [vp for vp in pins.ext_variants if vp.name != "pypi"]
    for vp in served_variants:
        mine = [w for w in served_ext if str(parse_wheel_filename(w.name)[1]) == vp.version]
        problems += _check_set(mine, vp.version, pins.matrix.pythons, f"{pins.package_name} {vp.name}")
    wanted = {vp.version for vp in served_variants}
    problems += [f"{w.name} is of no pinned {pins.package_name} variant ({', '.join(sorted(wanted))})"
                 for w in served_ext if str(parse_wheel_filename(w.name)[1]) not in wanted]
    # Each line's set is complete for every architecture it is built for (a build without a cross compiler
    # leaves an architecture out: such a release is refused here).
    by_line: dict[str, list[Path]] = {line.key: [] for line in pins.oeq_lines}
    for w in oeq:
        _, version, _, tags = parse_wheel_filename(w.name)
        line = pins.line_of(str(version), tag_arch(next(iter(tags)).platform))
        if line is None:
            problems.append(f"{w.name} is of no pinned OEq line and architecture "
                            f"({', '.join(f'{l.version(pins.oeq.version)} {l.arch.name}' for l in pins.oeq_lines)})")
        else:
            by_line[line.key].append(w)
    for line in pins.oeq_lines:
        pythons = line.pythons  # the line's own CPythons: a release torch without one does not narrow them
        problems += _check_set(by_line[line.key], line.version(pins.oeq.version), pythons,
                               f"openequivariance {line.name} {line.arch.name}")
    if problems:
        raise ReleaseError("refusing to publish: " + "; ".join(problems))
    return ours, oeq + sorted(served_ext)


def write_sha256sums(wheels: list[Path], where: Path) -> Path:
    """`sha256sum -c SHA256SUMS` checks a download against these lines."""
    path = where / "SHA256SUMS"
    write_atomic(path, "".join(f"{sha256_file(w)}  {w.name}\n" for w in wheels))
    return path


def publish(outdir: Path, repository: str | None, dry_run: bool, pins: pins_mod.Pins,
            repository_url: str | None = None, index_url: str | None = None, require_recorded: bool = False,
            check_index: bool = False) -> int:
    """The gate over both packages, then `twine upload` of OUTDIR's fastmace-oeq-ext wheels only.

    Before uploading (and in a dry run with check_index: the release's preflight), the repository's index is asked
    which files it already has: a file name can never be uploaded twice (PyPI forbids it even after deletion), so
    one there with other bytes is refused here, with the fix, before the server sees a byte; one there with our bytes
    (a re-run after a partial upload) is left alone.
    """
    ours, oeq = check_set(outdir, pins)
    bad = []
    for w in ours + oeq:
        v = verify_any(w, pins)
        print("\n".join(v.said()))
        if not v.ok:
            bad.append(f"{w.name} ({v.problems[0]})")
    if bad:
        raise Refused(f"refusing to publish: {len(bad)} wheel(s) failed verification: {'; '.join(bad)}")
    if require_recorded:
        differ = recorded.load().problems(ours + oeq)
        if differ:
            raise Refused(f"refusing to publish {len(differ)} wheel(s) whose bytes are not the recorded ones (the GPU "
                          f"proofs ran those): {'; '.join(differ)}; re-run the GPU proof and record it")
        print(f"all {len(ours + oeq)} wheel(s) are the recorded bytes ({recorded.RELATIVE})")
    sums = write_sha256sums(ours + oeq, extra_dir(outdir))
    print(f"wrote {sums}")
    target = redact(repository_url) if repository_url else (repository or "pypi")
    index = index_for(upload_target(repository, repository_url), index_url) if check_index or not dry_run else None
    same = already_there(index, pins.package_name, ours) if index else []
    if same:
        print(f"{len(same)} file(s) already on {redact(index)} with our bytes (left alone): "
              f"{', '.join(w.name for w in same)}")
    if dry_run:
        print(f"dry run: would upload {len(ours)} {pins.package_name} wheel(s) to {target}; "
              f"the {len(oeq)} served wheel(s) (openequivariance and its lines' {pins.package_name}) go to the "
              "GitHub release and its site only"
              + ("" if index else " (files already on the index are checked at upload time, or with --check-index)"))
        return 0
    ours = [w for w in ours if w not in same]
    if not ours:
        print("nothing to upload: every file is there with our bytes")
        return 0
    print(f"{len(ours)} file(s) not on {redact(index)} yet; uploading")
    cmd = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
    if repository_url:
        cmd += ["--repository-url", repository_url]
    elif repository:
        cmd += ["--repository", repository]
    # twine finds the credentials itself (environment, ~/.pypirc, keyring, trusted publishing);
    # they are never passed, printed or logged here. Without any it refuses and uploads nothing.
    # In our process group: twine may ask for credentials at the terminal.
    res = proc.run(cmd + [str(w) for w in ours], foreground=True)
    if res.returncode != 0:
        raise ReleaseError("twine upload failed (see its output above); fix the credentials or the repository")
    return 0
