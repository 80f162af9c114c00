"""Members of a pinned wheel by HTTP range (oeq_wheels.inputs.members), against a registry on loopback
(tests/support/fake_registry.py): only what a tree needs is fetched, each member checked against the pinned RECORD,
and every way a host or a file can be wrong is refused in one line with nothing kept."""
from __future__ import annotations

import base64
import hashlib
import os
import zipfile

import pytest

from support.fake_registry import Registry
from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch, unpack, members
from oeq_wheels.errors import UsageError

BIG = os.urandom(3 << 20)  # incompressible: a "library" the tree does not need, between the members it does


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def wheel(files: dict[str, bytes], record_for: dict[str, bytes] | None = None) -> tuple[bytes, bytes]:
    """(a wheel's bytes with a RECORD of `record_for` (default: its own members), that RECORD)."""
    record = "".join(record_line(n, d) for n, d in (record_for or files).items())
    record += "nvidia_x-1.0.dist-info/RECORD,,\n"
    body = {**files, "nvidia_x-1.0.dist-info/RECORD": record.encode()}
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in body.items():
            zf.writestr(name, data)
    return buf.getvalue(), record.encode()


FILES = {"nvidia/cu13/include/cuda.h": b"#define CUDA 13\n" * 200,
         "nvidia/cu13/lib/libcublasLt.so.13": BIG,
         "nvidia/cu13/lib/libcublas.so.13": b"\x7fELF" + os.urandom(4096),
         "nvidia/cu13/include/cublas.h": b"/* cublas */\n" * 300,
         # what pip reads of a wheel it downloads whole
         "nvidia_x-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nvidia-x\nVersion: 1.0\n",
         "nvidia_x-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          b"Tag: py3-none-manylinux_2_27_x86_64\n"}
NAME = "nvidia_x-1.0-py3-none-manylinux_2_27_x86_64.whl"


def pin_for(body: bytes, record: bytes) -> P.Pinned:
    return P.Pinned("nvidia-x", "1.0", NAME, hashlib.sha256(body).hexdigest(), ("libcublas.so.13",),
                    hashlib.sha256(record).hexdigest())


@pytest.fixture
def served(monkeypatch):
    """A loopback registry and PIP_INDEX_URL pointing at it; yields (registry, add)."""
    reg = Registry()

    def add(body):
        reg.add("nvidia-x", NAME, body)

    with reg.serve() as index:
        monkeypatch.setenv("PIP_INDEX_URL", index)
        monkeypatch.delenv("OEQ_WHEELS_FETCH", raising=False)
        yield reg, add


def test_the_tree_holds_the_needed_members_and_the_rest_is_never_fetched(served, tmp_path):
    reg, add = served
    body, record = wheel(FILES)
    add(body)
    pin = pin_for(body, record)
    cache = tmp_path / "cache"
    log = []
    got = fetch.ensure([pin], cache, log.append)
    assert isinstance(got[NAME], fetch.Remote) and not (cache / "downloads" / NAME).exists()
    tree = unpack.cuda_tree([(pin, got[NAME])], cache)
    lib = tree / "nvidia" / "cu13" / "lib"
    assert sorted(p.name for p in lib.iterdir()) == ["libcublas.so.13"]  # cublasLt is not linked
    assert (lib / "libcublas.so.13").read_bytes() == FILES["nvidia/cu13/lib/libcublas.so.13"]
    assert (tree / "nvidia/cu13/include/cuda.h").read_bytes() == FILES["nvidia/cu13/include/cuda.h"]
    assert reg.sent[NAME] < len(body) - len(BIG) + (512 << 10), reg.sent  # the 3 MB member was never sent
    assert any("by range" in line for line in log), log
    # Stored once by sha256: a second tree of the same members fetches no member again.
    sent = reg.sent[NAME]
    members.fetch(pin, lambda n: n.endswith("libcublas.so.13"), cache, fetch.index_url())
    assert reg.sent[NAME] - sent <= 512 << 10  # the central directory and RECORD only


def test_a_member_that_differs_from_the_pinned_record_is_refused_and_nothing_kept(served, tmp_path):
    _, add = served
    tampered = dict(FILES, **{"nvidia/cu13/lib/libcublas.so.13": b"\x7fELF" + bytes(4096)})
    body, record = wheel(tampered, record_for=FILES)  # RECORD (as pinned) names the genuine bytes
    add(body)
    pin = pin_for(body, record)
    cache = tmp_path / "cache"
    with pytest.raises(members.MemberError) as err:
        members.fetch(pin, lambda n: n.startswith("nvidia/"), cache, fetch.index_url())
    line = str(err.value)
    assert "\n" not in line and "member nvidia/cu13/lib/libcublas.so.13 does not match its pinned RECORD" in line
    stored = [p for p in (cache / "members").rglob("*") if p.is_file() and p.name != members.LEDGER]
    assert not any(p.read_bytes() == tampered["nvidia/cu13/lib/libcublas.so.13"] for p in stored)
    assert not [p for p in (cache / "members").rglob("*") if ".tmp" in p.name or p.name.startswith(".")]


def test_a_record_whose_sha256_is_not_the_pinned_one_is_refused(served, tmp_path):
    _, add = served
    body, record = wheel(FILES)
    add(body)
    pin = P.Pinned("nvidia-x", "1.0", NAME, hashlib.sha256(body).hexdigest(), (), "0" * 64)
    with pytest.raises(members.MemberError, match=r"its RECORD has sha256 \w+, pinned 0{64}; refusing the wheel"):
        members.fetch(pin, lambda n: True, tmp_path / "cache", fetch.index_url())
    assert not (tmp_path / "cache" / "members").exists() or not any(
        p.is_file() and p.name != members.LEDGER for p in (tmp_path / "cache" / "members").rglob("*"))


def test_a_host_that_ignores_ranges_gets_the_whole_wheel_instead(served, tmp_path, monkeypatch):
    reg, add = served
    body, record = wheel(FILES)
    add(body)
    reg.honour_ranges = False
    pin = pin_for(body, record)
    with pytest.raises(members.Unsupported, match="ignored"):
        members.fetch(pin, lambda n: True, tmp_path / "c1", fetch.index_url())
    # fetch.Remote then takes the whole file through fetch.ensure (pip's hash checking), as for any unpinned RECORD.
    whole = tmp_path / NAME
    whole.write_bytes(body)
    asked = []
    monkeypatch.setattr(fetch, "ensure", lambda items, cache, log=None, **k: asked.extend(items) or {NAME: whole})
    remote = fetch.Remote(pin, tmp_path / "c2", lambda s: None)
    assert remote.unpack(lambda n: True, tmp_path / "root") == whole
    assert [i.record for i in asked] == [""] and asked[0].sha256 == pin.sha256


def test_a_cut_response_is_refused(served, tmp_path, monkeypatch):
    _, add = served
    body, record = wheel(FILES)
    add(body)
    real = members._fetch_span

    def cut(wheel_, group, tmp):
        path, start = real(wheel_, group, tmp)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        return path, start

    monkeypatch.setattr(members, "_fetch_span", cut)
    with pytest.raises(members.MemberError, match="cut short|does not match|does not inflate"):
        members.fetch(pin_for(body, record), lambda n: n.startswith("nvidia/"), tmp_path / "cache", fetch.index_url())


def test_the_length_check_of_a_range_response(served, tmp_path, monkeypatch):
    """A response shorter than the range asked for is refused before anything is unpacked from it."""
    reg, add = served
    body, record = wheel(FILES)
    add(body)
    wheel_ = members.RemoteWheel(pin_for(body, record), fetch.index_url())
    group = [m for m in wheel_.members(lambda n: n.startswith("nvidia/"))]
    reg.bodies[NAME] = body[: group[0].info.header_offset + 100]  # the host now serves a truncated file
    with pytest.raises(members.MemberError, match="cut a range response"):
        members._fetch_span(wheel_, members._spans(group)[0], tmp_path)


def test_whole_mode_and_unpinned_records_download_whole_files(monkeypatch):
    pin = P.Pinned("nvidia-x", "1.0", NAME, "a" * 64, (), "b" * 64)
    monkeypatch.setenv("OEQ_WHEELS_FETCH", "whole")
    assert not members.by_members(pin)
    monkeypatch.delenv("OEQ_WHEELS_FETCH")
    assert members.by_members(pin) and not members.by_members(P.Pinned("x", "1", NAME, "a" * 64))
    monkeypatch.setenv("OEQ_WHEELS_FETCH", "parts")
    with pytest.raises(UsageError, match="OEQ_WHEELS_FETCH='parts' is not one of members, whole"):
        members.by_members(pin)


def test_every_pinned_torch_and_nvidia_wheel_has_its_own_record():
    """Each architecture's file has its own RECORD pin (x86_64's never passes to the aarch64 file)."""
    pins = P.load()
    wheels = [*pins.oeq_binary_inputs(), *pins.matrix.nvidia, *pins.matrix.torch_wheels.values()]
    wheels = [w for w in wheels if w.name == "torch" or w.name.startswith("nvidia-")]
    assert wheels and all(len(w.record) == 64 for w in wheels), [w.file for w in wheels if not w.record]
    by_record = {}
    for w in wheels:
        by_record.setdefault(w.record, set()).add(w.file)
    assert all(len(files) == 1 for files in by_record.values()), by_record


def test_a_damaged_stored_member_is_fetched_again_never_linked(served, tmp_path):
    reg, add = served
    body, record = wheel(FILES)
    add(body)
    pin, cache = pin_for(body, record), tmp_path / "cache"
    wanted = lambda n: n.endswith("libcublas.so.13")
    (path,) = members.fetch(pin, wanted, cache, fetch.index_url()).values()
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))  # same size, other bytes
    sent = reg.sent[NAME]
    (again,) = members.fetch(pin, wanted, cache, fetch.index_url()).values()
    assert again.read_bytes() == FILES["nvidia/cu13/lib/libcublas.so.13"] and reg.sent[NAME] - sent > 4096


def test_a_tree_from_members_equals_the_tree_from_the_whole_wheel(served, tmp_path, monkeypatch):
    """The two fetches give one tree: members by range, and OEQ_WHEELS_FETCH=whole (the whole wheel, pip's hash
    check, then unpacked). The full-size comparison (the 20 wheels of both fetches) is bench/run.py --fetch-equal."""
    _, add = served
    body, record = wheel(FILES)
    add(body)
    pin = pin_for(body, record)
    trees = {}
    for mode in ("members", "whole"):
        monkeypatch.setenv("OEQ_WHEELS_FETCH", mode)
        cache = tmp_path / mode
        got = fetch.ensure([pin], cache)
        assert isinstance(got[NAME], fetch.Remote) == (mode == "members")
        tree = unpack.cuda_tree([(pin, got[NAME])], cache)
        trees[mode] = {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*")
                       if p.is_file() and not p.name.startswith(".oeq-wheels-")}  # but the tree's own stamps
    assert trees["whole"] and trees["members"] == trees["whole"]
    assert (tmp_path / "whole" / "downloads" / NAME).read_bytes() == body
