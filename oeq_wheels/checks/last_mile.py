"""`make rehearse-ci REHEARSE_CI_FLAGS=--hostile`: release.yml's last mile under act, attacked.

The release's own jobs from the build's comparison on (preflight, attest, PyPI, the GitHub release, Pages) run under
act as rehearse_ci runs them, fed with this checkout's `make wheels` output (the recorded bytes) instead of a build of
their own: the build job is cut to its native comparison and its artifacts. A clean run must publish exactly the
recorded set; each hostile scenario must end with nothing published and the line that names the file and why.
"""
from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .. import pins as pins_mod, proc
from ..errors import LastMileError, OeqWheelsError
from ..output import extra_dir
from ..release import publish, recorded
from ..files import sha256_file
from ..wheelfile import record_hash
from ..release.site import release_asset_name


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    event: str        # push or workflow_dispatch
    refusal: str      # the line the log must hold ("" for the clean run)


SCENARIOS = {s.name: s for s in (
    Scenario("clean", "the recorded set, nothing there yet: everything is published", "push", ""),
    Scenario("native-differs", "the native aarch64 artifact holds other bytes under the cross-built wheels' names",
             "push", "does not reproduce the release's bytes: "),
    Scenario("asset-altered", "a re-run finds the release with one wheel altered and its SHA256SUMS regenerated",
             "push", "the release already holds assets that are not ours: "),
    Scenario("manual-run", "a workflow_dispatch run on the tag", "workflow_dispatch",
             "NOT PUBLISHED: a workflow_dispatch run on "),
    Scenario("pypi-other-bytes", "PyPI already holds one of our file names with other bytes", "push",
             "already has 1 of our file name(s) with other bytes: "),
    Scenario("artifact-tampered", "a PyPI wheel in the build's artifact carries injected code, its RECORD made to "
             "match", "push", " has sha256 "),
    Scenario("native-short", "the native aarch64 artifact lacks one of the cross-built wheels", "push",
             "wheels: the two builds"),
    Scenario("ambiguous-zip", "a native wheel is another wheel's bytes followed by its own (pip installs such a zip)",
             "push", " bytes before "),
    Scenario("older-asset-altered", "an earlier release's wheel altered at Pages time, its SHA256SUMS regenerated",
             "push", "changed after the release"),
    Scenario("foreign-signer", "an earlier release's wheels attested by another workflow of this repository", "push",
             "no provenance for "),
)}
EARLIER = "v0.0.0"   # the earlier release the last two scenarios seed (a tag on the clone's own commit)
SIGNER = ".github/workflows/release.yml"   # the one workflow whose attestations the doors accept


def workflow(wf: dict) -> dict:
    """release.yml cut to its last mile: the tag job; the build job as its native comparison (the wheels seeded from
    the rehearsal, OEQ_REHEARSAL_SEED) and its artifacts; the publishing jobs as they are."""
    build = wf["jobs"]["build"]
    keep = []
    for step in build["steps"]:
        uses, run = step.get("uses", ""), step.get("run", "")
        if uses.startswith("actions/checkout@"):
            keep.append(step)
            keep.append({"name": "The build's output, seeded from `make wheels` (the recorded bytes)",
                         "run": 'cp -r "$OEQ_REHEARSAL_SEED/dist" "$OEQ_REHEARSAL_SEED/dist-extra" .'})
        elif "oeq-aarch64-native" in str(step.get("with", {})) or "compare-builds" in run:
            keep.append({k: v for k, v in step.items() if k != "if"})  # the native artifact is seeded here
        elif uses.startswith(("actions/upload-artifact@", "actions/setup-python@")) or "tomllib" in run:
            keep.append(step)  # the artifacts; the CPythons the tools run on
    wf["jobs"]["build"] = {**{k: v for k, v in build.items() if k not in ("steps", "if")}, "needs": ["tag"],
                           "steps": keep}
    for name in ("tests", "build-aarch64-native", "clean-install"):
        del wf["jobs"][name]
    wf["jobs"]["preflight"]["needs"] = ["tag", "build"]
    return wf


def seeded_wheels(dist: Path) -> list[Path]:
    """A build's output (OUTDIR, OUTDIR-extra; `make wheels`: dist/): what every scenario seeds."""
    return sorted(dist.glob("*.whl")) + sorted(extra_dir(dist).glob("*.whl"))


def seed(ws: Path, scenario: Scenario, dist: Path, tag: str, pins: pins_mod.Pins) -> None:
    """The rehearsal's folders as the scenario finds them: the seeded build, the artifacts the build's comparison
    takes, and whatever is already published."""
    wheels = seeded_wheels(dist)
    record = recorded.load(ws / "clone" / recorded.RELATIVE)   # the set of the tree under test
    try:
        record.refuse_incomplete(wheels, "rehearse the last mile with them")
    except OeqWheelsError as exc:
        raise LastMileError(f"{exc}; run `make wheels` first (the rehearsal publishes the recorded bytes)") from None
    seeded = ws / "seed"
    shutil.copytree(dist, seeded / "dist")
    shutil.copytree(extra_dir(dist), seeded / "dist-extra", ignore=shutil.ignore_patterns("site", "SHA256SUMS"))
    publish.write_sha256sums(wheels, seeded / "dist-extra")
    native = ws / "artifacts" / "oeq-aarch64-native"
    native.mkdir(parents=True)
    aarch64 = [w for w in wheels if w.name.endswith("_aarch64.whl")]
    for w in aarch64:
        shutil.copy(w, native)
    if scenario.name == "native-differs":
        _altered(native / aarch64[0].name)
    if scenario.name == "native-short":
        (native / aarch64[-1].name).unlink()
    if scenario.name == "ambiguous-zip":
        target = native / aarch64[0].name
        target.write_bytes(aarch64[-1].read_bytes() + target.read_bytes())
    if scenario.name == "artifact-tampered":
        _injected(seeded / "dist" / sorted(dist.glob("*.whl"))[0].name)
    if scenario.name in ("older-asset-altered", "foreign-signer"):
        _earlier_release(ws, wheels, pins, scenario.name)
    if scenario.name == "asset-altered":
        assets = ws / "github" / "releases" / tag / "assets"
        assets.mkdir(parents=True)
        oeq = next(w for w in wheels if w.name.startswith("openequivariance-"))
        shutil.copy(oeq, assets / release_asset_name(oeq.name))
        _altered(assets / release_asset_name(oeq.name))
        publish.write_sha256sums([assets / release_asset_name(oeq.name)], assets)  # regenerated to match
    if scenario.name == "pypi-other-bytes":
        first = sorted(dist.glob("*.whl"))[0]
        shutil.copy(first, ws / "pypi" / first.name)
        _altered(ws / "pypi" / first.name)


def _altered(path: Path) -> None:
    """Other bytes under the same name, still a well-formed wheel: its first member's timestamp moved (every member
    and RECORD unchanged), as a build of other tools would differ."""
    _rezip(path, lambda i, info, data: (info if i else _moved(info), data))


def _moved(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    y, *rest = info.date_time
    moved = zipfile.ZipInfo(info.filename, (y + 1, *rest))
    moved.compress_type, moved.external_attr = info.compress_type, info.external_attr
    return moved


def _injected(path: Path) -> None:
    """A hostile uploader's wheel: a module added to the first package, listed in RECORD with its own sha256."""
    code = b"import os\nos.system('echo owned')\n"
    with zipfile.ZipFile(path) as zf:
        package = next(n.split("/")[0] for n in zf.namelist() if "/" in n and ".dist-info/" not in n)
    extra = f"{package}/_injected.py"

    def edit(i, info, data):
        if info.filename.endswith(".dist-info/RECORD"):
            data = f"{extra},{record_hash(code)},{len(code)}\n".encode() + data
        return info, data
    _rezip(path, edit, extra=(extra, code))


def _rezip(path: Path, edit, extra: tuple[str, bytes] | None = None) -> None:
    out = path.with_name(path.name + ".new")
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        if extra:
            zout.writestr(extra[0], extra[1])
        for i, info in enumerate(zin.infolist()):
            zout.writestr(*edit(i, info, zin.read(info)))
    out.replace(path)


def _earlier_release(ws: Path, wheels: list[Path], pins: pins_mod.Pins, name: str) -> None:
    """An earlier release, tagged EARLIER on the clone's commit (its recorded set is today's), every wheel an asset
    under the name GitHub gives it with its SHA256SUMS, each attested by release.yml at its tag; then the scenario's
    change: one wheel altered with SHA256SUMS regenerated over it, or every attestation made by another workflow."""
    proc.run(["git", "-C", str(ws / "clone"), "tag", EARLIER], check=True, capture_output=True)
    assets = ws / "github" / "releases" / EARLIER / "assets"
    assets.mkdir(parents=True)
    for w in wheels:
        shutil.copy(w, assets / release_asset_name(w.name))
    signer = f"{pins.repository}/{SIGNER}" if name != "foreign-signer" else \
        f"{pins.repository}/.github/workflows/other.yml"
    rows = [f"{sha256_file(a)} {signer} refs/tags/{EARLIER} {a.name}\n" for a in sorted(assets.iterdir())]
    (ws / "github" / "attested.txt").write_text("".join(rows))
    if name == "older-asset-altered":
        _altered(sorted(assets.glob("openequivariance-*.whl"))[0])
    # SHA256SUMS as the release job writes it (each wheel's own name), over the assets as they are now
    (assets / "SHA256SUMS").write_text("".join(f"{sha256_file(assets / release_asset_name(w.name))}  {w.name}\n"
                                               for w in sorted(wheels, key=lambda w: w.name)))


def published(ws: Path, before: dict[str, bytes]) -> list[str]:
    """What the run put anywhere a user can download from, beyond what the scenario seeded."""
    out = []
    for f in sorted((ws / "pypi").glob("*")) + sorted((ws / "github").rglob("*")):
        if f.is_file() and f.name != "attested.txt" and before.get(str(f)) != f.read_bytes():
            out.append(str(f.relative_to(ws)))
    if (ws / "pages" / "site").exists():
        out.append("pages/site")
    return out


def snapshot(ws: Path) -> dict[str, bytes]:
    return {str(f): f.read_bytes() for d in ("pypi", "github") for f in (ws / d).rglob("*") if f.is_file()}
