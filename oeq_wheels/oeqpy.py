"""OpenEquivariance's Python package as a pure wheel, made from the pinned sdist.

OEq 0.7.0 is an sdist only, and building it compiles its stable AOTI extension
with CMake after downloading LibTorch, which fails offline. Its Python package
itself needs no build: this wheel carries the sdist's `openequivariance/` tree
unchanged (C++ sources included, for a JIT fallback) with the sdist's own
PKG-INFO as METADATA. Without the stable extension OEq takes its JIT path,
which fastmace_oeq_ext serves with the prebuilt library.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from packaging.metadata import Metadata

from . import assemble, fetch, inputs
from .pins import Pins


def build(pins: Pins, outdir: Path, cache: Path) -> Path:
    files = fetch.ensure([pins.oeq], cache)
    root = inputs.oeq_tree(files[pins.oeq.file], pins.oeq, cache)
    pkg_info = (root / "PKG-INFO").read_text()
    meta = Metadata.from_email(pkg_info, validate=False)
    if (meta.name, str(meta.version)) != ("openequivariance", pins.oeq.version):
        raise RuntimeError(f"sdist PKG-INFO names {meta.name} {meta.version}, pins say {pins.oeq.version}")
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "stage"
        shutil.copytree(root / "openequivariance", staged / "openequivariance")
        info = staged / f"openequivariance-{pins.oeq.version}.dist-info"
        (info / "licenses").mkdir(parents=True)
        shutil.copyfile(root / "LICENSE", info / "licenses" / "LICENSE")
        (info / "METADATA").write_text(pkg_info)
        (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: oeq-wheels\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        whl = assemble.pack(staged, Path(tmp) / "out", pins.source_date_epoch)
        dest = outdir / whl.name
        shutil.move(str(whl), dest)
    return dest
