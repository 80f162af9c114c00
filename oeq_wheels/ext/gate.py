"""The fastmace-oeq-ext gate: the common checks (oeq_wheels.gate_common), every manifest field against the pins,
and the consumer's own verdict (FastMACE's prebuilt_extension(), ext.consumer)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from packaging.utils import canonicalize_name

import fastmace_oeq_ext
from fastmace_oeq_ext.manifest import FILE_NAME as MANIFEST_FILE, Manifest, ManifestError

from .. import pins as pins_mod
from ..elf import glibc_max_symbol
from ..gate_common import accounted, audit_and_twine, check_elf, check_wheel_file, default_forbidden_paths, field_differences, file_entry, open_wheel, python_of, Verdict
from . import consumer


def _variant_of(m: Manifest, pins: pins_mod.Pins | None, v: Verdict) -> pins_mod.ExtVariant | None:
    """The build of the pins (those of the manifest's matrix unless given) that the manifest says it is."""
    try:
        return (pins or pins_mod.load(m.matrix)).for_variant(m.variant)
    except pins_mod.PinsError as exc:
        v.problems.append(f"manifest names matrix {m.matrix!r}, variant {m.variant!r}: {exc}")
        return None


def verify_wheel(wheel: Path, pins: pins_mod.Pins | None = None, *, expected_license: bytes | None = None,
                 forbidden_paths: list[str] | None = None, twine: bool = True,
                 memo_dir: Path | None = None, cache: Path | None = None) -> Verdict:
    """Check a fastmace-oeq-ext wheel against the pins (those of its manifest's matrix unless given), as the build
    of them that names the OpenEquivariance its manifest names. cache: where the consumer's pinned package is
    fetched (None: the default cache; a build passes its own)."""
    from . import assemble
    v = Verdict(wheel)
    opened = open_wheel(wheel, v)
    if opened is None:
        return v
    name, version, tag, files = opened
    if v.facts["variant"]:
        v.problems.append(f"{wheel.name} is a wheel variant ({v.facts['variant']}); no package of ours has variants")
        return v
    pkg = "fastmace_oeq_ext/"
    text = files.get(pkg + MANIFEST_FILE, b"").decode(errors="replace")
    try:
        manifest = Manifest.from_json(text)
    except ManifestError as exc:
        v.problems.append(f"{MANIFEST_FILE}: {exc}")
        return v
    if text != manifest.to_json():  # this build writes the current schema, each fact once, canonically
        v.problems.append(f"{MANIFEST_FILE} is not what this build writes for its own fields (schema, order or keys)")
    if files.get(pkg + "BUILD_COMPILER.txt", b"").decode(errors="replace") != manifest.compiler_record():
        v.problems.append("BUILD_COMPILER.txt is not the manifest's compiler and flags")
    ev = _variant_of(manifest, pins, v)
    if ev is None:
        return v
    p = ev.pins
    if name != canonicalize_name(p.package_name):
        v.problems.append(f"wheel is {name}, pins release {p.package_name}")
        return v
    info = assemble.dist_info_name(ev)
    expected = {pkg + f for f in assemble.package_files(p)}
    expected |= {f"{info}/{f}" for f in ("METADATA", "WHEEL", "RECORD", "licenses/LICENSE",
                                         "licenses/LICENSE.openequivariance")}
    accounted(v, v.facts.pop("names"), expected)
    # The runtime is shipped as it is in the checkout: a consistent RECORD proves nothing about who wrote the code.
    changed = [f for f in fastmace_oeq_ext.PYTHON_FILES
               if pkg + f in files and files[pkg + f] != (assemble.RUNTIME_DIR / f).read_bytes()]
    if changed:
        v.problems.append(f"Python files differ from the runtime this checkout ships ({assemble.RUNTIME_DIR.parent.name}/"
                          f"{assemble.RUNTIME_DIR.name}/): {changed}")
    if version != ev.version:
        v.problems.append(f"wheel version {version}, pins say {ev.version}")
    py_version = python_of(tag) if tag.abi == tag.interpreter else None  # pybind11 has no stable-ABI build
    if py_version not in p.matrix.pythons:
        v.problems.append(f"wheel tag {tag} is not one of the pinned CPythons {', '.join(p.matrix.pythons)}")
    elif files.get(f"{info}/METADATA", b"").decode(errors="replace") != assemble.metadata_text(ev, py_version):
        v.problems.append("METADATA differs from what the pins give (name, version, Requires-Dist, "
                          "Requires-Python, licence or description)")
    check_wheel_file(v, files, info, tag, purelib=False)
    lib = files.get(pkg + p.library_file)
    if lib is not None:
        facts, problems = check_elf(lib, required=set(p.torch_needed | p.cuda_needed),
                                    allowed=set(p.torch_needed | p.cuda_needed), runpath=p.runpath(),
                                    arch=p.ext_arch, forbidden_paths=default_forbidden_paths() if forbidden_paths is None
                                    else forbidden_paths)
        v.problems += problems
        v.facts.update(needed=facts["needed"], runpath=facts["runpath"])
        if manifest.sha256 != hashlib.sha256(lib).hexdigest():
            v.problems.append("manifest's library sha256 does not match the library")
        needs = glibc_max_symbol(lib)
        if manifest.glibc_max_symbol != needs:
            v.problems.append(f"manifest glibc_max_symbol is {manifest.glibc_max_symbol}, the library needs {needs}")
    v.problems += manifest_problems(manifest, ev, tag)
    lic = files.get(pkg + "LICENSE.openequivariance")
    if lic is None or files.get(f"{info}/licenses/LICENSE.openequivariance") != lic:
        v.problems.append("dist-info licence differs from the package's LICENSE.openequivariance")
    if expected_license is not None and lic != expected_license:
        v.problems.append("LICENSE.openequivariance differs from the OpenEquivariance sdist's LICENSE")
    if py_version is not None:
        v.problems += consumer.problems(files, py_version, ev, cache)
    audit_and_twine(v, wheel, tag, p, twine, memo_dir)
    return v


def manifest_problems(m: Manifest, ev: pins_mod.ExtVariant, tag) -> list[str]:
    """Every manifest field that the pins decide, compared with them (one line per difference)."""
    from .assemble import pinned_fields
    p = ev.pins
    entry = as_tuple = file_entry
    cp = tag.interpreter
    files, file_lists = ("oeq_sdist", "pybind11_wheel"), ("cuda_wheels",)
    want = pinned_fields(ev)
    want.update({k: entry(want[k]) for k in files})
    want.update({k: tuple(entry(i) for i in want[k]) for k in file_lists})
    # and the facts derived from them (Manifest's properties), and what the wheel's tag says
    want.update(oeq_version=p.oeq.version, torch_version=p.matrix.torch_version, torch_local=p.matrix.torch_local,
                extension_name=p.oeq_extension_name, pybind11=p.pybind11.version, python=cp, platform=tag.platform)
    out = field_differences("manifest", m, want, files=files, file_lists=file_lists)
    if cp in p.matrix.torch_wheels and as_tuple(m.torch_wheel) != entry(p.matrix.torch_wheel(cp)):
        out.append(f"manifest torch_wheel {m.torch_wheel.file} is not the pinned {p.matrix.torch_wheel(cp).file}")
    return out
