"""oeq-wheels: build, verify and release fastmace-oeq-ext and the binary OpenEquivariance wheels.

Also `python -m oeq_wheels`. Every expected failure is one line on stderr: exit 2 for a
usage error (bad option, pins, directory), 1 for a build or check that failed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import OeqWheelsError


def _pythons_arg(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="oeq-wheels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"oeq-wheels {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="VERB")

    b = sub.add_parser("build", help="build and verify both packages' wheels",
                       description="Build and verify the fastmace-oeq-ext wheels into OUTDIR and the binary "
                                   "openequivariance wheels (plus REPORT.md/.json) into OUTDIR-extra.")
    b.add_argument("outdir", type=Path, metavar="OUTDIR")
    b.add_argument("--python", type=_pythons_arg, help="comma-separated X.Y versions (default: all pinned)")
    b.add_argument("--matrix", help="a [matrix.NAME] of pins.toml (default: the release matrix)")
    b.add_argument("--force", action="store_true", help="overwrite a different wheel of the same name")
    b.add_argument("--jobs", type=int, help="parallel compiler processes (default: CPU count)")
    b.add_argument("--runner", choices=["host"], default="host",
                   help="where the build runs (build.sh also offers the container runner)")

    v = sub.add_parser("verify", help="re-check built wheels on their own (either package)",
                       description="Check each wheel against the pins: files, METADATA, manifest or build "
                                   "record, ELF, auditwheel, twine check.")
    v.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    v.add_argument("--matrix", help="pins matrix for openequivariance wheels' checks (default: the release matrix)")

    o = sub.add_parser("oeq-wheel", help="OEq's Python package as a pure wheel (no extension; for tests)")
    o.add_argument("outdir", type=Path, metavar="OUTDIR")

    s = sub.add_parser("stub", help="write a stub libcuda.so.1 for a library's driver symbols (tests, no GPU)")
    s.add_argument("library", type=Path)
    s.add_argument("outdir", type=Path, metavar="OUTDIR")

    c = sub.add_parser("clean-install", help="fresh venv, compilers replaced by sentinels: the prebuilt must work")
    c.add_argument("wheel_dir", type=Path, metavar="WHEEL_DIR")
    c.add_argument("python", nargs="?", help="X.Y or an interpreter path (default 3.11)")
    c.add_argument("--keep", action="store_true", help="keep the venv and logs")

    m = sub.add_parser("install-matrix", help="plain pip/uv installs from the registry plus our index, no compiler",
                       description="For each torch and installer: a fresh venv, compilers replaced by sentinels "
                                   "before installing, then OEq must import with its ops and build nothing.")
    m.add_argument("outdir", type=Path, metavar="OUTDIR", help="a build's OUTDIR (its -extra holds the OEq wheels)")
    m.add_argument("--torch", type=_pythons_arg, help="torch releases (default: the pinned tested_torch list)")
    m.add_argument("--installer", type=_pythons_arg, default=["pip", "uv"], help="pip,uv (default both)")
    m.add_argument("--python", default="3.11", help="X.Y of the venvs (default 3.11)")
    m.add_argument("--keep", action="store_true", help="keep each venv and its logs")

    pb = sub.add_parser("publish", help="gate both packages, write SHA256SUMS, upload fastmace-oeq-ext with twine",
                        description="Refuse unless OUTDIR holds exactly the pinned fastmace-oeq-ext set and "
                                    "OUTDIR-extra the openequivariance set, each verified; then `twine upload` "
                                    "OUTDIR's wheels (only those: the OEq wheels never go to PyPI).")
    pb.add_argument("outdir", type=Path, metavar="OUTDIR")
    pb.add_argument("--repository", help="a twine repository name, e.g. testpypi (default: pypi)")
    pb.add_argument("--repository-url", help="an upload URL (instead of --repository)")
    pb.add_argument("--dry-run", action="store_true", help="every check, no upload")
    pb.add_argument("--matrix")

    ix = sub.add_parser("index", help="write OUTDIR-extra/simple, a PEP 503 index of the openequivariance wheels")
    ix.add_argument("outdir", type=Path, metavar="OUTDIR")
    ix.add_argument("--matrix")
    ix.add_argument("--base-url", help="absolute URL the wheels are served from (default: links relative to OUTDIR-extra)")

    sub.add_parser("pythons", help="list the interpreters the build would use")
    f = sub.add_parser("fetch", help="download the pinned inputs into the cache")
    f.add_argument("--python", type=_pythons_arg)
    f.add_argument("--matrix")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        print("oeq-wheels: interrupted", file=sys.stderr)
        return 130
    except OeqWheelsError as exc:  # expected: one line, no traceback
        print(f"oeq-wheels: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _dispatch(args) -> int:
    from .files import default_cache
    from .pins import cp_tag, load, select_pythons
    if args.cmd == "build":
        from .build import run
        _rows, failures = run(args.outdir, args.python, args.matrix, args.force, args.jobs)
        return 1 if failures else 0
    if args.cmd == "verify":
        from packaging.utils import canonicalize_name, parse_wheel_filename

        from .verify import verify_oeq_binary, verify_wheel
        bad = 0
        for w in args.wheels:
            try:
                is_oeq = canonicalize_name(parse_wheel_filename(w.name)[0]) == "openequivariance"
            except Exception:  # an invalid name: verify_wheel reports it
                is_oeq = False
            verdict = verify_oeq_binary(w, load(args.matrix)) if is_oeq else verify_wheel(w)
            if verdict.ok:
                print(f"OK   {w.name}  tag {verdict.facts['tag']} (auditwheel: {verdict.facts['auditwheel_sym_tag']})")
            else:
                bad += 1
                print(f"FAIL {w.name}")
                for p in verdict.problems:
                    print(f"     - {p}")
        return 1 if bad else 0
    if args.cmd == "oeq-wheel":
        from .oeqpy import build_pure
        print(build_pure(load(), args.outdir, default_cache()))
        return 0
    if args.cmd == "stub":
        from .stub import stub_for_library
        print(stub_for_library(args.library, args.outdir))
        return 0
    if args.cmd == "clean-install":
        from .cleaninstall import run
        return run(args.wheel_dir, args.python, default_cache(), args.keep)
    if args.cmd == "install-matrix":
        from .installmatrix import run
        return run(args.outdir, args.torch, args.installer, args.python, args.keep)
    if args.cmd == "publish":
        from .release import publish
        return publish(args.outdir, args.repository, args.dry_run, load(args.matrix), args.repository_url)
    if args.cmd == "index":
        from .release import write_index
        print(write_index(args.outdir, load(args.matrix), args.base_url))
        return 0
    if args.cmd == "pythons":
        from .pythons import PythonNotFound, find
        pins = load()
        for v in dict.fromkeys(pins.matrix.pythons + pins.oeq_binary.pythons):
            try:
                i = find(v)
                print(f"{v}  {i.full_version}  {i.executable}")
            except PythonNotFound:
                print(f"{v}  missing")
        return 0
    if args.cmd == "fetch":
        from .fetch import ensure
        pins = load(args.matrix)
        vers = select_pythons(pins.matrix.pythons, args.python, f"matrix {pins.matrix.name!r}")
        items = pins.all_inputs([cp_tag(v) for v in vers]) + pins.oeq_binary_inputs()
        for path in ensure(items, default_cache(), print).values():
            print(f"{path}")
        return 0
    raise AssertionError(args.cmd)
