"""Files as something other than our build left them: what a disk error does to a cached file (the cache-integrity
tests of both tiers), what a hostile uploader does to a wheel (the gate's and publish's tests), and fastmace-oeq-ext
manifests as earlier schemas wrote them (the runtime still reads them; the gate refuses to ship them)."""
import json
import os
import warnings
import zipfile
from pathlib import Path


def flip_byte_keep_mtime(path: Path, offset: int = 100) -> None:
    """What a disk error or a careless edit does: one byte changed, the mtime put back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def with_package_file(cp311_wheel, tmp_path, name, edit):
    """The wheel with one file of its package edited, under a consistent RECORD."""
    from wheel.wheelfile import WheelFile  # the writer the build packs with
    unpacked = tmp_path / "u"
    with zipfile.ZipFile(cp311_wheel) as zf:
        zf.extractall(unpacked)
    f = unpacked / "fastmace_oeq_ext" / name
    if edit is None:  # a new member of 256 MiB of zeros, written sparse: it packs to a few hundred KB
        with open(f, "wb") as out:
            out.truncate(256 << 20)
    else:
        f.write_text(edit(f.read_text()))
    out = tmp_path / "o"
    out.mkdir()
    with WheelFile(out / cp311_wheel.name, "w") as wf:
        wf.write_files(str(unpacked))
    return out / cp311_wheel.name


def forgeries(cp311_wheel, tmp_path):
    """The tampering tries of a hostile uploader, each with a RECORD that agrees with the archive:
    code injected into the runtime; a second __init__.py ahead of the real one (installers disagree on which wins);
    a 256 MiB zero-filled member that packs to a few hundred KB."""
    injected = with_package_file(cp311_wheel, tmp_path / "injected", "__init__.py",
                                 lambda t: "import os; os.system('id')\n" + t)
    dup = tmp_path / "dup" / cp311_wheel.name
    dup.parent.mkdir()
    with zipfile.ZipFile(cp311_wheel) as zin, zipfile.ZipFile(dup, "w", zipfile.ZIP_DEFLATED) as zout:
        zout.writestr("fastmace_oeq_ext/__init__.py", "import os; os.system('id')\n")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns of the duplicated name: writing one is the point
            for info in zin.infolist():
                zout.writestr(info, zin.read(info.filename))
    big = with_package_file(cp311_wheel, tmp_path / "big", "data.bin", None)
    return {"injected": (injected, "Python files differ from the runtime this checkout ships"),
            "duplicate": (dup, "duplicate entries in the archive"),
            "oversized": (big, "members larger than any of ours")}


def as_schema_3(text: str) -> dict:
    """The manifest `text` (schema 4) as schema 3 wrote it (post4 as built): each field, plus every derived fact and
    every twin under its second name."""
    from fastmace_oeq_ext import manifest as mf
    m = mf.Manifest.from_json(text)
    data = json.loads(text)
    data.update(schema=3, **{k: getattr(m, k) for k in mf.DERIVED},
                **{old: getattr(m, new) for old, new in mf.SCHEMA3_TWINS.items()})
    return data
