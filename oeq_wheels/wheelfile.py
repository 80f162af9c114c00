"""The wheel file itself, for both products: its tag, its WHEEL file, fixed modes and `wheel pack` with fixed
timestamps (so that two builds of the same pins are the same bytes), and the throw-away probe wheel auditwheel
judges a library in."""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
from pathlib import Path

from packaging.tags import Tag

from . import proc
from .errors import OeqWheelsError


def record_hash(data: bytes) -> str:
    """RECORD's hash field for these bytes (PEP 376/427: sha256, urlsafe base64 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_tag(cp_tag: str, platform: str, abi: str | None = None) -> Tag:
    """cpXY-cpXY-<platform>, or cpXY-abi3-<platform> for a stable-ABI build."""
    return Tag(cp_tag, abi or cp_tag, platform)


def wheel_file(tag: Tag, purelib: bool = False, generator: str = "oeq-wheels") -> str:
    """The .dist-info/WHEEL text."""
    return (f"Wheel-Version: 1.0\nGenerator: {generator}\nRoot-Is-Purelib: {'true' if purelib else 'false'}\n"
            f"Tag: {tag}\n")


def fix_modes(root: Path) -> None:
    """Fixed modes: the archive must not depend on the builder's umask."""
    for p in root.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o755 if p.suffix == ".so" else 0o644)
        else:
            os.chmod(p, 0o755)


def probe_wheel(files: dict[str, Path], cp: str, out_dir: Path, source_date_epoch: int, arch: str = "x86_64") -> Path:
    """A throw-away wheel holding only these libraries, tagged linux_<arch>, for auditwheel to judge."""
    staged = out_dir / "stage"
    for arcname, path in files.items():
        (staged / arcname).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, staged / arcname)
    info = staged / "oeq_wheels_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: oeq-wheels-probe\nVersion: 0\n")
    (info / "WHEEL").write_text(wheel_file(wheel_tag(cp, "linux_" + arch)))
    fix_modes(staged)
    return pack(staged, out_dir / "out", source_date_epoch)


def pack(staged: Path, out_dir: Path, source_date_epoch: int) -> Path:
    """Zip the staged tree with `wheel pack` (RECORD, sorted entries, fixed timestamps)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.glob("*.whl"))
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(source_date_epoch))
    res = proc.run([sys.executable, "-m", "wheel", "pack", str(staged), "-d", str(out_dir)],
                          capture_output=True, text=True, env=env)
    made = sorted(set(out_dir.glob("*.whl")) - before)
    if res.returncode != 0 or len(made) != 1:
        raise OeqWheelsError(f"wheel pack failed: {res.stderr.strip() or res.stdout.strip()}")
    return made[0]
