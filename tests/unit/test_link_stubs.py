"""Link stubs (oeq_wheels/inputs/link_stubs.py, oeq_wheels/inputs/link_stub_store.py): a library's dynamic symbols and nothing else give
the linker's output byte for byte; a stub is made from a whole library or from the first bytes of its member, and
used only with the pinned digest. The full-size proof (the 20 release wheels from stubs equal those from the
libraries) is bench/run.py --fetch-equal."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from support.fake_registry import Registry
from oeq_wheels import files, pins as P
from oeq_wheels.errors import LinkStubError
from oeq_wheels.inputs import link_stubs, fetch, unpack, members, link_stub_store
from test_members import wheel

LIB = r"""
int v1_foo(void) { return 1; }
int v2_foo(void) { return 2; }
__asm__(".symver v1_foo, foo@V1");
__asm__(".symver v2_foo, foo@@V2");
int bar(int x) { return x + 1; }
int baz(int x) __attribute__((weak, alias("bar")));
int table[7] = {1};
__thread int tls_counter;
"""
# The library's bulk, after its symbol tables (as NVIDIA's code is): incompressible, so that a fetch of the whole
# member shows in the bytes sent.
PAD = "const unsigned char pad[] = {" + ",".join(str(b) for b in os.urandom(512 << 10)) + "};\n"
VERSIONS = "V1 { global: bar; pad; local: *; };\nV2 { global: baz; table; tls_counter; } V1;\n"
USER = r"""
extern int foo(void); extern int bar(int); extern int baz(int); extern int table[]; extern __thread int tls_counter;
int use(void) { return foo() + bar(1) + baz(2) + table[3] + tls_counter; }
"""
SONAME = "libtest.so.1"


def _cc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """A versioned library (two versions of one symbol, a weak alias, an object, a TLS variable) and an object
    that uses each of them."""
    d = tmp_path_factory.mktemp("link_stubs")
    (d / "lib.c").write_text(LIB + PAD)
    (d / "v.map").write_text(VERSIONS)
    (d / "use.c").write_text(USER)
    (d / "real").mkdir()
    _cc("-shared", "-fPIC", "-O1", str(d / "lib.c"), f"-Wl,--version-script={d / 'v.map'}", f"-Wl,-soname,{SONAME}",
        "-o", str(d / "real" / "libtest.so"))
    _cc("-c", "-fPIC", "-O1", str(d / "use.c"), "-o", str(d / "use.o"))
    return {"dir": d, "lib": d / "real" / "libtest.so", "use": d / "use.o"}


def _link_against(built, libdir: Path, out: Path) -> bytes:
    _cc("-shared", str(built["use"]), "-Wl,--no-as-needed", f"-L{libdir}", "-ltest", "-o", str(out))
    return out.read_bytes()


def test_linking_against_the_stub_gives_the_same_bytes_as_the_library(built, tmp_path):
    view, _ = link_stubs.view_of_file(built["lib"])
    names = {s[0] for s in view.symbols}
    assert {"foo", "bar", "baz", "table", "tls_counter", "V1", "V2"} <= names
    stub = link_stubs.write_stub(view, tmp_path / "stub" / "libtest.so")
    assert stub.stat().st_size < built["lib"].stat().st_size // 10
    assert link_stubs.view_of_file(stub)[0] == view  # the stub reads back as the library
    real = _link_against(built, built["lib"].parent, tmp_path / "real.so")
    assert _link_against(built, stub.parent, tmp_path / "stubbed.so") == real
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(tmp_path / "real.so")], capture_output=True,
                          text=True).stdout
    assert "foo@V2" in syms and "tls_counter@V2" in syms  # the versions the comparison covers


def test_a_stub_that_lost_a_symbol_changes_the_output(built, tmp_path):
    """The comparison above can fail: a stub without baz's weak alias links to other bytes (or not at all)."""
    view, _ = link_stubs.view_of_file(built["lib"])
    poorer = link_stubs.View(view.machine, view.osabi, view.flags, view.soname, view.verdefs,
                          tuple(s for s in view.symbols if s[0] != "table"))
    stub = link_stubs.write_stub(poorer, tmp_path / "stub" / "libtest.so")
    real = _link_against(built, built["lib"].parent, tmp_path / "real.so")
    try:
        assert _link_against(built, stub.parent, tmp_path / "stubbed.so") != real
    except subprocess.CalledProcessError:
        pass


def test_the_first_bytes_give_the_same_view_as_the_whole_library(built):
    data = built["lib"].read_bytes()
    view, tables = link_stubs.view_of_file(built["lib"])
    assert tables.end < len(data) // 4  # the 1 MB of code and data lie after the tables
    assert link_stubs.read_view(data[:tables.end], tables, SONAME) == view
    assert link_stubs.Tables.from_list(tables.to_list()) == tables
    with pytest.raises(LinkStubError, match="the tables end at"):
        link_stubs.read_view(data[:tables.end - 1], tables, SONAME)


def test_what_is_not_a_64_bit_little_endian_library_is_refused_in_one_line(tmp_path):
    for body, why in ((b"MZ" + bytes(100), "not an ELF file"),
                      (b"\x7fELF\x01\x01\x01" + bytes(100), "not a 64-bit little-endian ELF file")):
        path = tmp_path / "libx.so"
        path.write_bytes(body)
        with pytest.raises(LinkStubError) as err:
            link_stubs.view_of_file(path)
        assert str(err.value) == f"libx.so: {why}" or str(err.value).startswith(f"libx.so: {why}")


# ---------------------------------------------------------------- the stub store, against a loopback registry

NAME = "nvidia_x-1.0-py3-none-manylinux_2_27_x86_64.whl"
MEMBER = "nvidia/cu13/lib/libtest.so.1"


@pytest.fixture
def served(monkeypatch, built):
    """A wheel holding the library on a loopback registry; yields (registry, body, record, pin without stubs)."""
    reg = Registry()
    body, record = wheel({"nvidia/cu13/include/t.h": b"int use(void);\n", MEMBER: built["lib"].read_bytes()})
    reg.add("nvidia-x", NAME, body)
    with reg.serve() as index:
        monkeypatch.setenv("PIP_INDEX_URL", index)
        monkeypatch.delenv("OEQ_WHEELS_FETCH", raising=False)
        yield reg, body, P.Pinned("nvidia-x", "1.0", NAME, hashlib.sha256(body).hexdigest(), (SONAME,),
                                  hashlib.sha256(record).hexdigest())


def _stub_pin(built, prefix: bool, digest: str | None = None) -> P.StubPin:
    view, tables = link_stubs.view_of_file(built["lib"])
    return P.StubPin(SONAME, digest or view.digest(), tuple(tables.to_list()) if prefix else ())


@pytest.mark.parametrize("prefix", [True, False], ids=["first-bytes", "whole-member"])
def test_the_tree_holds_the_stub_and_the_library_is_fetched_in_part_or_not_kept(served, built, tmp_path, prefix):
    reg, body, pin = served
    pin = dataclasses.replace(pin, stubs=(_stub_pin(built, prefix),))
    cache = tmp_path / "cache"
    got = fetch.ensure([pin], cache)
    tree = unpack.cuda_tree([(pin, got[NAME])], cache)
    lib = tree / "nvidia" / "cu13" / "lib" / SONAME
    assert link_stubs.view_of_file(lib)[0] == link_stubs.view_of_file(built["lib"])[0]
    assert lib.read_bytes() != built["lib"].read_bytes()
    size = built["lib"].stat().st_size
    assert (reg.sent[NAME] < 256 << 10) == prefix, reg.sent  # the first bytes only, or the 512 KB as well
    stored = [p for p in (cache / "members").rglob("*") if p.is_file() and p.stat().st_size == size]
    assert not stored  # the library itself is never kept
    shutil.rmtree(tree)
    sent = reg.sent[NAME]
    unpack._checked.clear()
    unpack.cuda_tree([(pin, got[NAME])], cache)  # a second tree: the stub is stored, the library not fetched again
    assert reg.sent[NAME] - sent < 64 << 10


def test_a_second_maker_waits_for_the_first_and_uses_its_stub(served, built, tmp_path):
    """Two runs sharing a cache (the suite's workers, two build.sh) make a stub once: while one holds the stub's
    folder, the other fetches nothing and waits, then finds the stub made. Without the lock the second fetched the
    whole member too, and read it after the first had removed it (FileNotFoundError, in CI's first two-worker run)."""
    reg, _, pin = served
    sp = _stub_pin(built, False)
    pin = dataclasses.replace(pin, stubs=(sp,))
    cache = tmp_path / "cache"
    remote = members.RemoteWheel(pin, fetch.index_url())
    before = reg.sent[NAME]  # its central directory and RECORD
    path = link_stub_store.store_path(cache, sp)
    got = {}
    with files.locked_dir(path.parent):  # the first maker, as another process would hold it
        second = threading.Thread(target=lambda: got.update(path=link_stub_store.ensure(remote, sp, MEMBER, cache)))
        second.start()
        second.join(1.0)
        assert second.is_alive() and reg.sent[NAME] == before
        link_stub_store._store(link_stubs.view_of_file(built["lib"])[0], pin, sp, MEMBER, path)
    second.join(30)
    assert got["path"] == path and reg.sent[NAME] == before


@pytest.mark.parametrize("prefix", [True, False], ids=["first-bytes", "whole-member"])
def test_a_library_whose_symbols_are_not_the_pinned_ones_is_refused(served, built, tmp_path, prefix):
    _, _, pin = served
    pin = dataclasses.replace(pin, stubs=(_stub_pin(built, prefix, digest="0" * 64),))
    cache = tmp_path / "cache"
    with pytest.raises(members.MemberError) as err:
        unpack.cuda_tree([(pin, fetch.ensure([pin], cache)[NAME])], cache)
    line = str(err.value)
    assert "\n" not in line and f"{MEMBER} exports symbols of digest" in line and "pinned 0000000000000000" in line
    assert not [p for p in (cache / "stubs").rglob("*") if p.is_file()] if (cache / "stubs").exists() else True
    assert not list((cache / "extract").glob("cuda-*"))


def test_tables_pinned_in_the_wrong_place_are_refused(served, built, tmp_path):
    _, _, pin = served
    good = _stub_pin(built, True)
    moved = list(good.tables)
    moved[0] += 8  # dynsym shifted by a third of an entry
    pin = dataclasses.replace(pin, stubs=(P.StubPin(SONAME, good.digest, tuple(moved)),))
    cache = tmp_path / "cache"
    with pytest.raises(members.MemberError, match=f"{MEMBER}") as err:
        unpack.cuda_tree([(pin, fetch.ensure([pin], cache)[NAME])], cache)
    assert "\n" not in str(err.value)


def test_every_linked_library_of_the_pinned_wheels_has_a_stub_pin():
    """pins.toml names a stub for each library the builds link (torch's linked libraries, NVIDIA's libs)."""
    pins = P.load()
    torch_libs = {f"lib{l}.so" for l in pins.torch_libs}
    wheels = [*pins.oeq_binary_inputs(), *pins.matrix.nvidia, *pins.matrix.torch_wheels.values()]
    wheels = [w for w in wheels if w.name == "torch" or w.name.startswith("nvidia-")]
    assert wheels
    for w in wheels:
        want = torch_libs if w.name == "torch" else set(w.libs)
        assert {s.lib for s in w.stubs} == want, w.file


def test_a_whole_wheel_at_hand_gives_the_same_stub_and_whole_mode_the_library(served, built, tmp_path, monkeypatch):
    """A downloaded wheel (e.g. left by `pins --records` or a stand-in) is read locally: its libraries become the
    same stubs as from members; under OEQ_WHEELS_FETCH=whole the tree holds the library itself."""
    _, body, pin = served
    pin = dataclasses.replace(pin, stubs=(_stub_pin(built, False),))
    whole = tmp_path / NAME
    whole.write_bytes(body)
    lib = Path("nvidia") / "cu13" / "lib" / SONAME
    from_members = unpack.cuda_tree([(pin, fetch.ensure([pin], tmp_path / "c1")[NAME])], tmp_path / "c1") / lib
    at_hand = unpack.cuda_tree([(pin, whole)], tmp_path / "c2") / lib
    assert at_hand.read_bytes() == from_members.read_bytes() != built["lib"].read_bytes()
    assert not [p for p in (tmp_path / "c2" / "stubs").rglob("*") if p.is_file() and p.name != SONAME]  # no leftovers
    monkeypatch.setenv("OEQ_WHEELS_FETCH", "whole")
    assert (unpack.cuda_tree([(pin, whole)], tmp_path / "c3") / lib).read_bytes() == built["lib"].read_bytes()
    monkeypatch.delenv("OEQ_WHEELS_FETCH")
    bad = dataclasses.replace(pin, stubs=(_stub_pin(built, False, digest="1" * 64),))
    with pytest.raises(members.MemberError, match=f"{MEMBER} exports symbols of digest .*pinned 1111"):
        unpack.cuda_tree([(bad, whole)], tmp_path / "c4")
