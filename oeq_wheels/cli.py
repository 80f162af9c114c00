"""Command line: `oeq-wheels build|verify|pythons|fetch` (also `python -m oeq_wheels`)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__


def _pythons_arg(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="oeq-wheels", description=__doc__)
    ap.add_argument("--version", action="version", version=f"oeq-wheels {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build and verify the wheels into OUTDIR")
    b.add_argument("outdir", type=Path)
    b.add_argument("--python", type=_pythons_arg, help="comma-separated X.Y versions (default: all pinned)")
    b.add_argument("--matrix", help="a [matrix.NAME] of pins.toml (default: the release matrix)")
    b.add_argument("--force", action="store_true", help="overwrite a different wheel of the same name")
    b.add_argument("--jobs", type=int, help="parallel compiler processes (default: CPU count)")
    b.add_argument("--runner", choices=["host"], default="host",
                   help="where the build runs (build.sh also offers the container runner)")

    v = sub.add_parser("verify", help="re-check built wheels on their own")
    v.add_argument("wheels", nargs="+", type=Path)

    o = sub.add_parser("oeq-wheel", help="OEq's Python package as a pure wheel (no stable extension)")
    o.add_argument("outdir", type=Path)

    s = sub.add_parser("stub", help="write a stub libcuda.so.1 for a library's driver symbols (tests, no GPU)")
    s.add_argument("library", type=Path)
    s.add_argument("outdir", type=Path)

    c = sub.add_parser("clean-install", help="fresh venv, compilers replaced by sentinels: the wheel must work")
    c.add_argument("wheel_dir", type=Path)
    c.add_argument("python", nargs="?", help="X.Y or an interpreter path (default 3.11)")
    c.add_argument("--keep", action="store_true", help="keep the venv and logs")

    pb = sub.add_parser("publish", help="check the set, verify every wheel, write SHA256SUMS, upload with twine")
    pb.add_argument("outdir", type=Path)
    pb.add_argument("--repository", help="a twine repository name, e.g. testpypi (default: pypi)")
    pb.add_argument("--repository-url", help="an upload URL (instead of --repository)")
    pb.add_argument("--dry-run", action="store_true", help="every check, no upload")
    pb.add_argument("--matrix")

    ix = sub.add_parser("index", help="write OUTDIR/simple, a PEP 503 index of the wheels")
    ix.add_argument("outdir", type=Path)
    ix.add_argument("--matrix")

    sub.add_parser("pythons", help="list the interpreters the build would use")
    f = sub.add_parser("fetch", help="download the pinned inputs into the cache")
    f.add_argument("--python", type=_pythons_arg)
    f.add_argument("--matrix")

    args = ap.parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        print("oeq-wheels: interrupted; nothing partial was left in the output directory", file=sys.stderr)
        return 130
    except Exception as exc:  # every expected failure has its own message
        from .build import BuildError
        from .fetch import FetchError
        from .pins import PinsError
        from .pythons import PythonNotFound
        from .release import ReleaseError
        if isinstance(exc, (BuildError, FetchError, PinsError, PythonNotFound, ReleaseError)):
            print(f"oeq-wheels: error: {exc}", file=sys.stderr)
            return 2
        raise


def _dispatch(args) -> int:
    if args.cmd == "build":
        from .build import run
        rows, failures = run(args.outdir, args.python, args.matrix, args.force, args.jobs)
        return 1 if failures else 0
    if args.cmd == "verify":
        from .verify import verify_wheel
        bad = 0
        for w in args.wheels:
            verdict = verify_wheel(w)
            if verdict.ok:
                print(f"OK   {w.name}  tag {verdict.facts['tag']} (auditwheel: {verdict.facts['auditwheel_sym_tag']})")
            else:
                bad += 1
                print(f"FAIL {w.name}")
                for p in verdict.problems:
                    print(f"     - {p}")
        return 1 if bad else 0
    if args.cmd == "oeq-wheel":
        from .build import default_cache
        from .oeqpy import build
        from .pins import load
        print(build(load(), args.outdir, default_cache()))
        return 0
    if args.cmd == "stub":
        from .stub import stub_for_library
        print(stub_for_library(args.library, args.outdir))
        return 0
    if args.cmd == "clean-install":
        from .build import default_cache
        from .cleaninstall import run
        return run(args.wheel_dir, args.python, default_cache(), args.keep)
    if args.cmd == "publish":
        from .pins import load
        from .release import publish
        return publish(args.outdir, args.repository, args.dry_run, load(args.matrix), args.repository_url)
    if args.cmd == "index":
        from .pins import load
        from .release import write_index
        print(write_index(args.outdir, load(args.matrix)))
        return 0
    if args.cmd == "pythons":
        from .pins import load
        from .pythons import PythonNotFound, find
        for v in load().matrix.pythons:
            try:
                i = find(v)
                print(f"{v}  {i.full_version}  {i.executable}")
            except PythonNotFound:
                print(f"{v}  missing")
        return 0
    if args.cmd == "fetch":
        from .build import default_cache
        from .fetch import ensure
        from .pins import cp_tag, load, select_pythons
        pins = load(args.matrix)
        vers = select_pythons(pins, args.python)
        for name, path in ensure(pins.all_inputs([cp_tag(v) for v in vers]), default_cache(), print).items():
            print(f"{path}")
        return 0
    return 2
