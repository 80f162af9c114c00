"""Write the manifest and metadata, and pack the wheel with the `wheel` library."""
from __future__ import annotations

import shutil
from pathlib import Path

from packaging.metadata import Metadata
from packaging.tags import Tag
from packaging.utils import canonicalize_name

import fastmace_oeq_ext
from fastmace_oeq_ext.manifest import FILE_NAME as MANIFEST_FILE, Input, Manifest

from .. import __version__ as TOOL_VERSION, install_lines
from ..pins import ExtVariant, Pins
from ..wheelfile import fix_modes, wheel_file

# The runtime package is imported like any other; its files are copied from where it is installed.
RUNTIME_DIR = Path(fastmace_oeq_ext.__file__).resolve().parent
# The packaging's own licence (MIT), shipped as package data of oeq_wheels.
PACKAGING_LICENSE = Path(__file__).parent.parent / "LICENSE"

DESCRIPTION = """\
# {name}

Prebuilt `{ext}.so`, the C++ host extension of OpenEquivariance {oeq}, for
torch {torch} (CUDA {cuda}) on CPython {py}, Linux x86_64. With it installed,
OpenEquivariance needs no compiler, ninja or CUDA toolkit at import time.

## Install

    {install}

This pulls torch {torch} and OpenEquivariance {oeq}. PyPI holds OpenEquivariance
{oeq} as a source distribution only, which pip compiles at install time (a C++
compiler, CMake and a LibTorch download); the extra index serves binary
OpenEquivariance wheels built from that same release, so nothing is compiled.
Without it, `pip install {name}` still works, with that compile.

## Use

    import fastmace_oeq_ext
    fastmace_oeq_ext.activate()      # before `import openequivariance`
    import openequivariance

`python -m fastmace_oeq_ext` says whether the prebuilt library matches this
environment and, if not, why. The library is built from OpenEquivariance's
unmodified sources (BSD-3-Clause, its licence ships in the wheel); the packaging
is MIT. `fastmace_oeq_ext/manifest.json` records every input's sha256.
"""


CORE_FIELDS = {"metadata_version": "Metadata-Version", "name": "Name", "version": "Version",
               "summary": "Summary", "requires_python": "Requires-Python",
               "license_expression": "License-Expression", "description_content_type": "Description-Content-Type"}


def dist_info_name(v: ExtVariant) -> str:
    return f"{canonicalize_name(v.pins.package_name).replace('-', '_')}-{v.version}.dist-info"


def metadata_text(v: ExtVariant, py_version: str) -> str:
    pins, m = v.pins, v.pins.matrix
    raw = {
        "metadata_version": "2.4",
        "name": pins.package_name,
        "version": v.version,
        "summary": pins.summary,
        "requires_python": f"=={py_version}.*",
        "requires_dist": [f"torch=={m.torch_version}", f"openequivariance=={v.oeq_exact}"],
        "license_expression": pins.license_expression,
        "license_files": ["LICENSE", "LICENSE.openequivariance"],
        "description": DESCRIPTION.format(name=pins.package_name, ext=pins.oeq_extension_name,
                                          oeq=pins.oeq.version, torch=m.torch_version, cuda=m.cuda,
                                          py=py_version, install=install_lines.ours(pins)[0]),
        "description_content_type": "text/markdown",
        "project_urls": dict(pins.project_urls),
    }
    Metadata.from_raw(raw, validate=True)  # packaging validates every field
    # packaging's as_rfc822() writes lower-case field names, which twine's reader
    # rejects; emit the core-metadata spellings and check they parse back the same.
    lines = [f"{CORE_FIELDS[k]}: {v}" for k, v in raw.items()
             if k not in ("requires_dist", "license_files", "description", "project_urls")]
    lines += [f"Project-URL: {label}, {url}" for label, url in pins.project_urls]
    lines += [f"License-File: {f}" for f in raw["license_files"]]
    lines += [f"Requires-Dist: {r}" for r in raw["requires_dist"]]
    text = "\n".join(lines) + "\n\n" + raw["description"]
    parsed = Metadata.from_email(text, validate=True)
    assert (parsed.name, str(parsed.version), parsed.license_expression, parsed.project_urls) == \
        (raw["name"], raw["version"], raw["license_expression"], raw["project_urls"])
    return text


def package_files(pins: Pins) -> tuple[str, ...]:
    """Every file of the package directory in the wheel (verify expects exactly these)."""
    return (*fastmace_oeq_ext.PYTHON_FILES, pins.library_file, MANIFEST_FILE, "LICENSE.openequivariance",
            "BUILD_COMPILER.txt")


def pinned_fields(v: ExtVariant) -> dict:
    """The manifest's fields the pins decide for a variant, whatever the build: what the build writes
    (make_manifest) and what the gate holds a manifest to (gate.manifest_problems)."""
    p = v.pins
    entry = lambda pin: Input(pin.name, pin.version, pin.file, pin.sha256)
    return dict(package=p.package_name, extension_version=v.version, variant=v.name, openequivariance=v.oeq_exact,
                torch=p.matrix.consumer_torch, torch_index=p.consumer.torch_index, oeq_sdist=entry(p.oeq),
                cuda=p.matrix.cuda, library=p.library_file, cuda_wheels=tuple(entry(n) for n in p.matrix.nvidia),
                pybind11_wheel=entry(p.pybind11), matrix=p.matrix.name)


def make_manifest(v: ExtVariant, **built) -> Manifest:
    """The manifest of one build of a variant: the pinned fields and what the build found (torch_git_version,
    torch_wheel, python, python_built_with, platform, sha256, glibc_max_symbol, compiler, flags)."""
    return Manifest(**pinned_fields(v), **built)


def stage(v: ExtVariant, root: Path, *, library: Path, manifest: Manifest, oeq_license: Path, py_version: str,
          tag: Tag) -> Path:
    """Lay out the unpacked wheel under root; return root."""
    pins = v.pins
    pkg = root / pins.import_name
    pkg.mkdir(parents=True)
    for name in fastmace_oeq_ext.PYTHON_FILES:
        shutil.copyfile(RUNTIME_DIR / name, pkg / name)
    shutil.copyfile(library, pkg / pins.library_file)
    (pkg / MANIFEST_FILE).write_text(manifest.to_json())
    shutil.copyfile(oeq_license, pkg / "LICENSE.openequivariance")
    (pkg / "BUILD_COMPILER.txt").write_text(manifest.compiler_record())
    info = root / dist_info_name(v)
    (info / "licenses").mkdir(parents=True)
    shutil.copyfile(PACKAGING_LICENSE, info / "licenses" / "LICENSE")
    shutil.copyfile(oeq_license, info / "licenses" / "LICENSE.openequivariance")
    (info / "METADATA").write_text(metadata_text(v, py_version))
    (info / "WHEEL").write_text(wheel_file(tag, generator=f"oeq-wheels {TOOL_VERSION}"))
    fix_modes(root)
    return root
