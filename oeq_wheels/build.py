"""The host build: the scheduler over the products (product.py's protocol) and the cache.

Two packages come out of one run:
  OUTDIR/         fastmace-oeq-ext wheels (the PyPI release: `twine upload OUTDIR/*`)
  OUTDIR-extra/   binary openequivariance wheels, the fastmace-oeq-ext builds that name them
                  (both never for PyPI: each line's index serves them) and REPORT.{md,json}

Each product's recipe is its folder's product.py (ext/, oeq/); here: the output directories, the toolchain, the
Python headers, the plan (build.plan: which wheels, which inputs), the fetch, the background trees, the thread pool,
the failures and the report.
"""
from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import buildroot, pins as pins_mod, gate_common
from .inputs import fetch, freethreaded, pythons
from . import toolchain as tc
from .errors import BuildError, Interrupted, OeqWheelsError, UsageError
from .ext import product as ext_product
from .oeq import product as oeq_product
from .files import default_cache, sweep_stale
from .output import extra_dir, prepare_outdir
from .product import Compile, Part, Product, Run
from .stop import stop_if_cancelled
from .progress import Stage, say, table, warn
from .report import write_report

# The products, in the order their wheels are submitted (a third product: a third folder and one entry here).
PRODUCTS: tuple[Product, ...] = (ext_product, oeq_product)


@dataclass(frozen=True)
class Options:
    """What `oeq-wheels build` was asked for."""

    outdir: Path
    pythons: list[str] | None = None   # X.Y; None: every pinned CPython
    matrix: str | None = None
    force: bool = False
    jobs: int | None = None            # compilers at once; None: the cores
    cache: Path | None = None          # None: the default cache
    arches: list[str] | None = None    # None: every architecture pins.toml builds for
    toolchain: str = "pinned"          # or "host"


@dataclass(frozen=True)
class Plan:
    """Which wheels one build makes: each product's parts (with their wheels) and the inputs to fetch."""

    pins: pins_mod.Pins
    pythons: list[str]                                # every CPython asked for
    parts: tuple[tuple[Product, tuple[Part, ...]], ...]  # by product, in PRODUCTS' order

    @property
    def inputs(self) -> list[pins_mod.Pinned]:
        return [i for product, parts in self.parts for i in product.inputs(self.pins, list(parts))]

    @property
    def wheels(self) -> list[str]:
        return [w.who for _product, parts in self.parts for part in parts for w in part.wheels]


def check_arch_names(pins: pins_mod.Pins, requested: list[str] | None) -> list[str]:
    """Every architecture pins.toml builds for, after refusing an --arch that names another."""
    known = list(dict.fromkeys([pins.ext_arch.name, *(l.arch.name for l in pins.oeq_lines)]))
    if requested is not None and (not requested or [a for a in requested if a not in known]):
        raise UsageError(f"--arch {','.join(requested) or '(empty)'}: pins.toml builds for {', '.join(known)}; "
                         "name one or more of those, or leave --arch out to build all")
    return known


def toolchain_maker(pins: pins_mod.Pins, mode: str, cache: Path):
    """A function arch -> Toolchain for --toolchain pinned (the default) or host, and the line that says which.

    pinned: the pinned build root's compilers, run through bubblewrap; where bubblewrap cannot run (in a container)
    this host's own, if they are the pinned packages, unchanged (a container made of them); else one line naming
    both reasons. host: whatever compilers this host has (CXX, or g++): its wheels are not the released bytes.
    """
    if mode == "host":
        return tc.cross_toolchain, ("--toolchain host: this host's compilers, not the pinned toolchain; its wheels "
                                    "are not the released bytes")
    set_by_user = [v for v in ("CXX", "CC", "STRIP", "AR") if os.environ.get(v)]
    if set_by_user:
        say(f"oeq-wheels: NOTE: {', '.join(set_by_user)} ignored: the pinned toolchain builds (--toolchain host "
            "builds with them)")
    debs = pins.toolchain.for_host(tc.host_arch())
    cannot = buildroot.bwrap_problem()
    if cannot is not None:
        differs = buildroot.host_difference(debs)
        if differs is None:
            return tc.pinned_host_toolchain, f"this host's toolchain is the pinned one (no build root: {cannot})"
        raise BuildError(f"the pinned toolchain cannot build here: bubblewrap cannot run its build root ({cannot}), "
                         f"and this host's toolchain is not the pinned one ({differs}); allow user namespaces "
                         "(Ubuntu 24.04: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or build "
                         "with --toolchain host (wheels that are not the released bytes)")
    items = [pins_mod.Pinned(d.name, d.version, Path(d.file).name, d.sha256, url=pins.toolchain.archive + d.file)
             for d in debs]
    with Stage("all", "toolchain") as st:
        files = fetch.ensure(items, cache, say, stage=st)
        root = buildroot.ensure(pins.toolchain, debs, files, cache, say)
    key = buildroot.key(debs)
    where = cache / "buildroot" / f"{key}.shims"  # beside the root they run: same for every build, never left in /tmp

    def make(arch: pins_mod.Arch) -> tc.Toolchain:
        t = tc.root_toolchain(arch, root, key, where / arch.name)
        pinned = pins.toolchain.compiler(tc.host_arch(), arch.name)
        if t.version != pinned:
            raise BuildError(f"the build root's {arch.name} compiler says {t.version!r}, pins.toml [toolchain] "
                             f"compilers {pinned!r}; re-pin the toolchain")
        return t
    return make, f"the pinned build root {key} (Debian {pins.toolchain.debian} packages, run by bubblewrap)"


def select_arches(pins: pins_mod.Pins, requested: list[str] | None, make=None) -> tuple[dict[str, tc.Toolchain], list[str]]:
    """The architectures to build and each one's toolchain (make: arch -> Toolchain), and notes on those left out.

    This host's own architecture, and any asked for by name (--arch), fail the build without a working
    compiler; by default, another architecture whose cross compiler this host lacks and cannot install (a
    manylinux container) is left out with a note: publish refuses a release that lacks its wheels.
    """
    known = check_arch_names(pins, requested)
    make = make or tc.cross_toolchain
    toolchains, notes = {}, []
    for name in requested or known:
        try:
            toolchains[name] = make(pins.arches[name])
        except tc.CompileError as exc:
            if requested is not None or name == tc.host_arch():  # only a missing cross compiler is a note
                raise
            notes.append(f"{name} left out: {exc}")
    if not toolchains:
        raise BuildError("; ".join(notes))
    return toolchains, notes


def pythons_with_headers(pins: pins_mod.Pins, interps: dict[str, pythons.Interpreter], cache: Path,
                         toolchain: str = "pinned") -> dict[str, pythons.Interpreter]:
    """Each interpreter with its C headers copied into the cache (the build root sees them there). Headers that are
    not the pinned ones ([toolchain.pythons]) are an input the pins do not name: they stop a build of the pinned
    toolchain, whose wheels are to be the released bytes. They are a note with --toolchain host, and on a build host
    of another architecture than the pinned headers' (pyconfig.h differs by architecture): neither makes those."""
    out = {}
    strict = toolchain == "pinned" and \
        pins.toolchain.debian_arch(tc.host_arch()) == pins.toolchain.pythons_host
    for v, interp in interps.items():
        include, digest = pythons.headers(interp, cache)
        version, pinned = pins.toolchain.pythons.get(v, ("(none)", ""))
        if digest != pinned:
            differs = (f"CPython {interp.full_version}'s headers ({interp.executable}: {digest[:12]}) are not the "
                       f"pinned ones ({version}: {pinned[:12] or 'none pinned'})")
            if strict and pins_mod.free_threaded(v):  # made here from its pinned source: no other to install
                raise BuildError(f"{differs}, so its wheels would not be the released bytes; this host's configure "
                                 "gave another pyconfig.h where Python.h reads it: pin these headers in "
                                 "oeq_wheels/pins.toml [toolchain.pythons] (and record the new bytes), or build with "
                                 "--toolchain host (not the released bytes)")
            if strict:
                raise BuildError(f"{differs}, so its wheels would not be the released bytes; install CPython "
                                 f"{version} where the build finds it first (/opt/python/{interp.cp_tag}-"
                                 f"{interp.cp_tag}, pyenv's newest {v}, python{v} on PATH; `oeq-wheels pythons` "
                                 "lists them), pin these headers in oeq_wheels/pins.toml [toolchain.pythons] (and "
                                 "record the new bytes), or build with --toolchain host (not the released bytes)")
            why = "--toolchain host" if toolchain != "pinned" else \
                f"a {tc.host_arch()} build host; the pinned headers are a {pins.toolchain.pythons_host} one's"
            say(f"oeq-wheels: NOTE: {differs} ({why}): its wheels may differ from the released bytes")
        out[v] = dataclasses.replace(interp, include=str(include))
    return out


def wanted_pythons(pins: pins_mod.Pins, versions: list[str] | None) -> list[str]:
    """Every CPython to build. Each product builds those it serves: a release torch without a cp310 wheel narrows
    fastmace-oeq-ext, never the OEq lines, which build against their own (floor) torch."""
    return pins_mod.select_pythons(pins.pythons, versions, f"matrix {pins.matrix.name!r} or the OEq lines")


def plan(pins: pins_mod.Pins, versions: list[str] | None, arches: list[str]) -> Plan:
    """What a build of these Pythons (None: all) on these architectures (those with a toolchain) makes; offline."""
    wanted = wanted_pythons(pins, versions)
    return Plan(pins, wanted, tuple((product, tuple(product.parts(pins, wanted, arches))) for product in PRODUCTS))


def interpreters(pins: pins_mod.Pins, wanted: list[str], cache: Path,
                 toolchain: str = "pinned") -> dict[str, pythons.Interpreter]:
    """Each CPython with its headers in the cache. A free-threaded CPython's headers come from its pinned source
    (configured here once), the others' from the CPython found on this machine."""
    found = pythons.find_all([v for v in wanted if not pins_mod.free_threaded(v)])
    found.update({v: freethreaded.headers(pins.freethreaded[v], cache, say) for v in wanted if pins_mod.free_threaded(v)})
    return pythons_with_headers(pins, found, cache, toolchain)


def compiles(run: Run, the_plan: Plan, interps: dict[str, pythons.Interpreter]) -> list[Compile]:
    """Every compiler run the plan's wheels take, one after another without building (bench/run.py's floor): each
    part's preparation's, then each of its wheels'; one run of the same source, flags and compiler (the object
    cache compiles it once)."""
    out: dict[tuple, Compile] = {}
    for product, parts in the_plan.parts:
        run.unpacked[product.NAME] = product.common(run, list(parts))
        for part in parts:
            ready = product.setup(run, part, product.trees(run, part))
            for c in [*product.compiles(run, ready, None),
                      *(c for w in part.wheels for c in product.compiles(run, ready, interps[w.python]))]:
                out.setdefault((c.objects.toolchain.cxx, str(c.source), tuple(c.flags)), c)
    return list(out.values())


def _when_made(product: Product, run: Run, part: Part, tree, interp: pythons.Interpreter) -> list[dict]:
    """A part without a preparation: its wheel once the background download of its tree (a future) has ended; the
    tree's error is this wheel's."""
    ready = product.setup(run, part, tree.result())
    return product.build(run, ready, interp)


def run(options: Options) -> tuple[list[dict], dict[str, str]]:
    """Build the products' wheels for the requested Pythons and architectures; return (built rows, failures by wheel)."""
    t0 = time.monotonic()
    pins = pins_mod.load(options.matrix)
    wanted_pythons(pins, options.pythons)
    check_arch_names(pins, options.arches)
    cache = options.cache or default_cache()
    # Before the toolchain, whose root may download: an OUTDIR that cannot be written is one line, nothing fetched.
    outdir = prepare_outdir(options.outdir)
    extra = prepare_outdir(extra_dir(outdir))
    make, which = toolchain_maker(pins, options.toolchain, cache)
    say(f"oeq-wheels: toolchain: {which}")
    toolchains, arch_notes = select_arches(pins, options.arches, make)
    the_plan = plan(pins, options.pythons, list(toolchains))
    wanted = the_plan.pythons
    interps = interpreters(pins, wanted, cache, options.toolchain)
    # The report's compiler and the object cache's first: fastmace-oeq-ext's architecture's (PyPI's release).
    toolchain = toolchains.get(pins.ext_arch.name) or next(iter(toolchains.values()))
    jobs = options.jobs or os.cpu_count() or 1
    lines = ", ".join(dict.fromkeys(l.version(pins.oeq.version) for l in pins.oeq_lines if l.arch.name in toolchains))
    say(f"oeq-wheels: {pins.package_name} {pins.version} and openequivariance {lines}, "
        f"matrix {pins.matrix.name}, Pythons {', '.join(wanted)}, {', '.join(toolchains)} "
        f"({'; '.join(t.version for t in toolchains.values())}), {jobs} jobs, cache {cache}")
    for note in arch_notes:
        say(f"oeq-wheels: NOTE: {note}")
    sweep_stale(outdir, extra, cache / "extract", cache / "extract" / "blobs")  # what killed runs left
    with Stage("all", "fetch") as st:
        files = fetch.ensure(the_plan.inputs, cache, say, stage=st)
    objects = tc.ObjectCache(cache / "objects", toolchain, jobs)
    work = Run(pins, cache, files, toolchains, objects, jobs, outdir, options.force,
               forbidden=sorted({str(cache), str(cache.resolve()), str(outdir.resolve()),
                                 *gate_common.default_forbidden_paths()}))
    with Stage("all", "unpack"):
        for product, parts in the_plan.parts:
            work.unpacked[product.NAME] = product.common(work, list(parts))
    every = [(product, part) for product, parts in the_plan.parts for part in parts]
    # The trees (the large fetches: a library's stub needs its torch whole once) are made one after another in the
    # background, first those of the parts with a preparation (the OEq lines), then the others (fastmace-oeq-ext's
    # Pythons), so that the compilers start on the first line while the rest downloads; on a slow network the
    # download would otherwise idle them (bench/run.py --throttle). Each wheel waits for its own trees only; an
    # error is raised where a tree is used.
    downloads = ThreadPoolExecutor(1, thread_name_prefix="trees")
    trees = {id(part): downloads.submit(product.trees, work, part)
             for product, part in sorted(every, key=lambda pp: not pp[1].prepared)}
    rows, failures = [], {}
    try:
        # Each wheel starts as soon as its inputs are there: a line's wheels once its AOTI library is linked (the
        # next line's trees download meanwhile); fastmace-oeq-ext's once its torch tree is made. ObjectCache holds
        # the compilers to `jobs` at a time.
        with ThreadPoolExecutor(max(1, sum(len(part.wheels) for _, part in every))) as pool:
            futs = {pool.submit(_when_made, product, work, part, trees[id(part)], interps[w.python]): w.who
                    for product, part in every if not part.prepared for w in part.wheels}
            for product, part in every:
                if not part.prepared:
                    continue
                try:
                    with Stage(part.who, "unpack"):
                        made = trees[id(part)].result()
                    ready = product.setup(work, part, made)
                    if not part.wheels:
                        continue
                    product.prepare(work, ready)
                except Interrupted:
                    raise
                except OeqWheelsError as exc:
                    for w in part.wheels:
                        failures[w.who] = str(exc)
                    continue
                futs.update({pool.submit(product.build, work, ready, interps[w.python]): w.who for w in part.wheels})
            for fut, who in futs.items():
                try:
                    rows += fut.result()
                except Interrupted:
                    raise
                except OeqWheelsError as exc:  # report every wheel, then fail
                    failures[who] = str(exc)
    finally:
        downloads.shutdown(cancel_futures=True)  # a stopped run: the one download under way ends (members checks)
        work.later.close()  # what the preparations left (a line's AOTI library and stubs)
    stop_if_cancelled()
    rows.sort(key=lambda r: r["wheel"])
    elapsed = time.monotonic() - t0
    # A failed build keeps the last good REPORT (it describes the wheels still there) and writes its own beside it.
    report = write_report(extra, pins, rows, failures, elapsed, toolchain, "REPORT-failed" if failures else "REPORT")
    if not failures:  # an earlier failure's report no longer describes this directory
        for stale in ("REPORT-failed.md", "REPORT-failed.json"):
            (extra / stale).unlink(missing_ok=True)
    say(f"\nbuilt {len(rows)} wheel(s) in {elapsed:.1f}s: {pins.package_name} for PyPI into {outdir}; "
        f"openequivariance and its lines' {pins.package_name} into {extra}")
    if rows:
        print(table(rows))
    for who, why in failures.items():
        warn(f"\n[{who}] FAILED, no wheel written: {why}")
    if failures:
        warn(f"the failures are in {report}; the previous REPORT.md, if any, is unchanged")
    return rows, failures
