"""Where the results go, and putting a wheel there safely.

OUTDIR holds distributions for PyPI only, so that `twine upload OUTDIR/*` is right;
everything else (binary openequivariance wheels, reports, SHA256SUMS, the index) goes
to OUTDIR-extra beside it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .errors import OeqWheelsError
from .files import sha256_file


def extra_dir(outdir: Path) -> Path:
    outdir = Path(outdir)
    return outdir.parent / f"{outdir.name}-extra"


def place(wheel: Path, outdir: Path, force: bool, sha256: str) -> Path:
    """Move a verified wheel into outdir without ever replacing a different file unless force.

    The copy goes to a unique temporary name first, then hard-links to its final
    name, which fails if the name exists: two builds racing for one OUTDIR can
    neither clobber each other nor leave a half-written file.
    """
    dest = outdir / wheel.name
    fd, tmp_s = tempfile.mkstemp(dir=outdir, prefix=f".{wheel.name}.", suffix=".part")
    tmp = Path(tmp_s)
    try:
        with os.fdopen(fd, "wb") as out, open(wheel, "rb") as src:
            shutil.copyfileobj(src, out)
        os.chmod(tmp, 0o644)
        if force:
            os.replace(tmp, dest)
            return dest
        try:
            os.link(tmp, dest)
        except FileExistsError:
            if sha256_file(dest) != sha256:
                raise OeqWheelsError(
                    f"{dest} already exists with different content; a released file name can never be "
                    "re-uploaded, so bump the .postN version in oeq_wheels/pins.toml (or pass --force to "
                    "overwrite a local build)") from None
        return dest
    finally:
        tmp.unlink(missing_ok=True)
