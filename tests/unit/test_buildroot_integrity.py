"""The build root is trusted by its content: made from the pinned .debs, each file checked against its package's
md5sums and every file and link recorded; before each build the root is checked against that record, and any
difference (a file, a conffile, a link, one added or missing) stops the build in one line naming it and the fix.
Small packages made here stand in for Debian's."""
import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

from oeq_wheels import buildroot, pins

TOOL = b"#!/bin/sh\necho the pinned tool\n"


def tar(entries: dict[str, object]) -> bytes:
    """An xz tar: name -> bytes (a file) or ('link', target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        for name, body in entries.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, body[1]
                tf.addfile(info)
            else:
                info.size, info.mode = len(body), 0o755
                tf.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def deb(path, files: dict[str, object], conffiles: tuple[str, ...] = ()):
    """A Debian package whose control.tar lists its files' md5sums (its conffiles left out, as dh_md5sums does)."""
    sums = "".join(f"{hashlib.md5(body).hexdigest()}  {name.lstrip('./')}\n" for name, body in files.items()
                   if not isinstance(body, tuple) and name.lstrip(".") not in conffiles)
    control = tar({"./control": b"Package: x\n", "./md5sums": sums.encode(),
                   "./conffiles": "".join(f"{c}\n" for c in conffiles).encode()})
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", control), ("data.tar.xz", tar(files))):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + (b"\n" if len(body) % 2 else b"")
    path.write_bytes(out)
    return path


def packages(tmp_path, second: dict[str, object] | None = None):
    """Two pinned packages: a tool with a link to it and a conffile; a library through merged /usr's /lib."""
    one = deb(tmp_path / "tool_1_amd64.deb", {"./usr/bin/tool": TOOL, "./usr/bin/cc": ("link", "tool"),
                                              "./etc/tool.conf": b"setting = pinned\n"}, conffiles=("/etc/tool.conf",))
    two = deb(tmp_path / "libx_1_amd64.deb", second or {"./lib/x86_64-linux-gnu/libx.so.1": b"\x7fELF library"})
    debs = tuple(pins.Deb(p.name.split("_")[0], "1", f"pool/main/x/{p.name}", "0" * 64) for p in (one, two))
    tc = pins.PinnedToolchain("bookworm", "http://archive.invalid/debian/", {}, {"amd64": debs}, {})
    return tc, debs, {one.name: one, two.name: two}


@pytest.fixture
def made(tmp_path):
    tc, debs, files = packages(tmp_path)
    root = buildroot.ensure(tc, debs, files, tmp_path / "cache")
    return tc, debs, files, root


def test_a_root_is_recorded_when_made_and_used_again_while_it_matches(made, tmp_path):
    tc, debs, files, root = made
    rec = json.loads((root / buildroot.RECORD).read_text())
    assert rec["usr/bin/tool"] == "sha256 " + hashlib.sha256(TOOL).hexdigest()
    assert rec["usr/bin/cc"] == "link tool" and rec["lib"] == "link usr/lib"
    assert "usr/lib/x86_64-linux-gnu/libx.so.1" in rec and "etc/tool.conf" in rec  # merged /usr; the conffile
    assert buildroot.MARKER not in rec and buildroot.RECORD not in rec
    assert buildroot.ensure(tc, debs, files, tmp_path / "cache") == root


def _change(root, path, body=b"changed\n"):
    (root / path).chmod(0o644)
    (root / path).write_bytes(body)


DAMAGE = {
    "a file": (lambda r: _change(r, "usr/bin/tool"), "usr/bin/tool is not its package's (sha256 "),
    "a conffile": (lambda r: _change(r, "etc/tool.conf"), "etc/tool.conf is not its package's (sha256 "),
    "a link": (lambda r: (os.unlink(r / "usr/bin/cc"), os.symlink("/usr/bin/other", r / "usr/bin/cc")),
               "usr/bin/cc is not its package's (link /usr/bin/other; its package's link tool)"),
    "a file added": (lambda r: (r / "usr/include").mkdir() or (r / "usr/include/stdio.h").write_text("/* */\n"),
                     "usr/include/stdio.h is in no pinned package"),
    "a file removed": (lambda r: (r / "usr/lib/x86_64-linux-gnu/libx.so.1").unlink(),
                       "usr/lib/x86_64-linux-gnu/libx.so.1 is missing"),
}


@pytest.mark.parametrize("record_too", [False, True], ids=["record-kept", "record-removed-too"])
@pytest.mark.parametrize("what", DAMAGE)
def test_a_root_that_differs_from_its_record_stops_the_build_in_one_line(made, tmp_path, what, record_too):
    """Removing the record as well does not hide it: a root without one is recorded from the packages again."""
    tc, debs, files, root = made
    damage, says = DAMAGE[what]
    damage(root)
    if record_too:
        (root / buildroot.RECORD).unlink()
    with pytest.raises(buildroot.BuildRootError) as exc:
        buildroot.ensure(tc, debs, files, tmp_path / "cache")
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"the build root {root} is not what its pinned packages made: {says}")
    assert line.endswith(f"remove it (`rm -rf {root}`) and build again: it is made again from the pinned .debs")
    assert (root / buildroot.MARKER).is_file()  # left as it is, to look at: the build removes nothing by itself


def test_an_older_root_without_a_record_is_recorded_from_its_packages(made, tmp_path):
    tc, debs, files, root = made
    before = (root / buildroot.RECORD).read_text()
    (root / buildroot.RECORD).unlink()
    assert buildroot.ensure(tc, debs, files, tmp_path / "cache") == root
    assert json.loads((root / buildroot.RECORD).read_text()) == json.loads(before)


def test_an_unreadable_record_stops_the_build(made, tmp_path):
    tc, debs, files, root = made
    (root / buildroot.RECORD).write_text("{ not json")
    with pytest.raises(buildroot.BuildRootError, match=r"its record \.oeq-wheels-files\.json cannot be read; remove"):
        buildroot.ensure(tc, debs, files, tmp_path / "cache")


def test_a_package_whose_file_another_overwrites_is_refused_and_no_root_is_left(tmp_path):
    """The md5sums check when the root is made: the second package ships the first one's file with other bytes."""
    tc, debs, files = packages(tmp_path, {"./usr/bin/tool": b"#!/bin/sh\necho another tool\n"})
    with pytest.raises(buildroot.BuildRootError, match=r"^tool 1: /usr/bin/tool in the build root is not the file its "
                                                       r"md5sums name \(another pinned package ships it too\?\); "
                                                       r"re-pin the toolchain$"):
        buildroot.ensure(tc, debs, files, tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache" / "buildroot").iterdir()] == [f"{buildroot.key(debs)}.lock"]


def test_a_killed_runs_half_made_root_is_removed_by_the_next(made, tmp_path):
    tc, debs, files, root = made
    dead = subprocess.Popen(["true"])  # a pid that no longer runs
    dead.wait()
    half = root.parent / f".{root.name}.pid{dead.pid}.x1y2"
    (half / "usr").mkdir(parents=True)
    assert buildroot.ensure(tc, debs, files, tmp_path / "cache") == root and not half.exists()
