"""PEP 825 wheel variants: every OEq line as a variant of one release, so that an installer that reads the machine
picks the CUDA line itself (uv with --preview-features wheel-variants; pip skips variant wheels).

A variant wheel is a line's gated wheel repacked as the release `<oeq version>+<[oeq_binary.variants] local_version>`:
the same files under that version (METADATA, the build record), `.dist-info/variant.json` naming its one variant,
and its label at the end of its file name (`...-manylinux_2_28_x86_64-cu13.whl`). The label is the line's CUDA major
(cu13, cu12); its properties are what uv's built-in NVIDIA provider reads from the driver: the line's CUDA release as
`cuda_version_lower_bound` (inclusive) and, below the newest line, the next line's major as
`cuda_version_upper_bound` (exclusive). So a CUDA 12.8 driver gets cu12, a CUDA 13 one cu13; a driver older than
every line, or none, gets no variant (uv refuses: the release "cannot be used", checks/variant_index.py). The index's
`openequivariance-<version>-variants.json` lists every label. uv 0.13 installs no provider plugin: it uses its own
port of one only where the declaration names it exactly (pins.toml [oeq_binary.variants] provider).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from fastmace_oeq_ext.oeq_build import FILE_NAME as OEQ_BUILD_FILE, OeqBuild

from .. import pins as pins_mod
from ..errors import VariantError
from ..tags import split_variant, tag_arch
from .. import wheelfile

FILE_NAME = "variant.json"   # in the wheel's .dist-info
NAMESPACE = "nvidia"


def label(line: pins_mod.OeqLine) -> str:
    return f"cu{line.cuda_major}"


def release_version(p: pins_mod.Pins) -> str:
    return f"{p.oeq.version}+{p.variants.local_version}"


def _by_cuda(p: pins_mod.Pins) -> list[pins_mod.OeqLine]:
    """One build of each line (its x86_64 one: the properties do not depend on the architecture), newest first."""
    return [p.line_builds(n)[0] for n in p.line_names]


def properties(p: pins_mod.Pins, line: pins_mod.OeqLine) -> dict:
    lines = _by_cuda(p)
    i = [l.name for l in lines].index(line.name)
    bounds = {"cuda_version_lower_bound": [line.cuda]}
    if i > 0:  # below the newest line: up to (not including) the next newer line's CUDA major
        bounds["cuda_version_upper_bound"] = [lines[i - 1].cuda_major]
    return {NAMESPACE: bounds}


def document(p: pins_mod.Pins, lines: list[pins_mod.OeqLine] | None = None) -> dict:
    """The variants JSON (PEP 825 with PEP 850's providers, as uv reads it) of these lines (default: all)."""
    return {"$schema": p.variants.schema, "default-priorities": {"namespace": [NAMESPACE]},
            "providers": {NAMESPACE: {"requires": list(p.variants.provider_requires),
                                      "plugin-api": p.variants.provider_plugin_api}},
            "variants": {label(l): properties(p, l) for l in (lines or _by_cuda(p))}}


def dumps(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def index_file(p: pins_mod.Pins) -> tuple[str, bytes]:
    """(name, bytes) of the index's `{name}-{version}-variants.json`."""
    return f"openequivariance-{release_version(p)}-variants.json", dumps(document(p))


def wheel_json(p: pins_mod.Pins, line: pins_mod.OeqLine) -> bytes:
    """The .dist-info/variant.json of a line's variant wheel: the same document, its one variant."""
    return dumps(document(p, [line]))


def line_of(p: pins_mod.Pins, name: str) -> pins_mod.OeqLine | None:
    """The line build a variant wheel's file name is for (its label and platform tag), or None."""
    base, lab = split_variant(name)
    if lab is None:
        return None
    arch = tag_arch(base.removesuffix(".whl").rsplit("-", 1)[-1])
    return next((l for l in p.oeq_lines if label(l) == lab and l.arch.name == arch), None)


def variant_name(p: pins_mod.Pins, wheel_name: str) -> str | None:
    """The file name of a line wheel's variant (None for a file of no pinned line)."""
    from packaging.utils import parse_wheel_filename
    version = str(parse_wheel_filename(wheel_name)[1])
    line = p.line_of(version)
    if line is None:
        return None
    stem = wheel_name.removesuffix(".whl").replace(f"-{version}-", f"-{release_version(p)}-", 1)
    return f"{stem}-{label(line)}.whl"


def make(wheel: Path, line: pins_mod.OeqLine, p: pins_mod.Pins, out_dir: Path) -> Path:
    """The variant of a line's wheel, packed in out_dir: its files under the variants release's version, with
    variant.json; the bytes follow from the line's wheel and the pins (packed as the build packs)."""
    old, new = line.version(p.oeq.version), release_version(p)
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-variant-") as tmp:
        staged = Path(tmp) / "stage"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(staged)
        old_info, info = staged / f"openequivariance-{old}.dist-info", staged / f"openequivariance-{new}.dist-info"
        if not old_info.is_dir():
            raise VariantError(f"{wheel.name} has no openequivariance-{old}.dist-info: not a {line.name} wheel")
        old_info.rename(info)
        (info / "RECORD").unlink()
        meta = (info / "METADATA").read_text()
        if f"\nVersion: {old}\n" not in meta:
            raise VariantError(f"{wheel.name}'s METADATA does not name version {old}")
        (info / "METADATA").write_text(meta.replace(f"\nVersion: {old}\n", f"\nVersion: {new}\n", 1))
        record = OeqBuild.from_json((info / OEQ_BUILD_FILE).read_text())
        (info / OEQ_BUILD_FILE).write_text(dataclasses.replace(record, version=new).to_json())
        (info / FILE_NAME).write_bytes(wheel_json(p, line))
        wheelfile.fix_modes(staged)
        packed = wheelfile.pack(staged, Path(tmp) / "out", p.source_date_epoch)
        out_dir.mkdir(parents=True, exist_ok=True)
        dest = out_dir / variant_name(p, wheel.name)  # the packed name with the label after its platform tag
        shutil.move(packed, dest)
    return dest
