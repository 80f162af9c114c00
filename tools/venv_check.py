"""The tools venv checked against the pins, not against anything kept beside it (tools/bootstrap.sh runs this).

A venv made from requirements/lock.txt (every wheel pinned by sha256, installed with --require-hashes) holds the same
files on every machine for one CPython minor: the wheels' files in site-packages and the scripts pip writes for their
entry points, whose only machine-specific byte is the venv's own path. `content_digest` is one sha256 over them
(each file's path and sha256, the venv's path replaced by a placeholder), and requirements/tools-venv.json pins it per
CPython minor and machine (tools/lock.sh writes it for the CPythons it finds; a venv of another says NOT CHECKED). Left out, as a later run cannot tell them from tampering otherwise:
pip's own records of the install (RECORD, INSTALLER, REQUESTED, direct_url.json: RECORD lists the bytecode pip
compiled) and compiled bytecode, which this check removes, so that what a run reads is compiled from checked source.
Also checked: the venv sees no site-packages but its own, and its python is the CPython found now.

Standard library only, run by the base CPython with -I -S: nothing of the venv is imported to check it.
    venv_check.py check VENV PINS    exit 0, or 1 with one line naming the difference and the fix
    venv_check.py pin VENV PINS      write VENV's digest into PINS for its CPython minor (tools/lock.sh)
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
from pathlib import Path

PLACEHOLDER = b"{venv}"
# pip's entry-point scripts start `#!<venv>/bin/python`, or, where that path holds a space or is long (over 127
# bytes), with a /bin/sh trampoline (distlib's ScriptMaker); the digest reads both as the first.
TRAMPOLINE = re.compile(rb"#!/bin/sh\n'''exec' \"?(\{venv\}/bin/[^\" ]+)\"? \"\$0\" \"\$@\"\n' '''\n")
PIP_RECORDS = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def minor() -> str:
    return "%d.%d" % sys.version_info[:2]


def key() -> str:
    """What a digest is pinned for: the CPython minor and the machine (their wheels differ), e.g. 3.12-x86_64."""
    return f"{minor()}-{platform.machine()}"


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{minor()}" / "site-packages"


def listing(venv: Path) -> dict[str, str]:
    """Every checked file, by its path in the venv, with its sha256 (a link: where it points)."""
    out: dict[str, str] = {}
    path = bytes(venv)
    roots = [(site_packages(venv), False), (venv / "bin", True)]
    for root, scripts in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                p = Path(d) / f
                rel = p.relative_to(venv).as_posix()
                if p.parent.name.endswith(".dist-info") and f in PIP_RECORDS:
                    continue
                if scripts and f.lower().startswith("activate"):
                    continue  # the venv module's shell scripts: nothing here sources them; they differ by CPython patch
                if p.is_symlink():
                    if scripts and f.startswith("python"):
                        continue  # bin/python*: checked below, against the CPython found now
                    out[rel] = "-> " + os.readlink(p)
                    continue
                data = p.read_bytes()
                if scripts:
                    data = data.replace(path, PLACEHOLDER)
                    m = TRAMPOLINE.match(data)
                    if m:
                        data = b"#!" + m.group(1) + b"\n" + data[m.end():]
                out[rel] = hashlib.sha256(data).hexdigest()
    return out


def content_digest(venv: Path) -> str:
    return hashlib.sha256(json.dumps(listing(venv), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def problem(venv: Path, pinned: dict) -> str | None:
    """Why this venv is not what the pins make; None when it is."""
    cfg = venv / "pyvenv.cfg"
    try:
        lines = cfg.read_text().splitlines()
    except OSError as exc:
        return f"its pyvenv.cfg cannot be read ({exc.strerror})"
    if "include-system-site-packages = false" not in [line.strip() for line in lines]:
        return "its pyvenv.cfg lets in site-packages other than its own"
    if os.path.realpath(venv / "bin" / "python") != os.path.realpath(sys.executable):
        return f"its python is not the CPython found now ({sys.executable})"
    want = pinned.get(key())
    if want is None:
        return None  # main() says NOT CHECKED
    have = content_digest(venv)
    if have != want:
        return f"its content digest is {have[:16]}…, requirements/tools-venv.json pins {want[:16]}… for {key()}"
    return None


def drop_bytecode(venv: Path) -> None:
    for d, dirs, _files in os.walk(venv):
        if "__pycache__" in dirs:
            shutil.rmtree(Path(d) / "__pycache__", ignore_errors=True)
            dirs.remove("__pycache__")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("check", "pin"):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    verb, venv, pins = argv[0], Path(argv[1]), Path(argv[2])
    try:
        pinned = json.loads(pins.read_text()) if pins.is_file() else {}
    except (OSError, ValueError) as exc:
        print(f"bootstrap: {pins} cannot be read ({exc}); restore it from git", file=sys.stderr)
        return 1
    if verb == "pin":
        pinned[key()] = content_digest(venv)
        pins.write_text(json.dumps(dict(sorted(pinned.items())), indent=1) + "\n")
        return 0
    why = problem(venv, pinned)
    if why:
        print(f"bootstrap: the tools venv {venv} is not what requirements/lock.txt makes: {why}; remove it "
              f"(rm -rf {venv}) and run again: it is made again from the pinned wheels", file=sys.stderr)
        return 1
    if key() not in pinned:
        print(f"bootstrap: NOT CHECKED: requirements/tools-venv.json pins no tools venv for {key()} (it pins "
              f"{', '.join(sorted(pinned)) or 'none'}); this venv was made from the hash-locked wheels and is used "
              "unchecked", file=sys.stderr)
    drop_bytecode(venv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
