"""The binary OpenEquivariance index as a static site: what GitHub Pages serves, one index per CUDA line.

SITE/
  index.html                               the install line of each CUDA line
  .nojekyll                                Pages serves every file as it is
  SHA256SUMS                               every file under files/
  files/<wheel>                            each wheel under its exact file name ('+' included)
  files/<wheel>.metadata                   its METADATA (PEP 658/714: resolvers read it, not the wheel)
  <line>/simple/index.html                 PEP 503 project list (line: cu130, cu128; a line's `index` and `also_at`
                                           in pins.toml: other folders, the same pages)
  <line>/simple/openequivariance/          PEP 503 page (index.html) and the PEP 691 JSON form (index.json)
  <line>/simple/fastmace-oeq-ext/          the same for the fastmace-oeq-ext build that names this line's OEq
  <line>/links.html                        a flat page for `--find-links`
  variants/simple/openequivariance/        every line's build as a PEP 825 variant of one release (oeq/variants.py):
                                           its wheels and `openequivariance-<version>-variants.json` (files/), for
                                           uv with --preview-features wheel-variants (pip skips variant wheels)

Why the wheels live on the site and not behind release-asset links: GitHub renames release
assets whose names hold characters outside letters, digits, '.', '-' and '_' (the REST docs,
"Upload a release asset": "GitHub renames asset filenames that have special characters,
non-alphanumeric characters, and leading or trailing periods"; `+` becomes `.`), and pip and uv
read a wheel's version from the file name in the link, so `0.7.0+oeqwheels.cu13.1` would turn
into the invalid `0.7.0.oeqwheels.cu13.1`. Pages serves a file under the name it was given.

A Pages deployment replaces the whole site, so the site is made from every release's assets
(`--release DIR`, one per release, as `gh release download` saves them: renamed). Release assets can be
changed after a release, SHA256SUMS with them, so neither is trusted: each asset is matched by content against
the recorded set of the release's own tag (records/release.json at that commit, release/recorded.py), which
gives its exact name back; an asset it does not record stops the site.
"""
from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import install_lines, pins as pins_mod
from ..errors import Refused, SiteError
from ..files import sha256_file
from ..gate_common import python_of
from . import recorded
from .recorded import release_asset_name
from ..oeq import variants
from ..output import variants_dir

PROJECT = "openequivariance"


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str       # the exact file name, as built
    sha256: str


def projects(pins: pins_mod.Pins) -> tuple[str, ...]:
    """What a line's index serves: binary OpenEquivariance, and the fastmace-oeq-ext builds that name it."""
    return (PROJECT, canonicalize_name(pins.package_name))


def line_of_file(name: str, pins: pins_mod.Pins) -> pins_mod.OeqLine | None:
    """The CUDA line a served project's wheel file name belongs to (Pins.line_of, any rebuild)."""
    try:
        project, version, _, _ = parse_wheel_filename(name)
    except InvalidWheelFilename:
        return None
    if canonicalize_name(project) not in projects(pins) or version.local is None:
        return None
    return pins.line_of(str(version), any_rebuild=True)


def from_release(directory: Path, pins: pins_mod.Pins, record: recorded.Recorded) -> list[Wheel]:
    """The served wheels of one release's downloaded assets, each under its exact name again: only files the
    release's own recorded set names with their bytes (`record`, read at the release's tag). A mutable asset is never
    trusted: an asset of a served line that the set does not record (other bytes under a recorded name, a SHA256SUMS
    regenerated to match, a file added later) refuses the whole site, naming it; nothing is laid out."""
    by_sha = {h: n for n, h in record.wheels.items()}
    wanted = {h: n for h, n in by_sha.items() if line_of_file(n, pins) or variants.line_of(pins, n)}
    found: dict[str, Wheel] = {}
    # The wheels first, so that a changed one is named as itself; SHA256SUMS last.
    for f in sorted(directory.iterdir(), key=lambda f: (f.name == "SHA256SUMS", f.name)):
        if not f.is_file():
            continue
        if f.name == "SHA256SUMS":  # not trusted; but one that disagrees with the set is tampering
            try:
                recorded.check_sums(f, record)
            except Refused as exc:
                raise Refused(f"{directory.name}: {exc}; the release's assets were changed after the release") from None
            continue
        digest = sha256_file(f)
        name = by_sha.get(digest)
        if name is None:
            if f.name.endswith(".whl"):
                raise Refused(f"{directory.name}: asset {f.name} (sha256 {digest[:16]}…) is not in {record.source}: "
                              "a release asset changed after the release; delete it from the release (the site "
                              "serves only recorded bytes)")
            continue  # notes and reports: never served
        if f.name not in (name, release_asset_name(name)):
            raise SiteError(f"{f} has the content of {name} but a name the release host would not give it "
                            f"({release_asset_name(name)}); download the release's assets again")
        if digest in wanted:
            found[digest] = Wheel(f, name, digest)
    missing = sorted(n for h, n in wanted.items() if h not in found)
    if missing:
        raise SiteError(f"{directory}: {record.source} names {', '.join(missing)}, which no downloaded asset "
                        "matches; download every .whl asset of that release")
    return list(found.values())


def from_outdir(extra: Path, pins: pins_mod.Pins) -> list[Wheel]:
    """The OEq wheels of a build's OUTDIR-extra, under their own names, and its variant wheels (OUTDIR-extra/variants)."""
    return [Wheel(w, w.name, sha256_file(w)) for w in sorted(extra.glob("*.whl")) if line_of_file(w.name, pins)] + \
        [Wheel(w, w.name, sha256_file(w)) for w in sorted(variants_dir(extra).glob("*.whl"))
         if variants.line_of(pins, w.name)]


def _merge(wheels: list[Wheel]) -> list[Wheel]:
    """One wheel per file name; the same name with other content is refused (a released name never changes)."""
    by_name: dict[str, Wheel] = {}
    for w in wheels:
        old = by_name.setdefault(w.name, w)
        if old.sha256 != w.sha256:
            raise SiteError(f"two different files are named {w.name} ({old.path} and {w.path}); a released file "
                            "name never changes: bump the line's local_version in oeq_wheels/pins.toml and rebuild")
    return sorted(by_name.values(), key=lambda w: w.name)


def _metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise SiteError(f"{wheel} has {len(names)} .dist-info/METADATA files; verify it (oeq-wheels verify)")
        return zf.read(names[0])


def _requires_python(name: str) -> str:
    """What the wheel's tag installs on: ==3.11.* for cp311-cp311, >=3.12 for a stable-ABI cp312-abi3, ==3.14.* for
    cp314-cp314t (the tag, not Requires-Python, tells a free-threaded CPython)."""
    tag = next(iter(parse_wheel_filename(name)[3]))
    version = python_of(tag).removesuffix("t")
    return f">={version}" if tag.abi == "abi3" else f"=={version}.*"


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"pypi:repository-version\" "
            f"content=\"1.1\"><title>{html.escape(title)}</title></head>\n<body>\n{body}</body></html>\n")


def _write_line(site: Path, line: pins_mod.OeqLine, wheels: list[Wheel], meta: dict[str, bytes],
                names: tuple[str, ...]) -> None:
    """The line's index at each folder that serves it (OeqLine.index_paths), the same pages linking the same files."""
    for folder in line.index_paths:
        _write_index(site, folder, wheels, meta, names)


def _write_index(site: Path, folder: str, wheels: list[Wheel], meta: dict[str, bytes], names: tuple[str, ...]) -> None:
    simple = site / folder
    depth = len(Path(folder).parts)
    files_rel = "../" * (depth + 1) + "files/"   # from <folder>/<project>/
    served, all_anchors = [], []
    for project in names:
        mine = [w for w in wheels if canonicalize_name(parse_wheel_filename(w.name)[0]) == project]
        if not mine:
            continue
        served.append(project)
        proj = simple / project
        proj.mkdir(parents=True)
        anchors, files_json = [], []
        for w in mine:
            href = quote(w.name)  # '+' -> %2B: hosts that read '+' in a path as a space still find the file
            md = hashlib.sha256(meta[w.name]).hexdigest()
            rp = _requires_python(w.name)
            anchors.append((href, w, md, rp))
            files_json.append({"filename": w.name, "url": files_rel + href, "hashes": {"sha256": w.sha256},
                               "requires-python": rp, "core-metadata": {"sha256": md},
                               "dist-info-metadata": {"sha256": md}, "size": w.path.stat().st_size})
        links = "".join(f'<a href="{html.escape(files_rel + href)}#sha256={w.sha256}" '
                        f'data-requires-python="{html.escape(rp)}" data-core-metadata="sha256={md}" '
                        f'data-dist-info-metadata="sha256={md}">{html.escape(w.name)}</a><br/>\n'
                        for href, w, md, rp in anchors)
        (proj / "index.html").write_text(_page(f"Links for {project}", f"<h1>Links for {project}</h1>\n{links}"))
        versions = sorted({str(parse_wheel_filename(w.name)[1]) for w in mine})
        (proj / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": project,
                                                     "versions": versions, "files": files_json}, indent=1) + "\n")
        all_anchors += anchors
    simple.mkdir(parents=True, exist_ok=True)
    (simple / "index.html").write_text(_page("Simple index", "".join(f'<a href="{p}/">{p}</a><br/>\n'
                                                                     for p in served)))
    (simple / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"},
                                                   "projects": [{"name": p} for p in served]}, indent=1) + "\n")
    # A flat page for --find-links beside the index's folder (cu130/simple/ -> cu130/links.html; simple/ -> links.html)
    flat = "".join(f'<a href="{"../" * (depth - 1)}files/{html.escape(href)}#sha256={w.sha256}">{html.escape(w.name)}'
                   '</a><br/>\n' for href, w, _md, _rp in all_anchors)
    (simple.parent / "links.html").write_text(_page(f"{simple.parent.name or 'all'} wheels", flat))


def _write_variants(site: Path, wheels: list[Wheel], name: str, doc: bytes) -> None:
    """variants/simple/: the variant wheels of every line and the release's variants JSON (name, doc), linked as
    PEP 825 asks (beside the wheels, with its sha256). No PEP 658 metadata: uv reads a variant wheel's variant.json
    from the wheel itself."""
    (site / "files" / name).write_bytes(doc)
    files_rel = "../../../files/"
    entries = [(quote(w.name), w.sha256, w.name) for w in wheels] + \
        [(quote(name), hashlib.sha256(doc).hexdigest(), name)]
    proj = site / "variants" / "simple" / PROJECT
    proj.mkdir(parents=True)
    links = "".join(f'<a href="{html.escape(files_rel + href)}#sha256={sha}">{html.escape(n)}</a><br/>\n'
                    for href, sha, n in entries)
    (proj / "index.html").write_text(_page(f"Links for {PROJECT}", f"<h1>Links for {PROJECT}</h1>\n{links}"))
    (site / "variants" / "simple" / "index.html").write_text(_page("Simple index", f'<a href="{PROJECT}/">{PROJECT}</a>'
                                                                                  "<br/>\n"))


def _landing(pins: pins_mod.Pins, counts: dict[str, int]) -> str:
    rows = []
    for name in pins.line_names:
        builds = pins.line_builds(name)
        line, arches = builds[0], [l.arch.name for l in builds]
        folder = line.index_paths[0]
        flat = str(Path(folder).parent / "links.html").removeprefix("./")
        also = ", ".join(f'<a href="{f}/">/{f}/</a>' for f in line.index_paths[1:])
        cmds = [c for c in install_lines.ours(pins) if f"/{folder}/" in c]
        rows.append(f"<h2>CUDA {line.cuda_major} ({line.name}): torch {line.torch_min} and newer CUDA "
                    f"{line.cuda_major} builds, NVIDIA driver {html.escape(line.driver)}, Linux "
                    f"{' and '.join(arches)}</h2>\n"
                    + "".join(f"<pre>{html.escape(c)}</pre>\n" for c in cmds)
                    + f'<p><a href="{folder}/{PROJECT}/">{counts.get(line.name, 0)} wheel(s)</a>, '
                      f'<a href="{flat}">flat page for --find-links</a>'
                    + (f"; the same index at {also}" if also else "") + "</p>\n")
    if counts.get("variants"):
        rows.append("<h2>Every line as a wheel variant (uv's preview: the driver picks the line)</h2>\n"
                    + "".join(f"<pre>{html.escape(c)}</pre>\n" for c in install_lines.variants(pins))
                    + f'<p><a href="variants/simple/{PROJECT}/">{counts["variants"]} variant wheel(s)</a></p>\n')
    return _page(f"{PROJECT} binary wheels", "<h1>Binary OpenEquivariance wheels (no compiler needed)</h1>\n"
                 + "".join(rows) + f'<p><a href="SHA256SUMS">SHA256SUMS</a> · '
                 f'<a href="https://github.com/{html.escape(pins.repository)}">source</a></p>\n')


def write_site(site: Path, wheels: list[Wheel], pins: pins_mod.Pins) -> Path:
    """Lay out the site in `site` (replaced whole, atomically); return it."""
    wheels = _merge(wheels)
    if not any(canonicalize_name(parse_wheel_filename(w.name)[0]) == PROJECT for w in wheels):
        raise SiteError("no openequivariance wheel to serve; build first (make wheels) or pass a release's assets")
    site = Path(site)
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=site.parent, prefix=f".{site.name}."))
    try:
        files = tmp / "files"
        files.mkdir()
        meta = {}
        variant_wheels = [w for w in wheels if variants.line_of(pins, w.name)]
        for w in wheels:
            shutil.copyfile(w.path, files / w.name)
            if w not in variant_wheels:
                meta[w.name] = _metadata(w.path)
                (files / f"{w.name}.metadata").write_bytes(meta[w.name])
        # One index per line, whatever the architecture: pip picks a wheel by its platform tag.
        by_line = {n: [w for w in wheels if w not in variant_wheels and line_of_file(w.name, pins).name == n]
                   for n in pins.line_names}
        for name in pins.line_names:
            _write_line(tmp, pins.line_builds(name)[0], by_line[name], meta, projects(pins))
        sums = [(w.sha256, w.name) for w in wheels]
        if variant_wheels:
            name, doc = variants.index_file(pins)
            _write_variants(tmp, variant_wheels, name, doc)
            sums.append((hashlib.sha256(doc).hexdigest(), name))
        (tmp / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for h, n in sums))
        (tmp / ".nojekyll").write_text("")
        (tmp / "index.html").write_text(_landing(pins, {**{k: len(v) for k, v in by_line.items()},
                                                        "variants": len(variant_wheels)}))
        old = site.with_name(f".{site.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if site.exists():
            site.rename(old)
        tmp.rename(site)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return site
