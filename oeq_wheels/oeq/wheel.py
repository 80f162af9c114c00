"""OpenEquivariance wheels made from the pinned, unmodified sdist: a pure one and a binary one.

OEq 0.7.0 is an sdist only, and building it compiles its stable extension with CMake
after downloading LibTorch. The *binary* wheel carries the sdist's `openequivariance/`
tree unchanged plus the stable extension this pipeline builds (oeq_wheels.oeq.stable) in
`_torch/extlib/`, where OEq 0.7.0 loads it instead of any JIT build; its version
0.7.0+<label> still satisfies `openequivariance==0.7.0` and can never be uploaded to
PyPI. The *pure* wheel (no extension, OEq takes its JIT path) serves the tests of
fastmace_oeq_ext's prebuilt path.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from packaging.metadata import Metadata
from packaging.tags import Tag

from ..inputs import fetch, unpack
from ..errors import OeqWheelsError
from ..output import prepare_outdir
from ..wheelfile import fix_modes, pack, wheel_file
from ..pins import Pins

EXTLIB = Path("openequivariance") / "_torch" / "extlib"


def check_sdist(pins: Pins, root: Path) -> str:
    """The sdist's PKG-INFO, after checking it names the pinned release."""
    pkg_info = (root / "PKG-INFO").read_text()
    meta = Metadata.from_email(pkg_info, validate=False)
    if (meta.name, str(meta.version)) != ("openequivariance", pins.oeq.version):
        raise OeqWheelsError(f"sdist PKG-INFO names {meta.name} {meta.version}, pins say {pins.oeq.version}")
    return pkg_info


# OEq 0.7.0's _torch/extlib imports packaging.version but does not declare it; a fresh
# venv (pip or uv) then fails `import openequivariance`. The binary wheel declares it.
MISSING_REQUIREMENTS = ("packaging",)


def metadata_from_sdist(pkg_info: str, version: str) -> str:
    """The binary wheel's METADATA: the sdist's PKG-INFO with its Version changed and the
    requirements OEq imports but does not declare added after its own."""
    text, n = re.subn(r"^Version: .*$", f"Version: {version}", pkg_info, count=1, flags=re.M)
    if n != 1:
        raise OeqWheelsError("the sdist's PKG-INFO has no Version field")
    declared = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)\s*$", text, flags=re.M)
    lines = text.split("\n")
    last = max(i for i, l in enumerate(lines) if re.match(r"Requires-Dist: [^;]*$", l))
    for req in (r for r in MISSING_REQUIREMENTS if r not in declared):
        lines.insert(last + 1, f"Requires-Dist: {req}")
        last += 1
    return "\n".join(lines)


def stage(pins: Pins, root: Path, staged: Path, *, version: str, tag: Tag, purelib: bool,
          extlib_files: dict[str, Path] | None = None, build_record: str | None = None) -> Path:
    """Lay out the unpacked wheel: the sdist's package tree, extension files in extlib/, dist-info."""
    from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE
    shutil.copytree(root / "openequivariance", staged / "openequivariance")
    for name, path in (extlib_files or {}).items():
        shutil.copyfile(path, staged / EXTLIB / name)
    info = staged / f"openequivariance-{version}.dist-info"
    (info / "licenses").mkdir(parents=True)
    shutil.copyfile(root / "LICENSE", info / "licenses" / "LICENSE")
    (info / "METADATA").write_text(metadata_from_sdist(check_sdist(pins, root), version))
    (info / "WHEEL").write_text(wheel_file(tag, purelib))
    if build_record is not None:
        (info / OEQ_BUILD_FILE).write_text(build_record)
    fix_modes(staged)
    return staged


def build_pure(pins: Pins, outdir: Path, cache: Path) -> Path:
    """openequivariance-0.7.0-py3-none-any.whl: the sdist's Python package, no extension."""
    prepare_outdir(outdir)  # one line where OUTDIR cannot be made, before anything is fetched
    files = fetch.ensure([pins.oeq], cache)
    root = unpack.oeq_tree(files[pins.oeq.file], pins.oeq, cache)
    with tempfile.TemporaryDirectory() as tmp:
        staged = stage(pins, root, Path(tmp) / "stage", version=pins.oeq.version, tag=Tag("py3", "none", "any"),
                       purelib=True)
        whl = pack(staged, Path(tmp) / "out", pins.source_date_epoch)
        dest = outdir / whl.name
        shutil.move(str(whl), dest)
    return dest
