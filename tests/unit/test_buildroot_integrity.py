"""The build root is trusted by its content, as pins.toml pins it: made from the pinned .debs, each file checked
against its package's md5sums; before each build its content (every file's sha256, every link) is checked against
the digest pins.toml pins for those packages, never against the record kept beside it in the cache; any difference
(a file, a conffile, a link, one added or missing, the record rewritten to match) stops the build in one line naming
the fix, and the first difference where the kept record still says it. Small packages made here stand in for
Debian's."""
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
    files = {one.name: one, two.name: two}
    scratch = tmp_path / "digest-root"  # as `oeq-wheels pins --toolchain` derives the pinned digest
    scratch.mkdir()
    try:
        digest = buildroot.content_digest(buildroot.unpack_root(debs, files, scratch))
    except buildroot.BuildRootError:
        digest = "0" * 64  # packages that make no root (the overwrite test): never reached
    tc = pins.PinnedToolchain("bookworm", "http://archive.invalid/debian/", {}, {"amd64": debs}, {},
                              roots={"amd64": digest})
    return tc, debs, files


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


@pytest.mark.parametrize("record", ["kept", "removed", "rewritten"])
@pytest.mark.parametrize("what", DAMAGE)
def test_a_root_that_differs_from_its_pinned_digest_stops_the_build_in_one_line(made, tmp_path, what, record):
    """The record beside the root is no trust root: removed, or rewritten to match the damaged root (as one who can
    write the cache would), the root is refused all the same; while it is kept it names the first difference."""
    tc, debs, files, root = made
    damage, says = DAMAGE[what]
    damage(root)
    if record == "removed":
        (root / buildroot.RECORD).unlink()
    elif record == "rewritten":
        (root / buildroot.RECORD).write_text(json.dumps(buildroot.record(root)))
    with pytest.raises(buildroot.BuildRootError) as exc:
        buildroot.ensure(tc, debs, files, tmp_path / "cache")
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"the build root {root} is not what its pinned packages make (its "
                                                "content digest is not pins.toml's")
    assert (f": {says}" in line) == (record == "kept"), line
    assert line.endswith(f"remove it (`rm -rf {root}`) and build again: it is made again from the pinned .debs")
    assert (root / buildroot.MARKER).is_file()  # left as it is, to look at: the build removes nothing by itself


def test_a_whole_root_needs_no_record_beside_it(made, tmp_path):
    tc, debs, files, root = made
    (root / buildroot.RECORD).write_text("{ not json")
    assert buildroot.ensure(tc, debs, files, tmp_path / "cache") == root
    (root / buildroot.RECORD).unlink()
    assert buildroot.ensure(tc, debs, files, tmp_path / "cache") == root


def test_packages_without_a_pinned_digest_or_making_another_root_are_refused(tmp_path):
    tc, debs, files = packages(tmp_path)
    bare = pins.PinnedToolchain(tc.debian, tc.archive, {}, tc.debs, {})
    with pytest.raises(buildroot.BuildRootError, match=r"pins no content digest for the build root .*\[toolchain\."
                                                       r"amd64\] root\); re-pin the toolchain"):
        buildroot.ensure(bare, debs, files, tmp_path / "cache")
    other = pins.PinnedToolchain(tc.debian, tc.archive, {}, tc.debs, {}, roots={"amd64": "1" * 64})
    with pytest.raises(buildroot.BuildRootError, match=r"made a build root whose content digest is [0-9a-f]{64}, "
                                                       r"pins.toml's is 1{64}; re-pin the toolchain"):
        buildroot.ensure(other, debs, files, tmp_path / "cache2")
    assert not (tmp_path / "cache2" / "buildroot" / buildroot.key(debs)).exists()


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
