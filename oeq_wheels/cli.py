"""oeq-wheels: build, verify and release fastmace-oeq-ext and the binary OpenEquivariance wheels.

Also `python -m oeq_wheels`. Every expected failure is one line on stderr (oeq-wheels: error: ...).
Exit codes (each error's class in oeq_wheels/errors.py carries its own):
  0    done
  1    a build, check or step failed (a wheel refused, a gate or publish check, a download)
  2    usage: a bad option or argument, the pins, a missing or unusable directory
  130  interrupted (SIGINT, SIGTERM)
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from . import __version__, output, proc, progress
from .errors import Interrupted, OeqWheelsError, UsageError, report
from .files import sweep_stale, temp_prefix
from .settings import KEEP_DIR


def _comma_list(text: str) -> list[str]:
    """A comma-separated option's values (--python 3.11,3.12, --arch, --torch, --installer)."""
    return [v.strip() for v in text.split(",") if v.strip()]


def _verbosity() -> argparse.ArgumentParser:
    """-q/-v, accepted before or after the verb."""
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_const", const=progress.QUIET, dest="level",
                   default=argparse.SUPPRESS, help="only warnings, errors and results")
    g.add_argument("-v", "--verbose", action="store_const", const=progress.VERBOSE, dest="level",
                   default=argparse.SUPPRESS, help="also every command the pipeline runs")
    return common


def parser() -> argparse.ArgumentParser:
    common = _verbosity()
    ap = argparse.ArgumentParser(prog="oeq-wheels", description=__doc__, parents=[common],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"oeq-wheels {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="VERB")

    b = sub.add_parser("build", parents=[common], help="build and verify both packages' wheels",
                       description="Build and verify the fastmace-oeq-ext wheels into OUTDIR and the binary "
                                   "openequivariance wheels (plus REPORT.md/.json) into OUTDIR-extra.")
    b.add_argument("outdir", type=Path, metavar="OUTDIR")
    b.add_argument("--python", type=_comma_list, help="comma-separated X.Y versions (default: all pinned)")
    b.add_argument("--matrix", help="a [matrix.NAME] of pins.toml (default: the release matrix)")
    b.add_argument("--arch", type=_comma_list, help="comma-separated architectures, e.g. x86_64,aarch64 (default: "
                                                   "every one pins.toml builds; another host's with a cross compiler)")
    b.add_argument("--force", action="store_true", help="overwrite a different wheel of the same name")
    b.add_argument("--jobs", type=int, help="parallel compiler processes (default: CPU count)")
    b.add_argument("--toolchain", choices=["pinned", "host"], default="pinned",
                   help="pinned (default): the compilers pins.toml [toolchain] names (this host's where they are "
                        "those packages, else the pinned build root's); host: this host's, whatever they are (its "
                        "wheels are not the released bytes)")
    b.add_argument("--runner", choices=["auto", "host", "docker"], default="auto",
                   help="auto (default): the manylinux_2_28 container when '$DOCKER info' answers, else this host")

    v = sub.add_parser("verify", parents=[common], help="re-check built wheels on their own (either package)",
                       description="Check each wheel against the pins: files, METADATA, manifest or build "
                                   "record, ELF, auditwheel, twine check.")
    v.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    v.add_argument("--matrix", help="pins matrix for openequivariance wheels' checks (default: the release matrix)")

    o = sub.add_parser("oeq-wheel", parents=[common], help="OEq's Python package as a pure wheel (no extension; for tests)")
    o.add_argument("outdir", type=Path, metavar="OUTDIR")

    s = sub.add_parser("libcuda-stub", parents=[common],
                       help="write a link-only libcuda.so.1 for a library's driver symbols (tests, no GPU)")
    s.add_argument("library", type=Path)
    s.add_argument("outdir", type=Path, metavar="OUTDIR")

    c = sub.add_parser("clean-install", parents=[common], help="fresh venv, compilers replaced by sentinels: the prebuilt must work")
    c.add_argument("wheel_dir", type=Path, metavar="WHEEL_DIR")
    c.add_argument("python", nargs="?", help="X.Y or an interpreter path (default 3.11)")
    c.add_argument("--keep", action="store_true", help="keep the venv and logs")
    c.add_argument("--torch-index", help="where the release matrix's torch comes from (default: PyTorch's index of "
                                         "its CUDA label, or a local stand-in where it cannot be reached)")

    m = sub.add_parser("install-matrix", parents=[common], help="plain pip/uv installs from the registry plus our index, no compiler",
                       description="For each torch and installer: a fresh venv, compilers replaced by sentinels "
                                   "before installing, then OEq must import with its ops and build nothing.")
    m.add_argument("outdir", type=Path, metavar="OUTDIR", help="a build's OUTDIR (its -extra holds the OEq wheels)")
    m.add_argument("--torch", type=_comma_list, help="torch releases (default: the pinned tested_torch list)")
    m.add_argument("--installer", type=_comma_list, default=["pip", "uv"], help="pip,uv (default both)")
    m.add_argument("--python", default="3.11", help="X.Y of the venvs (default 3.11)")
    m.add_argument("--emulated-python", type=_comma_list, help="the rows of CPythons in a Debian root: these only "
                   "(default: pins.toml's emulated_pythons, under qemu, and debian_pythons, natively)")
    m.add_argument("--only-debian-pythons", action="store_true", help="no row of this host's own CPython: only "
                   "those in a Debian root (Debian testing's 3.14 and 3.15 natively, another architecture's emulated)")
    m.add_argument("--arch", type=_comma_list, help="architectures of the rows (default: every one the lines are "
                                                   "built for; another than this host's runs under emulation)")
    m.add_argument("--keep", action="store_true", help="keep each venv and its logs")
    m.add_argument("--record", type=Path, metavar="FILE", help="write the run's record (records/runs/NAME.json: the "
                   "commit, each wheel's sha256, each case's result), failed or not")
    m.add_argument("--from-index", metavar="URL", help="take fastmace-oeq-ext from this simple index (e.g. "
                                                       "TestPyPI's, after an upload) instead of OUTDIR")

    cb = sub.add_parser("compare-builds", parents=[common], help="two builds' OEq wheels compared by what the gate checks",
                        description="Each openequivariance wheel of SECOND against the same-named wheel of FIRST: "
                                    "files, metadata, each library's machine, NEEDED, RUNPATH and imported symbols, "
                                    "auditwheel's tag, torch-abi-audit's verdict (e.g. cross-built against native aarch64).")
    cb.add_argument("first", type=Path, metavar="FIRST", help="a directory of wheels (e.g. dist-extra)")
    cb.add_argument("second", type=Path, metavar="SECOND")
    cb.add_argument("--arch", type=_comma_list, help="only these architectures' wheels (default: all in SECOND)")
    cb.add_argument("--bytes", action="store_true",
                    help="and the same bytes: a wheel of SECOND whose bytes differ from FIRST's stops it (the release)")

    pb = sub.add_parser("publish", parents=[common], help="gate both packages, write SHA256SUMS, upload fastmace-oeq-ext with twine",
                        description="Refuse unless OUTDIR holds exactly the pinned fastmace-oeq-ext set and "
                                    "OUTDIR-extra the openequivariance set, each verified; then `twine upload` "
                                    "OUTDIR's wheels (only those: the OEq wheels never go to PyPI).")
    pb.add_argument("outdir", type=Path, metavar="OUTDIR")
    pb.add_argument("--repository", help="a twine repository name, e.g. testpypi (default: pypi)")
    pb.add_argument("--repository-url", help="an upload URL (instead of --repository)")
    pb.add_argument("--index-url", help="the repository's simple index, asked which files it already has "
                                        "(default: PyPI's/TestPyPI's, else <repository URL>/simple/)")
    pb.add_argument("--dry-run", action="store_true", help="every check, no upload")
    pb.add_argument("--require-recorded", action="store_true",
                    help="refuse any wheel whose sha256 is not in records/release.json: the default (kept for the "
                         "release job's lines)")
    pb.add_argument("--unrecorded", action="store_true",
                    help="LOUD: publish wheels whose bytes records/release.json does not name (no GPU proof ran them); "
                         "never for a release")
    pb.add_argument("--check-index", action="store_true",
                    help="with --dry-run too: refuse a file the index already has with other bytes (the release's "
                         "preflight, before anything is published)")
    pb.add_argument("--matrix")

    rc = sub.add_parser("rehearse-ci", parents=[common], help="run release.yml (and test.yml) here under act, as "
                        "GitHub's runner would, with local stand-ins for GitHub's services",
                        description="A fresh clone of the working tree tagged v<version>, run by a non-root user "
                                    "with password-free sudo under act; stand-ins for GitHub's services (oeq_wheels/checks/rehearse_ci.py); "
                                    "then what was published is held to docs/validation.md's sha256s.")
    rc.add_argument("--job", action="append", help="only this job of release.yml, with the jobs it needs (repeatable)")
    rc.add_argument("--python", help="the suite's slice: the tag job and the build job's steps for this CPython")
    rc.add_argument("--keep-caches", action="store_true", help="keep the runner user's caches (default: empty them)")
    rc.add_argument("--keep", action="store_true", help="keep the rehearsal's folder (the clone, the log)")
    rc.add_argument("--hostile", nargs="*", metavar="SCENARIO",
                    help="the last mile only, seeded with `make wheels` output, once per scenario (default: all, "
                         "oeq_wheels/checks/last_mile.py); each hostile one must publish nothing and say why")
    rc.add_argument("--seed", type=Path, default=Path("dist"), metavar="OUTDIR",
                    help="with --hostile: the build output the scenarios start from (default: dist, `make wheels`)")
    rc.add_argument("--record", type=Path, metavar="FILE",
                    help="with --hostile: write the run's record there (each scenario's verdict; records/runs/)")
    rc.add_argument("--without-tests", action="store_true",
                    help="every job of release.yml but the test workflow it calls (run `make test` on its own)")

    ix = sub.add_parser("site", parents=[common], help="lay out the binary OEq index site (GitHub Pages), one index per CUDA line",
                        description="Write SITE: /<line>/simple/ (PEP 503 + PEP 691 JSON + PEP 658 metadata), "
                                    "/<line>/links.html, files/, SHA256SUMS. Wheels come from OUTDIR-extra, or from "
                                    "releases' downloaded assets (--release, renamed by the host; SHA256SUMS restores "
                                    "their names).")
    ix.add_argument("outdir", type=Path, metavar="OUTDIR", nargs="?", help="a build's OUTDIR (its -extra holds the OEq wheels)")
    ix.add_argument("--release", type=Path, action="append", default=[], metavar="DIR",
                    help="one release's assets as `gh release download` saves them, with its SHA256SUMS (repeatable)")
    ix.add_argument("--out", type=Path, metavar="SITE", help="where to write the site (default: OUTDIR-extra/site)")
    ix.add_argument("--recorded", type=Path, metavar="FILE",
                    help="hold every --release to this recorded set (default: each release's own, "
                         "records/release.json at the tag its folder is named after)")
    ix.add_argument("--unrecorded", action="store_true",
                    help="LOUD: serve OUTDIR's wheels though records/release.json does not name their bytes (default: "
                         "refused, as every door refuses them)")

    rh = sub.add_parser("rehearse", parents=[common], help="rehearse the release's hosting and README's installs locally",
                        description="Attach the build to a local stand-in of the GitHub release (assets renamed as "
                                    "GitHub renames them, downloads redirected), lay out the site from those assets "
                                    "as the Pages job does, serve it as Pages does, check every link and its sha256, "
                                    "then run README's install lines verbatim (the site's address substituted) with "
                                    "pip and uv, compilers replaced by failing sentinels.")
    rh.add_argument("outdir", type=Path, metavar="OUTDIR")
    rh.add_argument("--installer", type=_comma_list, default=["pip", "uv"], help="pip,uv (default both)")
    rh.add_argument("--python", default="3.11", help="X.Y of the venvs (default 3.11)")
    rh.add_argument("--command", type=lambda t: [int(x) for x in _comma_list(t)], metavar="N[,N]",
                    help="only these of README's install lines (0-based; default all)")
    rh.add_argument("--keep", action="store_true", help="keep each venv and its logs")

    t = sub.add_parser("check-tag", parents=[common], help="refuse a release tag other than v + the pinned version")
    t.add_argument("tag", metavar="TAG", help="e.g. v0.7.0.post3 or refs/tags/v0.7.0.post3")
    t.add_argument("--repository", metavar="OWNER/NAME", help="the repository releasing; must be [package] "
                                                                "repository of pins.toml (the URLs derive from it)")
    t.add_argument("--matrix")

    rp = sub.add_parser("pins", parents=[common], help="re-pin pins.toml from the registry, or --check every pin",
                        description="Re-pin from the registry's JSON API (hashes) and range reads of remote wheels "
                                    "(torch's metadata; no wheel is downloaded); prints what changed. Nothing is "
                                    "written unless the whole result loads.")
    rp.add_argument("--torch", metavar="X.Y.Z", help="re-pin a matrix (the release matrix unless --matrix) to this torch")
    rp.add_argument("--matrix", help="the [matrix.NAME] --torch re-pins")
    rp.add_argument("--python", type=_comma_list, help="with --torch: the CPythons the matrix builds (X.Y,...)")
    rp.add_argument("--oeq", metavar="X.Y.Z", help="re-pin OpenEquivariance's sdist")
    g = rp.add_mutually_exclusive_group()
    g.add_argument("--post", type=int, metavar="N", help="fastmace-oeq-ext's rebuild number (X.Y.Z.postN)")
    g.add_argument("--next-post", action="store_true", help="the rebuild number after the pinned one")
    rp.add_argument("--check", action="store_true", help="every pin still on the registry with its sha256; writes nothing")
    rp.add_argument("--records", action="store_true", help="pin the sha256 of RECORD, and the link stubs' digests, for "
                    "every torch and NVIDIA wheel that has none (one full download each, kept in the cache), so that "
                    "builds fetch only the members they read; with --torch, after it")
    rp.add_argument("--toolchain", action="store_true", help="re-pin each [toolchain.ARCH]'s Debian packages from the "
                    "archive: the closure of its roots, as its Packages index has them today")
    rp.add_argument("--index-url", default=None, help="the registry's simple index (default: PyPI's)")
    rp.add_argument("--pins", type=Path, default=None, help="the pins file (default: oeq_wheels/pins.toml)")
    rp.add_argument("--readme", type=Path, default=None, help="the README whose install lines derive from the pins "
                                                               "(default: the checkout's, when re-pinning its pins.toml)")

    sub.add_parser("pythons", parents=[common], help="list the interpreters the build would use")
    sub.add_parser("release-plan", parents=[common], help="what release.yml takes from the pins, as NAME=VALUE lines "
                                                          "for $GITHUB_OUTPUT")
    f = sub.add_parser("fetch", parents=[common], help="download the pinned inputs whole into the cache (e.g. to build offline later)")
    f.add_argument("--python", type=_comma_list)
    f.add_argument("--matrix")
    f.add_argument("--only", metavar="PROJECT[,PROJECT...]",
                   help="only these projects' pinned files (e.g. torch,pybind11)")
    return ap


def _on_signal(signum, frame):
    """SIGINT/SIGTERM: stop every child and worker, then unwind (temporary files go with it)."""
    proc.cancel()
    for s in (signal.SIGINT, signal.SIGTERM):  # a second signal while cleaning up only repeats the stop
        signal.signal(s, lambda *_: proc.cancel())
    raise Interrupted(signal.Signals(signum).name)


def _join_workers() -> None:
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()


@contextlib.contextmanager
def _run_tempdir():
    """One temporary directory per run, TMPDIR for us and every tool we start (pip, compilers).

    Whatever a stopped tool leaves behind (pip's unpack and build-tracker directories after
    SIGTERM, say) goes when the run ends, however it ends; a killed run's directory goes
    at the start of the next one.
    """
    base = Path(tempfile.gettempdir())
    sweep_stale(base)
    run_tmp = tempfile.mkdtemp(dir=base, prefix=temp_prefix("oeq-wheels-run"))
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = run_tmp, run_tmp
    os.environ.setdefault(KEEP_DIR, str(base))  # where what a run keeps on purpose goes (files.keep_dir)
    try:
        yield
    finally:
        _join_workers()  # workers unwind (removing their own trees) once their tools are gone
        tempfile.tempdir = None
        if saved is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved
        shutil.rmtree(run_tmp, ignore_errors=True)


def _interrupted(exc: Interrupted) -> int:
    # By now every worker has stopped and the run's temporary directory is gone (_run_tempdir),
    # so what is printed below is already true.
    done = output.placed()
    kept = (f"; the wheels finished before it stay: {', '.join(p.name for p in done)}" if done
            else "; no wheel was written by this run")
    print(f"oeq-wheels: interrupted ({exc}): stopped every tool and worker, removed their temporary "
          f"files and partial downloads{kept}", file=sys.stderr)
    return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    progress.set_level(getattr(args, "level", progress.NORMAL))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
    try:
        if args.cmd == "build":
            _container_handoff(args)
        with _run_tempdir():
            return _dispatch(args)
    except Interrupted as exc:
        return _interrupted(exc)
    except BrokenPipeError:  # e.g. `oeq-wheels pythons | head -1`
        sys.stderr.close()
        return 1
    except OeqWheelsError as exc:  # expected: one line, no traceback; the exit code is the class's (errors.py)
        from . import settings
        if settings.current().debug:  # a maintainer's view: where it was raised, then the same line
            import traceback
            traceback.print_exception(exc, file=sys.stderr)
        return report(exc)


def _container_handoff(args) -> None:
    """Refuse bad input before any work, whichever the runner; then hand a container build to its runner."""
    from . import runner
    from .pins import load
    if args.python is not None or args.arch is not None:
        from .build import check_arch_names
        pins = load(args.matrix)
        if args.python is not None:
            from .build import wanted_pythons
            wanted_pythons(pins, args.python)
        check_arch_names(pins, args.arch)
    name = runner.choose(args.runner)
    if name is not None:  # does not return
        runner.exec_container(runner.container_args(args.outdir, args.python, args.matrix, args.force, args.jobs,
                                                    args.arch, args.toolchain), name)


def _dispatch(args) -> int:
    return VERBS[args.cmd](args)


# One function per verb, each importing only what its verb needs (so `--help` and light verbs stay fast).

def _build(args) -> int:
    from .build import Options, run
    _rows, failures = run(Options(args.outdir, args.python, args.matrix, args.force, args.jobs, arches=args.arch,
                                  toolchain=args.toolchain))
    return 1 if failures else 0


def _verify(args) -> int:
    from .gate import verify_any
    from .pins import load
    pins = load(args.matrix) if args.matrix else None
    bad = 0
    for w in args.wheels:
        verdict = verify_any(w, pins)
        bad += not verdict.ok
        print("\n".join(verdict.said()))
    return 1 if bad else 0


def _oeq_wheel(args) -> int:
    from .files import default_cache
    from .oeq.wheel import build_pure
    from .pins import load
    print(build_pure(load(), args.outdir, default_cache()))
    return 0


def _libcuda_stub(args) -> int:
    from .driver_stub import stub_for_library
    print(stub_for_library(args.library, args.outdir))
    return 0


def _clean_install(args) -> int:
    from .files import default_cache
    from .checks.cleaninstall import run
    return run(args.wheel_dir, args.python, default_cache(), args.keep, args.torch_index)


def _compare_builds(args) -> int:
    from .release.compare import run
    return run(args.first, args.second, args.arch, args.bytes)


def _install_matrix(args) -> int:
    from .checks.installmatrix import run
    return run(args.outdir, args.torch, args.installer, args.python, args.keep, args.from_index, args.arch,
               args.emulated_python, plain=not args.only_debian_pythons, record=args.record)


def _publish(args) -> int:
    from .pins import load
    from .release.publish import publish
    if args.unrecorded and args.require_recorded:
        raise UsageError("--unrecorded and --require-recorded contradict each other; pass one")
    if args.unrecorded:
        say_unrecorded("publishing")
    return publish(args.outdir, args.repository, args.dry_run, load(args.matrix), args.repository_url,
                   args.index_url, not args.unrecorded, args.check_index)


def say_unrecorded(what: str) -> None:
    """The loud line of --unrecorded: the one door that lets bytes out that no recorded set names."""
    import sys
    print(f"oeq-wheels: WARNING: --unrecorded: {what} wheels that records/release.json may not name: no GPU proof "
          "ran them, and no release may carry them", file=sys.stderr)


def _rehearse_ci(args) -> int:
    from .checks.rehearse_ci import run, run_hostile
    if args.record and args.hostile is None:
        raise UsageError("rehearse-ci --record writes a hostile run's record: add --hostile")
    if args.hostile is not None:
        return run_hostile(fresh=not args.keep_caches, keep=args.keep, only=args.hostile or None, record=args.record,
                           seed=args.seed.resolve())
    return run(args.job, args.python, fresh=not args.keep_caches, keep=args.keep, tests=not args.without_tests)


def _site(args) -> int:
    from .pins import load
    from .release import site
    pins = load()
    if args.outdir is None and not args.release:
        raise UsageError("site needs OUTDIR or --release DIR (a release's downloaded assets)")
    if args.outdir is None and args.out is None:
        raise UsageError("site --release needs --out SITE (where to write the site) when no OUTDIR is given")
    from .release import recorded
    # Each release is held to the recorded set of its own tag (the folder's name), or to --recorded FILE.
    wheels = [w for d in args.release for w in site.from_release(
        d, pins, recorded.load(args.recorded) if args.recorded else recorded.at_tag(d.name))]
    if args.outdir is not None and not args.outdir.is_dir():  # as publish says it: the command line is wrong
        raise UsageError(f"{args.outdir} is not a directory; build first (make wheels) or name the build's OUTDIR")
    if args.outdir is not None:
        built = site.from_outdir(output.extra_dir(args.outdir), pins)
        if args.unrecorded:
            say_unrecorded("serving")
        else:  # the owner's manual door holds the recorded set too
            recorded.load().refuse_unrecorded([w.path for w in built], "serve")
        wheels += built
    out = args.out or output.extra_dir(args.outdir) / "site"
    print(site.write_site(out, wheels, pins))
    return 0


def _rehearse(args) -> int:
    from .checks.rehearse import run
    return run(args.outdir, args.installer, args.python, args.command, args.keep)


def _check_tag(args) -> int:
    from .pins import load
    from .release.publish import check_repository, check_tag
    pins = load(args.matrix)
    print(f"release tag {check_tag(args.tag, pins)} matches the pinned version")
    if args.repository is not None:
        print(f"repository {check_repository(args.repository, pins)} is the pinned one")
    return 0


def _release_plan(args) -> int:
    from .pins import load
    from .release.plan import release_plan
    for name, value in release_plan(load()).items():
        print(f"{name}={value}")
    return 0


def _pythons(args) -> int:
    from .pins import load
    from .inputs.pythons import PythonNotFound, find
    for v in load().pythons:
        try:
            i = find(v)
            print(f"{v}  {i.full_version}  {i.executable}")
        except PythonNotFound:
            print(f"{v}  missing")
    return 0


def _fetch(args) -> int:
    from .inputs.fetch import ensure
    from .files import default_cache
    from .pins import cp_tag, load, select_pythons
    pins = load(args.matrix)
    vers = select_pythons(pins.matrix.pythons, args.python, f"matrix {pins.matrix.name!r}")
    items = pins.all_inputs([cp_tag(v) for v in vers]) + pins.oeq_binary_inputs()
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        known = sorted({i.name for i in items})
        if not wanted <= set(known):
            raise UsageError(f"fetch --only: {', '.join(sorted(wanted - set(known)))} is not a pinned project; "
                             f"pinned: {', '.join(known)}")
        items = [i for i in items if i.name in wanted]
    for path in ensure(items, default_cache(), print, whole=True).values():  # whole files, e.g. for a mirror
        print(f"{path}")
    return 0


def _pins(args) -> int:
    from . import registry, repin
    from .files import default_cache
    from .pins import PINS_FILE
    path = args.pins or PINS_FILE
    index = args.index_url or registry.PYPI
    if args.check:
        if args.torch or args.oeq or args.post is not None or args.next_post or args.toolchain:
            raise UsageError("pins --check writes nothing; give it alone")
        count, problems = repin.check(path, index)
        for line in problems:
            print(f"pins: {line}", file=sys.stderr)
        if problems:
            return 1
        print(f"all {count} pinned files are on {index} with their pinned sha256")
        return 0
    if not (args.torch or args.oeq or args.post is not None or args.next_post or args.records or args.toolchain):
        raise UsageError("pins needs --torch X.Y.Z, --oeq X.Y.Z, --post N, --next-post, --records, --toolchain or "
                         "--check")
    if (args.matrix or args.python) and not args.torch:
        raise UsageError("--matrix and --python choose what --torch re-pins; give --torch too")
    readme = args.readme or (PINS_FILE.parent.parent / "README.md" if path == PINS_FILE else None)
    r = repin.Repinner(path, index, readme)
    if args.torch:
        r.torch(args.torch, args.matrix, args.python)
    if args.oeq:
        r.oeq(args.oeq)
    if args.post is not None or args.next_post:
        r.post(args.post, args.next_post)
    if args.toolchain:
        from .repin_toolchain import repin as repin_toolchain
        repin_toolchain(r.doc, lambda s: print(f"pins: {s}", file=sys.stderr))
    if args.records:
        r.records(default_cache(), lambda s: print(f"pins: {s}", file=sys.stderr))
        r.notes = [n for n in r.notes if "no RECORD pin yet" not in n]
    diff = r.write()
    print(diff or f"{path.name}: nothing changed", end="" if diff else "\n")
    for note in r.notes:
        print(f"note: {note}")
    return 0


VERBS = {"build": _build, "verify": _verify, "oeq-wheel": _oeq_wheel, "libcuda-stub": _libcuda_stub, "clean-install": _clean_install,
         "compare-builds": _compare_builds, "install-matrix": _install_matrix, "publish": _publish, "site": _site,
         "rehearse": _rehearse, "rehearse-ci": _rehearse_ci, "check-tag": _check_tag, "pins": _pins, "release-plan": _release_plan,
         "pythons": _pythons, "fetch": _fetch}
