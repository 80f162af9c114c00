"""Release steps over a directory of built wheels: SHA256SUMS, a PEP 503 index, the publish gate."""
from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from . import pins as pins_mod, verify
from .fetch import sha256_file


class ReleaseError(RuntimeError):
    pass


def wheels_of(outdir: Path, pins: pins_mod.Pins) -> list[Path]:
    name = canonicalize_name(pins.package_name)
    return sorted(p for p in outdir.glob("*.whl") if canonicalize_name(parse_wheel_filename(p.name)[0]) == name)


def write_sha256sums(wheels: list[Path], outdir: Path) -> Path:
    """`sha256sum -c SHA256SUMS` checks a download against these lines."""
    path = outdir / "SHA256SUMS"
    tmp = path.with_name(path.name + ".part")
    tmp.write_text("".join(f"{sha256_file(w)}  {w.name}\n" for w in wheels))
    os.replace(tmp, path)
    return path


def write_index(outdir: Path, pins: pins_mod.Pins) -> Path:
    """outdir/simple/<project>/index.html (PEP 503), each link with its #sha256= fragment."""
    wheels = wheels_of(outdir, pins)
    if not wheels:
        raise ReleaseError(f"no {pins.package_name} wheels in {outdir}")
    project = canonicalize_name(pins.package_name)
    simple = outdir / "simple"
    (simple / project).mkdir(parents=True, exist_ok=True)
    links = "".join(f'    <a href="../../{html.escape(w.name)}#sha256={sha256_file(w)}" '
                    f'data-requires-python="{html.escape(_requires_python(w))}">{html.escape(w.name)}</a><br/>\n'
                    for w in wheels)
    (simple / project / "index.html").write_text(
        f"<!DOCTYPE html>\n<html><body>\n<h1>Links for {project}</h1>\n{links}</body></html>\n")
    (simple / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><body>\n<a href="{project}/">{project}</a><br/>\n</body></html>\n')
    return simple


def _requires_python(wheel: Path) -> str:
    tag = next(iter(parse_wheel_filename(wheel.name)[3]))
    digits = tag.interpreter[2:]
    return f"=={digits[0]}.{digits[1:]}.*"


def check_set(outdir: Path, pins: pins_mod.Pins) -> list[Path]:
    """Exactly one verified wheel per pinned Python, all of the pinned version; else ReleaseError."""
    wheels = wheels_of(outdir, pins)
    by_tag: dict[str, list[Path]] = {}
    problems = []
    for w in wheels:
        _, version, _, tags = parse_wheel_filename(w.name)
        if str(version) != pins.version:
            problems.append(f"{w.name} is version {version}, pins say {pins.version}")
        for t in tags:
            by_tag.setdefault(t.interpreter, []).append(w)
    want = [pins_mod.cp_tag(v) for v in pins.matrix.pythons]
    missing = [t for t in want if t not in by_tag]
    if missing:
        problems.append(f"incomplete set: no wheel for {', '.join(missing)} (build them: make wheels)")
    for t, ws in by_tag.items():
        if len(ws) > 1:
            problems.append(f"several wheels for {t}: {', '.join(w.name for w in ws)}")
        if t not in want:
            problems.append(f"{ws[0].name} is for {t}, which the pins do not release")
    if problems:
        raise ReleaseError("refusing to publish: " + "; ".join(problems))
    return wheels


def publish(outdir: Path, repository: str | None, dry_run: bool, pins: pins_mod.Pins,
            repository_url: str | None = None) -> int:
    wheels = check_set(outdir, pins)
    bad = []
    for w in wheels:
        v = verify.verify_wheel(w)  # includes twine check --strict
        print(f"{'OK  ' if v.ok else 'FAIL'} {w.name}" + ("" if v.ok else ": " + "; ".join(v.problems)))
        if not v.ok:
            bad.append(w.name)
    if bad:
        raise ReleaseError(f"refusing to publish: {len(bad)} wheel(s) failed verification")
    sums = write_sha256sums(wheels, outdir)
    print(f"wrote {sums}")
    if dry_run:
        print(f"dry run: would upload {len(wheels)} wheel(s) to {repository_url or repository or 'pypi'}")
        return 0
    if not _has_credentials():
        raise ReleaseError("refusing to publish: no upload credentials. Set TWINE_PASSWORD (a PyPI API token, "
                           "TWINE_USERNAME=__token__) or store one in the keyring for twine; nothing was uploaded")
    cmd = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
    if repository_url:
        cmd += ["--repository-url", repository_url]
    elif repository:
        cmd += ["--repository", repository]
    # twine reads the credentials itself (environment or keyring); they are never passed, printed or logged here.
    proc = subprocess.run(cmd + [str(w) for w in wheels])
    if proc.returncode != 0:
        raise ReleaseError("twine upload failed (see its output above)")
    return 0


def _has_credentials() -> bool:
    if os.environ.get("TWINE_PASSWORD"):
        return True
    try:  # twine's other source: the keyring, for its default user name
        import keyring
        return keyring.get_password("https://upload.pypi.org/legacy/", os.environ.get("TWINE_USERNAME", "__token__")) is not None
    except Exception:
        return False
