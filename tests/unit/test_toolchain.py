"""The toolchain is a pinned input: every package named with its sha256, the build root's layout, the host check,
the repin's resolver, the release's gate on the recorded bytes (a build with another compiler first on PATH is
tests/integration/test_toolchain_build.py's)."""
import dataclasses
import hashlib
import io
import os
import tarfile

import pytest

from support import REPO
from oeq_wheels import buildroot, pins as P
from oeq_wheels.release import recorded


def test_every_pinned_package_names_its_archive_file_and_sha256():
    tc = P.load().toolchain
    debs = tc.for_host("x86_64")
    assert len({d.name for d in debs}) == len(debs) > 50
    for d in debs:
        assert d.file.startswith("pool/main/") and d.file.endswith(("_amd64.deb", "_all.deb")), d
        assert len(d.sha256) == 64 and int(d.sha256, 16) >= 0, d
    names = {d.name for d in debs}
    assert {"g++-12", "binutils", "libc6-dev", "libstdc++-12-dev", "g++-12-aarch64-linux-gnu",
            "libc6-dev-arm64-cross"} <= names
    # each target's compiler says what it is, on each build host
    assert set(tc.compilers["amd64"]) == set(P.load().arches) and set(tc.compilers["arm64"]) == {"aarch64"}
    arm = {d.name for d in tc.for_host("aarch64")}
    assert {"g++-12", "binutils", "libc6-dev", "libstdc++-12-dev", "libc-bin"} <= arm and not any("cross" in n for n in arm)
    assert set(tc.pythons) == set(P.load().pythons)    # each CPython's headers, by content


def test_the_roots_name_follows_every_package():
    debs = P.load().toolchain.for_host("x86_64")
    changed = (P.Deb(debs[0].name, debs[0].version, debs[0].file, "0" * 64), *debs[1:])
    assert buildroot.key(debs) == buildroot.key(tuple(reversed(debs))) != buildroot.key(changed)


def test_a_build_host_without_pins_is_one_line():
    with pytest.raises(buildroot.BuildRootError, match=r"no toolchain for a riscv64 build host \(\[toolchain\.riscv64\]\)"):
        P.load().toolchain.for_host("riscv64")


def deb(tmp_path, files: dict[str, bytes]):
    """A Debian package (ar: debian-binary, control.tar.xz, data.tar.xz) holding files."""
    def tar(entries):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tf:
            for name, body in entries.items():
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
        return buf.getvalue()
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", tar({"./control": b"Package: x\n"})),
                       ("data.tar.xz", tar(files))):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + (b"\n" if len(body) % 2 else b"")
    path = tmp_path / "x.deb"
    path.write_bytes(out)
    return path


def test_a_package_is_unpacked_into_the_merged_usr_layout(tmp_path):
    root = tmp_path / "root"
    for link, dest in buildroot.MERGED.items():
        (root / dest).mkdir(parents=True, exist_ok=True)
        os.symlink(dest, root / link)
    buildroot.unpack_deb(deb(tmp_path, {"./lib/x86_64-linux-gnu/libx.so.1": b"lib", "./usr/bin/tool": b"bin"}), root)
    assert (root / "usr/lib/x86_64-linux-gnu/libx.so.1").read_bytes() == b"lib"
    assert (root / "lib").is_symlink() and (root / "usr/bin/tool").read_bytes() == b"bin"
    (tmp_path / "bad.deb").write_bytes(b"not a package")
    with pytest.raises(buildroot.BuildRootError, match="not an ar archive"):
        buildroot.unpack_deb(tmp_path / "bad.deb", root)


def test_the_roots_commands_see_the_hosts_directories_but_not_its_system():
    text = buildroot.shim_text(REPO, "g++", "/bin/bwrap")
    assert "--tmpfs / --ro-bind '" in text and "/usr' /usr" in text and "/usr/bin/g++" in text
    for d in ("/usr", "/etc", "/lib", "/proc"):
        assert f"{d}|" in text or f"|{d})" in text  # never bound from the host
    assert "--unsetenv LD_LIBRARY_PATH" in text and "--unsetenv CPATH" in text


def test_this_hosts_toolchain_is_named_where_it_differs(tmp_path, monkeypatch):
    debs = (P.Deb("coreutils", "0.0-not-this", "pool/main/c/coreutils/x.deb", "0" * 64),)
    assert buildroot.host_difference(debs).startswith("coreutils is ")
    missing = (P.Deb("no-such-package-here", "1", "pool/x.deb", "0" * 64),)
    assert buildroot.host_difference(missing) == "no-such-package-here 1 is not installed"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no dpkg" in buildroot.host_difference(debs)


def test_the_release_gate_refuses_bytes_that_are_not_the_recorded_ones(tmp_path):
    record = recorded.load()
    pins = P.load()  # one record per wheel the pins release: each variant's CPythons, each OEq line's (twice: the
    assert len(record.wheels) == len(pins.ext_variants) * len(pins.matrix.pythons) + \
        sum(len(l.pythons) for l in pins.oeq_lines)  # a wheel per CPython of each architecture's build
    name = next(iter(record.wheels))
    w = tmp_path / name
    w.write_bytes(b"other bytes")
    (line,) = record.problems([w])
    assert line.startswith(f"{name} has sha256 {hashlib.sha256(b'other bytes').hexdigest()[:16]}")
    other = dataclasses.replace(record, wheels={name: hashlib.sha256(b"other bytes").hexdigest()})
    assert other.problems([w]) == []


def test_the_toolchain_repin_resolves_the_closure_as_apt_does():
    """`pins --toolchain`: Depends and Pre-Depends, the first alternative the index has (or one already chosen),
    virtual packages through Provides, version and :any qualifiers dropped; pool paths quoted as apt prints them.
    The index is made up: its versions are nothing the toolchain pins."""
    from oeq_wheels import repin_toolchain as R
    index = b"""Package: g++
Version: 4:9.1.0-3
Filename: pool/main/g/gcc-defaults/g++_9.1.0-3_amd64.deb
SHA256: aa
Depends: cpp (= 4:9.1.0-3), g++-12 (>= 9.1.0-1~), missing-thing | libc-dev:any

Package: g++-12
Version: 9.1.0-14+deb12u1
Filename: pool/main/g/gcc-12/g++-12_9.1.0-14+deb12u1_amd64.deb
SHA256: bb
Pre-Depends: libc6
Depends: libc6 (>= 2.99),
 libstdc++6

Package: cpp
Version: 4:9.1.0-3
Filename: pool/main/g/gcc-defaults/cpp_9.1.0-3_amd64.deb
SHA256: cc

Package: libc6
Version: 2.99-9+deb12u14
Filename: pool/main/g/glibc/libc6_2.99-9+deb12u14_amd64.deb
SHA256: dd

Package: libc6-dev
Version: 2.99-9+deb12u14
Filename: pool/main/g/glibc/libc6-dev_2.99-9+deb12u14_amd64.deb
SHA256: ee
Provides: libc-dev

Package: libstdc++6
Version: 9.0.20-1~deb12u2
Filename: pool/main/o/x/libstdc++6_9.0.20-1~deb12u2_amd64.deb
SHA256: ff

Package: unrelated
Version: 1
Filename: pool/main/u/unrelated_1_amd64.deb
SHA256: 00
"""
    packages, provides = R.parse(index)
    got = R.entries(R.closure(packages, provides, ["g++"]))
    assert [d["name"] for d in got] == ["cpp", "g++", "g++-12", "libc6", "libc6-dev", "libstdc++6"]
    assert got[1]["file"] == "pool/main/g/gcc-defaults/g%2b%2b_9.1.0-3_amd64.deb"
    assert got[5]["file"] == "pool/main/o/x/libstdc%2b%2b6_9.0.20-1%7edeb12u2_amd64.deb"
    with pytest.raises(Exception, match="no package 'nope'"):
        R.closure(packages, provides, ["nope"])
