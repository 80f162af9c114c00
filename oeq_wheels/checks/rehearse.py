"""`make rehearse-release`: the release's hosting, rehearsed on this machine against the hosts' rules.

After a build: SHA256SUMS is written and every wheel is attached to a local stand-in of the
GitHub release (renamed as GitHub renames assets); the assets are downloaded back through its
redirect, as the workflow's Pages job does with `gh release download`; the site is laid out
from them exactly as that job deploys it and served as Pages serves a project site. Then every
link of every index must resolve to a file with the linked sha256, and README's install lines,
verbatim but for the site's address, must install with pip and with uv into fresh venvs whose
compilers are failing sentinels, taking our binary OpenEquivariance (never the sdist) and
building nothing. fastmace-oeq-ext, which the release uploads to PyPI, comes from a pypiserver
that redirects every other project to PyPI.
"""
from __future__ import annotations

import hashlib
import shlex
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

from .. import pins as pins_mod
from ..inputs import fetch, pythons
from ..errors import RehearsalError, UsageError
from ..output import extra_dir
from ..files import sha256_file
from ..release import publish, recorded, site as site_mod
from . import hosts, installmatrix

README = Path(__file__).resolve().parents[2] / "README.md"
TAG_PREFIX = "v"


def readme_commands(pins: pins_mod.Pins, readme: Path = README) -> list[str]:
    """README's install lines for users: every `pip install` line of its "For users" section that names the
    site (the FastMACE section's steps are the clean-install check's, `tools/release/clean_install.sh`)."""
    if not readme.is_file():
        raise UsageError(f"{readme} is missing; the rehearsal runs README's install lines (run it from a checkout)")
    text = readme.read_text()
    start = text.find("\n## For users\n")
    section = text[start:].split("\n## ", 2)[1] if start >= 0 else ""
    return [line.strip() for line in section.splitlines()
            if line.strip().startswith("pip install ") and pins.site_url in line]


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.read()
    except urllib.error.HTTPError as exc:
        raise RehearsalError(f"{url} answered HTTP {exc.code}") from None


def crawl(base: str, pins: pins_mod.Pins) -> list[str]:
    """Fetch every link of every index (each folder that serves a line's) and flat page; one line per file checked.
    Raises on any miss."""
    seen = []
    for name, folder in ((n, f) for n in pins.line_names for f in pins.line_builds(n)[0].index_paths):
        projects = fetch.Links()
        projects.feed(_get(f"{base}{folder}/").decode())
        pages = [urljoin(f"{base}{folder}/", a["href"]) for a in projects.links]
        flat = str(Path(folder).parent / "links.html").removeprefix("./")
        for page in (*pages, f"{base}{flat}"):
            parser = fetch.Links()
            parser.feed(_get(page).decode())
            if not parser.links:
                raise RehearsalError(f"{page} links no wheel")
            for a in parser.links:
                url, _, frag = a["href"].partition("#")
                target = urljoin(page, url)
                data = _get(target)
                want = frag.removeprefix("sha256=")
                if hashlib.sha256(data).hexdigest() != want:
                    raise RehearsalError(f"{target} does not have the sha256 its link names ({want})")
                if "data-core-metadata" in a:
                    meta = _get(target + ".metadata")
                    if "sha256=" + hashlib.sha256(meta).hexdigest() != a["data-core-metadata"]:
                        raise RehearsalError(f"{target}.metadata does not match data-core-metadata")
                seen.append(f"{name}: {target.removeprefix(base)}")
    return seen


def _case_for(command: str, local: str, pins: pins_mod.Pins, installer: str) -> tuple[installmatrix.Case, list[str]]:
    args = shlex.split(command.replace(pins.site_url, local))[2:]
    line = next((pins.line_builds(n)[0] for n in pins.line_names if pins.index_url(n) in command), None)
    if line is None:
        raise UsageError(f"README line {command!r} names no line's index of the site")
    torch = next((a.split("==", 1)[1] for a in args if a.startswith("torch==")), "")  # "": any release
    if pins.package_name in args:
        torch = pins.matrix.torch_version
    return installmatrix.Case(torch, installer, line), args


def run(outdir: Path, installers: list[str], python: str, commands: list[int] | None = None, keep: bool = False) -> int:
    pins = pins_mod.load()
    outdir = Path(outdir).resolve()
    extra = extra_dir(outdir)
    ours = sorted(outdir.glob("*.whl"))
    oeq = site_mod.from_outdir(extra, pins) if extra.is_dir() else []
    if not ours or not oeq:
        raise UsageError(f"{outdir} and {extra} hold no wheels to release; build first (make wheels)")
    cmds = readme_commands(pins)
    if not cmds:
        raise UsageError(f"README has no `pip install` line naming {pins.site_url}")
    chosen = [cmds[i] for i in commands] if commands is not None else cmds
    say = lambda m: print(f"rehearse: {m}", file=sys.stderr, flush=True)
    base = pythons.find(python).executable
    tag = f"{TAG_PREFIX}{pins.version}"
    with tempfile.TemporaryDirectory(prefix="oeq-rehearse-") as tmp_s:
        tmp = Path(tmp_s)
        sums = publish.write_sha256sums(ours + [w.path for w in oeq], tmp)
        host = hosts.ReleaseHost(tmp / "release-storage", pins.repository)
        renamed = host.upload(tag, [*ours, *(w.path for w in oeq), sums])
        say(f"attached {len(renamed)} assets to release {tag}; the host renamed "
            f"{sum(n != f.name for n, f in zip(renamed, [*ours, *(w.path for w in oeq), sums]))}, e.g. "
            f"{oeq[0].name} -> {site_mod.release_asset_name(oeq[0].name)}")
        with host.serving():
            assets = host.download(tag, tmp / "assets" / tag)
        say(f"downloaded the release's assets through the redirect to {host.downloads}")
        # The hosting of this build is rehearsed, whatever its bytes (the gate holds them to records/release.json).
        own = recorded.Recorded(pins.version, {f.name: sha256_file(f) for f in [*ours, *(w.path for w in oeq)]},
                                "this build's own set")
        site = site_mod.write_site(tmp / "site", site_mod.from_release(assets, pins, own), pins)
        results: list[installmatrix.Case] = []
        with hosts.pages(site, pins.repository.split("/")[1]) as local, \
                hosts.pypi_standin(outdir, tmp / "pypiserver.log") as pypi:
            checked = crawl(local, pins)
            say(f"every link resolves with its sha256: {len(checked)} files, e.g. {checked[0]}")
            env = {"PIP_INDEX_URL": pypi, "UV_DEFAULT_INDEX": pypi}
            for command in chosen:
                for installer in installers:
                    case, args = _case_for(command, local, pins, installer)
                    say(f"README: {command}")
                    installmatrix.run_case(case, pins, args, base, keep, say, pins.package_name in args, env)
                    say(f"{case.label}: {case.result}")
                    results.append(case)
    print(installmatrix.table(results))
    if not all(c.ok for c in results):
        raise RehearsalError(f"{sum(not c.ok for c in results)} of {len(results)} README installs failed")
    return 0
