"""`make rehearse-ci REHEARSE_CI_FLAGS=--hostile`: release.yml's last mile under act, attacked.

The release's own jobs from the build's comparison on (preflight, attest, PyPI, the GitHub release, Pages) run under
act as rehearse_ci runs them, fed with this checkout's `make wheels` output (the recorded bytes) instead of a build of
their own: the build job is cut to its native comparison and its artifacts. A clean run must publish exactly the
recorded set; each hostile scenario must end with nothing published and the line that names the file and why.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import pins as pins_mod
from ..errors import LastMileError, OeqWheelsError
from ..output import extra_dir, variants_dir
from ..release import publish, recorded
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
)}


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


def seed(ws: Path, scenario: Scenario, repo: Path, tag: str, pins: pins_mod.Pins) -> None:
    """The rehearsal's folders as the scenario finds them: the seeded build, the artifacts the build's comparison
    takes, and whatever is already published."""
    dist = repo / "dist"
    wheels = sorted(dist.glob("*.whl")) + sorted(extra_dir(dist).glob("*.whl")) + \
        sorted(variants_dir(extra_dir(dist)).glob("*.whl"))
    record = recorded.load(repo / recorded.RELATIVE)
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
    """Other bytes under the same name: one byte appended (a zip reader still opens it)."""
    path.write_bytes(path.read_bytes() + b"\0")


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
