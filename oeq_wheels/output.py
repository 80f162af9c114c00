"""Where the results go, and putting a wheel there safely.

OUTDIR holds distributions for PyPI only, so that `twine upload OUTDIR/*` is right;
everything else (binary openequivariance wheels, reports, SHA256SUMS, the index) goes
to OUTDIR-extra beside it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from . import stop
from .errors import OeqWheelsError, UsageError
from .files import sha256_file, temp_prefix

_placed: list[Path] = []
_placed_guard = threading.Lock()


def extra_dir(outdir: Path) -> Path:
    outdir = Path(outdir)
    return outdir.parent / f"{outdir.name}-extra"


def prepare_outdir(outdir: Path) -> Path:
    """OUTDIR made and writable, or one line naming why and the fix (before anything is fetched or built)."""
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {outdir}: {exc.strerror}; choose another OUTDIR") from exc
    try:
        tempfile.TemporaryFile(dir=outdir).close()
    except OSError as exc:
        raise UsageError(f"output directory {outdir} is not writable ({exc.strerror}); "
                         "fix its permissions or choose another OUTDIR") from exc
    return outdir


def placed() -> list[Path]:
    """The wheels this process has put into an output directory (what an interrupt leaves)."""
    with _placed_guard:
        return list(_placed)


def place(wheel: Path, outdir: Path, force: bool, sha256: str) -> Path:
    """Move a verified wheel into outdir without ever replacing a different file unless force.

    The copy goes to a unique temporary name first, then hard-links to its final
    name, which fails if the name exists: two builds racing for one OUTDIR can
    neither clobber each other nor leave a half-written file.
    """
    dest = outdir / wheel.name
    fd, tmp_s = tempfile.mkstemp(dir=outdir, prefix=temp_prefix(wheel.name), suffix=".part")
    tmp = Path(tmp_s)
    try:
        with os.fdopen(fd, "wb") as out, open(wheel, "rb") as src:
            shutil.copyfileobj(src, out)
        os.chmod(tmp, 0o644)
        stop.stop_if_cancelled()  # an interrupted run places nothing more
        if force:
            os.replace(tmp, dest)
        else:
            try:
                os.link(tmp, dest)
            except FileExistsError:
                if sha256_file(dest) != sha256:
                    raise OeqWheelsError(
                        f"{dest} already exists with different content (builds are reproducible, so one of the "
                        "two came from other inputs or another pins.toml); keep the existing file and check it "
                        "with `oeq-wheels verify`, or pass --force to replace it; a version already released "
                        "needs a new .postN in oeq_wheels/pins.toml") from None
        with _placed_guard:
            _placed.append(dest)
        return dest
    finally:
        tmp.unlink(missing_ok=True)
