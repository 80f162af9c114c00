"""What a product is to the build: the protocol each product's recipe implements (ext/product.py,
oeq/product.py), and the pieces every recipe shares.

build.py schedules (outdir, toolchains, Python headers, fetch, the background trees, the thread pool, failures, the
report) over this protocol and knows no recipe; a product's folder holds its recipe, behind one module that
implements `Product`. A third product is a third folder and one entry in build.PRODUCTS.

The scheduler calls, for one run (build.run; build.plan and build.compiles call the first ones alone):
  parts(pins, pythons, arches)     what it builds for the cell: its parts and each part's wheels (offline)
  inputs(pins, parts)              the pinned files to fetch
  common(run, parts)               its inputs every part shares, in the run's one unpack stage (run.unpacked[NAME])
  trees(run, part)                 a part's large trees, made in the background, one part after another
  setup(run, part, trees)          the part's state for what follows (no work)
  prepare(run, ready)              a part's Python-independent build, for parts marked `prepared`: run in order as
                                   their trees arrive, before their wheels start
  build(run, ready, interp)        one Python's wheels: compile, link, assemble, gate, place; the report's rows
  compiles(run, ready, interp)     the compiler runs of one Python's wheel (interp None: of the preparation), the
                                   list prepare() and build() compile (bench/run.py's floor runs them bare)
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fastmace_oeq_ext.manifest import Input

from . import pins as pins_mod, tags, toolchain as tc, wheelfile
from .errors import BuildError
from .inputs import pythons
from .output import place
from .progress import Stage, say


@dataclass(frozen=True)
class Wheel:
    """One Python's build of a part."""

    who: str      # the wheel's name in the report's failures, e.g. "openequivariance cu130-x86_64 cp311"
    python: str   # X.Y (3.14t: free-threaded)


@dataclass(frozen=True)
class Part:
    """A product's Python-independent unit: its trees (made in the background) and its wheels, one per Python."""

    key: str              # e.g. cp311 (fastmace-oeq-ext: one part per Python), cu130-x86_64 (an OEq line)
    arch: str             # the architecture it is built for: its toolchain
    wheels: tuple[Wheel, ...]
    who: str              # its name in progress lines
    prepared: bool = False  # its wheels wait for prepare(), which the scheduler runs in order as the trees arrive
    what: Any = None      # the product's own description of the part (an OEq line)


@dataclass(frozen=True)
class Compile:
    """One compiler run: a source with its flags, by one architecture's compilers (its ObjectCache)."""

    objects: tc.ObjectCache
    source: Path
    flags: list[str]
    kind: str = ""        # which of the wheel's object lists it joins (e.g. "module", "nanobind")


@dataclass
class Run:
    """What every recipe is given for one build run."""

    pins: pins_mod.Pins
    cache: Path
    files: dict[str, Path]         # the fetched inputs by file name
    toolchains: dict[str, tc.Toolchain]  # by architecture
    objects: tc.ObjectCache        # the host architecture's (or the first) compilers; with_toolchain for the others
    jobs: int
    outdir: Path
    force: bool
    forbidden: list[str] = field(default_factory=list)
    unpacked: dict[str, Any] = field(default_factory=dict)   # each product's unpack(), by its NAME
    later: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # removed when the run ends

    @property
    def verdicts(self) -> Path:
        """Where the build remembers auditwheel's and twine's verdicts by wheel sha256 (tags.audit)."""
        return self.cache / "verdicts"

    def objects_for(self, arch: str) -> tc.ObjectCache:
        """One architecture's compilers, sharing the cache and the compiler slots."""
        return self.objects.with_toolchain(self.toolchains[arch])


class Product(Protocol):
    """One module per product (ext/product.py, oeq/product.py); this module's docstring says when each is called."""

    NAME: str          # the project name, e.g. "openequivariance"

    def parts(self, pins: pins_mod.Pins, pythons: list[str], arches: list[str]) -> list[Part]: ...

    def inputs(self, pins: pins_mod.Pins, parts: list[Part]) -> list[pins_mod.Pinned]: ...

    def common(self, run: Run, parts: list[Part]) -> Any: ...

    def trees(self, run: Run, part: Part) -> Any: ...

    def setup(self, run: Run, part: Part, trees: Any) -> Any: ...

    def prepare(self, run: Run, ready: Any) -> None: ...

    def build(self, run: Run, ready: Any, interp: pythons.Interpreter) -> list[dict]: ...

    def compiles(self, run: Run, ready: Any, interp: pythons.Interpreter | None) -> list[Compile]: ...


def entry(pin: pins_mod.Pinned) -> Input:
    """A pinned file as a record names it."""
    return Input(pin.name, pin.version, pin.file, pin.sha256)


def proven_platform(p: pins_mod.Pins, libs: dict[str, Path], cp: str, tmp: Path, st: Stage, who: str,
                    memo_dir: Path, target: str) -> str:
    """Pack the libraries alone with the generic tag, let auditwheel judge them, and choose the tag."""
    probe = wheelfile.probe_wheel(libs, cp, tmp / "probe", p.source_date_epoch, arch=tags.tag_arch(target))
    proven, problems = tags.proven_tag(tags.audit(probe, memo_dir), tags.external_ok(p))
    if problems:
        raise BuildError("; ".join(problems))
    platform = tags.choose_tag(target, proven)
    st.note = f"auditwheel: symbols fit {proven} -> tag {platform}"
    if platform != target:
        say(f"[{who}] NOTE: the binary needs {proven}; tagging {platform}, not the target "
            f"{target} (build in the manylinux_2_28 container for the target)")
    return platform


def verify_and_place(who: str, whl: Path, check, note: str, outdir: Path, force: bool, platform: str,
                     timings: dict, interp: pythons.Interpreter) -> dict:
    """The gate on the packed wheel, then its no-clobber placement in outdir; the report's row."""
    with Stage(who, "verify", timings) as st:
        verdict = check(whl)
        if not verdict.ok:
            raise BuildError("verification failed: " + "; ".join(verdict.problems))
        st.note = note
    dest = place(whl, outdir, force, verdict.facts["sha256"])
    return {"wheel": dest.name, "tag": platform, "size": dest.stat().st_size,
            "sha256": verdict.facts["sha256"], "timings": timings, "python": interp.full_version}


def torch_version_info(torch_root: Path) -> dict:
    """torch/version.py's fields, read as text: the build names itself there."""
    text = (torch_root / "torch" / "version.py").read_text()
    out = {}
    for key in ("__version__", "cuda", "git_version"):
        m = re.search(rf"^{key}(?::[^=]*)?\s*=\s*'([^']*)'", text, re.M)
        out[key] = m.group(1) if m else None
    return out


def checked_torch(torch_root: Path, pin: pins_mod.Pinned, local: str, cuda: str) -> dict:
    """torch/version.py of an unpacked torch wheel, refused unless it names the pinned version and CUDA."""
    tv = torch_version_info(torch_root)
    expect = f"{pin.version}+{local}"
    if tv["__version__"] != expect or tv["cuda"] != cuda:
        raise BuildError(f"torch wheel {pin.file} names itself {tv['__version__']} (CUDA {tv['cuda']}), "
                         f"pins say {expect} (CUDA {cuda})")
    return tv
