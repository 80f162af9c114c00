"""The kept mirror of PyPI the suite's installs go through (tests/support/pypi_mirror.py), over a loopback
registry (tests/support/fake_registry.py) that counts what it sends: each file comes from the registry once, is kept only
whole and of the sha256 the page lists, and real pip and uv install through it."""
import base64
import hashlib
import io
import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pytest

from support.fake_registry import Registry, wheel_bytes
from oeq_wheels.checks import venvs
from support import pypi_mirror

JSON = {"Accept": pypi_mirror.JSON}


def _wheel(name: str, version: str) -> tuple[str, bytes, bytes]:
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    body = wheel_bytes({f"{name}/__init__.py": b"X = 1\n", f"{dist}/METADATA": meta,
                        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                        f"{dist}/RECORD": b""})
    return f"{name}-{version}-py3-none-any.whl", body, meta


def _registry() -> Registry:
    reg = Registry()
    filename, body, meta = _wheel("tiny", "77.1")
    reg.add("tiny", filename, body)
    reg.bodies[filename + ".metadata"] = meta  # PEP 658: the core metadata beside the wheel
    reg.files["tiny"][0]["core-metadata"] = {"sha256": hashlib.sha256(meta).hexdigest()}
    reg.add("liar", "liar-77.1-py3-none-any.whl", b"not these bytes", sha256="0" * 64)
    return reg


def _get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=JSON), timeout=30) as r:
        return r.read()


def _files(m, project: str) -> list[dict]:
    """The page's files, each URL resolved against the page's as an installer resolves it (PEP 691)."""
    page = m.index + project + "/"
    return [{**f, "url": urllib.parse.urljoin(page, f["url"])} for f in json.loads(_get(page))["files"]]


def test_each_file_comes_from_pypi_once_then_from_the_store(tmp_path):
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        (listed,) = json.loads(_get(m.index + "tiny/"))["files"]
        assert listed["url"] == f"/files/{listed['hashes']['sha256']}/{listed['filename']}"  # on whatever host
        (entry,) = _files(m, "tiny")
        assert entry["url"].startswith(m.index.removesuffix("simple/") + "files/")
        assert entry["hashes"] == reg.files["tiny"][0]["hashes"]  # PyPI's page, its hashes unchanged
        first, second = _get(entry["url"]), _get(entry["url"])
        assert first == second == reg.bodies[entry["filename"]]
        assert reg.sent[entry["filename"]] == len(first)  # the registry sent it once
        assert m.fetched == len(first) and m.from_store == len(first)
        kept = tmp_path / "store" / entry["hashes"]["sha256"] / entry["filename"]
        assert kept.read_bytes() == first
    # A later session reads the store without the registry sending the file again.
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        (entry,) = _files(m, "tiny")
        assert _get(entry["url"]) == first and m.fetched == 0
        assert reg.sent[entry["filename"]] == len(first)


def test_a_file_not_of_its_listed_sha256_is_never_kept(tmp_path):
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        (entry,) = _files(m, "liar")
        try:
            _get(entry["url"])
        except (urllib.error.URLError, ConnectionError):
            pass  # the client may or may not see the bytes; installers check the hash themselves
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_unknown_projects_and_files_are_404(tmp_path):
    with Registry().serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        for url in (m.index + "nothing-here/", m.index.removesuffix("simple/") + "files/" + "a" * 64 + "/x.whl"):
            with pytest.raises(urllib.error.HTTPError) as e:
                _get(url)
            assert e.value.code == 404


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pip_and_uv_install_through_it_as_from_pypi(tmp_path, installer, monkeypatch):
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        monkeypatch.setenv(pypi_mirror.ENV, m.index)  # the index the suite's installers are given (venvs.pip_env)
        target = tmp_path / "target"
        env = dict(venvs.pip_env(), UV_NO_CONFIG="1", UV_CACHE_DIR=str(tmp_path / "uv-cache"))
        cmd = [sys.executable, "-m", installer] + (["pip"] if installer == "uv" else []) + \
            ["install", "-q", "--target", str(target), "tiny==77.1"] + \
            (["--python", sys.executable] if installer == "uv" else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert (target / "tiny" / "__init__.py").read_text() == "X = 1\n"
        assert m.fetched > 0


def test_the_suites_installers_are_pointed_at_it_or_at_pypi(monkeypatch):
    monkeypatch.setenv(pypi_mirror.ENV, "http://127.0.0.1:20001/simple/")
    env = venvs.pip_env()
    assert env["PIP_INDEX_URL"] == env["UV_INDEX_URL"] == venvs.pypi_index() == "http://127.0.0.1:20001/simple/"
    monkeypatch.setenv(pypi_mirror.ENV, "off")
    env = venvs.pip_env()
    assert "PIP_INDEX_URL" not in env and "UV_INDEX_URL" not in env and venvs.pypi_index() == venvs.UV_PYPI


def test_what_no_run_served_for_thirty_days_is_removed_and_what_one_served_is_kept(tmp_path):
    import os
    import time
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        (entry,) = _files(m, "tiny")
        _get(entry["url"])
    kept = tmp_path / "store" / entry["hashes"]["sha256"] / entry["filename"]
    old = time.time() - (pypi_mirror.KEEP_DAYS + 1) * 86400
    os.utime(kept, (old, old))
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        assert not kept.exists()  # removed when the session started
        _get(m.index + "tiny/")
        _get(entry["url"])        # fetched again, and served now
    assert kept.exists() and kept.stat().st_mtime > time.time() - 60
    assert pypi_mirror.prune(tmp_path / "store") == 0


def test_uv_keeps_what_it_took_from_it_as_it_keeps_pypis(tmp_path, monkeypatch):
    """A second uv install of the same wheel with the same cache asks for its page and takes no file: the mirror sends
    files as PyPI does (immutable), so uv does not revalidate its copy and fetch it again."""
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        monkeypatch.setenv(pypi_mirror.ENV, m.index)
        env = dict(venvs.pip_env(), UV_NO_CONFIG="1", UV_CACHE_DIR=str(tmp_path / "uv-cache"))
        for target in ("one", "two"):
            r = subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", sys.executable,
                                "--target", str(tmp_path / target), "tiny==77.1"], env=env, capture_output=True,
                               text=True)
            assert r.returncode == 0, r.stderr
            if target == "one":
                taken = m.fetched + m.from_store
        assert taken > 0 and m.fetched + m.from_store == taken
        assert (tmp_path / "two" / "tiny" / "__init__.py").is_file()


def test_ranges_are_answered_from_the_store_and_a_first_one_keeps_the_whole_file(tmp_path):
    """uv reads a wheel's requirements by ranges where the index offers them (HEAD says so); otherwise it fetches
    each wheel whole twice. A range of a file not yet kept fetches it whole into the store first."""
    reg = _registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        (entry,) = _files(m, "tiny")
        body = reg.bodies[entry["filename"]]
        head = urllib.request.urlopen(urllib.request.Request(entry["url"], method="HEAD"), timeout=30)
        assert head.headers["Accept-Ranges"] == "bytes" and int(head.headers["Content-Length"]) == len(body)
        for asked, want in (("bytes=10-19", body[10:20]), ("bytes=-7", body[-7:]), ("bytes=5-", body[5:]),
                            (f"bytes=0-{len(body) - 1}", body)):
            with urllib.request.urlopen(urllib.request.Request(entry["url"], headers={"Range": asked}),
                                        timeout=30) as r:
                assert r.status == 206 and r.read() == want, asked
                assert r.headers["Content-Range"].endswith(f"/{len(body)}")
        with pytest.raises(urllib.error.HTTPError) as beyond:
            urllib.request.urlopen(urllib.request.Request(entry["url"], headers={"Range": f"bytes={len(body)}-"}),
                                   timeout=30)
        assert beyond.value.code == 416
        assert reg.sent[entry["filename"]] == len(body)  # fetched whole once, for the first range
        assert (tmp_path / "store" / entry["hashes"]["sha256"] / entry["filename"]).read_bytes() == body


def _nvidia_registry(core_metadata: bool = True, record_lies: bool = False) -> tuple[Registry, str]:
    """tiny (pure Python) and nvidia-fake 13.0, a platform wheel holding a 2 MB library, with PyPI's core metadata
    of it or without (as PyPI lists NVIDIA's)."""
    import os
    reg = _registry()
    dist = "nvidia_fake-13.0.dist-info"
    meta = b"Metadata-Version: 2.1\nName: nvidia-fake\nVersion: 13.0\nRequires-Dist: tiny==77.1\n"
    filename = "nvidia_fake-13.0-py3-none-manylinux_2_27_x86_64.whl"
    members = {"nvidia/fake/lib/libfake.so.13": b"\x7fELF" + os.urandom(2 << 20), f"{dist}/METADATA": meta,
               f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                                b"Tag: py3-none-manylinux_2_27_x86_64\n"}
    digest = lambda d: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    members[f"{dist}/RECORD"] = "".join(f"{n},sha256={digest(d + (b'!' if record_lies else b''))},{len(d)}\n"
                                        for n, d in members.items()).encode()
    reg.add("nvidia-fake", filename, wheel_bytes(members))
    if core_metadata:
        reg.bodies[filename + ".metadata"] = meta
        reg.files["nvidia-fake"][0]["core-metadata"] = {"sha256": hashlib.sha256(meta).hexdigest()}
    return reg, filename


def test_the_standin_index_serves_nvidias_wheels_as_their_metadata_and_nothing_else(tmp_path):
    reg, filename = _nvidia_registry()
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        standin = m.index.removesuffix("simple/") + "standin/simple/"
        (entry,) = json.loads(_get(standin + "nvidia-fake/"))["files"]
        assert entry["url"].startswith("/standin/files/") and entry["hashes"] == {} and "size" not in entry
        assert entry["core-metadata"] == reg.files["nvidia-fake"][0]["core-metadata"]  # PyPI's, byte for byte
        (tiny,) = json.loads(_get(standin + "tiny/"))["files"]
        assert tiny["url"].startswith("/files/") and tiny["hashes"] == reg.files["tiny"][0]["hashes"]  # whole
        body = _get(urllib.parse.urljoin(standin, entry["url"]))
        assert _get(urllib.parse.urljoin(standin, entry["url"])) == body  # the same bytes each time
        names = zipfile.ZipFile(io.BytesIO(body)).namelist()
        assert not [n for n in names if not n.startswith("nvidia_fake-13.0.dist-info/")], names  # no library
        assert zipfile.ZipFile(io.BytesIO(body)).read("nvidia_fake-13.0.dist-info/METADATA") == \
            reg.bodies[filename + ".metadata"]
        assert filename not in reg.sent and reg.sent[filename + ".metadata"] > 0  # the wheel never fetched
        sha = reg.files["nvidia-fake"][0]["hashes"]["sha256"]
        assert (tmp_path / "store" / sha / (filename + ".standin")).read_bytes() == body  # kept


def test_without_pypis_core_metadata_a_standin_takes_the_wheels_own_by_range(tmp_path):
    """PyPI lists no core metadata for NVIDIA's wheels: the stand-in's METADATA is the wheel's own, read by range
    (a small part of the wheel) and checked against its RECORD; one whose RECORD disagrees is not served."""
    reg, filename = _nvidia_registry(core_metadata=False)
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        standin = m.index.removesuffix("simple/") + "standin/simple/"
        (entry,) = json.loads(_get(standin + "nvidia-fake/"))["files"]
        body = _get(urllib.parse.urljoin(standin, entry["url"]))
        assert zipfile.ZipFile(io.BytesIO(body)).read("nvidia_fake-13.0.dist-info/METADATA").startswith(
            b"Metadata-Version: 2.1\nName: nvidia-fake\n")
        assert 0 < reg.sent[filename] < len(reg.bodies[filename]) // 4  # not the wheel: its directory and METADATA
    reg, filename = _nvidia_registry(core_metadata=False, record_lies=True)
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store2", upstream) as m:
        standin = m.index.removesuffix("simple/") + "standin/simple/"
        (entry,) = json.loads(_get(standin + "nvidia-fake/"))["files"]
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(urllib.parse.urljoin(standin, entry["url"]))
        assert e.value.code == 404 and not list((tmp_path / "store2").rglob("*.standin"))
        (real,) = _files(m, "nvidia-fake")  # the plain index: PyPI's wheel, whole
        assert real["hashes"] == reg.files["nvidia-fake"][0]["hashes"] and _get(real["url"]) == reg.bodies[filename]


@pytest.mark.parametrize("core_metadata", [True, False])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pip_and_uv_resolve_through_the_standin_index_as_through_pypi(tmp_path, installer, core_metadata):
    reg, filename = _nvidia_registry(core_metadata)
    with reg.serve() as upstream, pypi_mirror.serving(tmp_path / "store", upstream) as m:
        target = tmp_path / "target"
        env = dict(venvs.pip_env(), UV_NO_CONFIG="1", UV_CACHE_DIR=str(tmp_path / "uv-cache"),
                   PIP_INDEX_URL=m.index.removesuffix("simple/") + "standin/simple/")
        env["UV_INDEX_URL"] = env["PIP_INDEX_URL"]
        cmd = [sys.executable, "-m", installer] + (["pip"] if installer == "uv" else []) + \
            ["install", "-q", "--target", str(target), "nvidia-fake==13.0"] + \
            (["--python", sys.executable] if installer == "uv" else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert (target / "tiny" / "__init__.py").is_file()  # its requirement, resolved from PyPI's metadata
        assert (target / "nvidia_fake-13.0.dist-info" / pypi_mirror.STANDIN_NOTE).is_file()
        assert not (target / "nvidia").exists() and reg.sent.get(filename, 0) < len(reg.bodies[filename]) // 4


def test_the_suites_standin_index_is_the_mirrors(monkeypatch):
    monkeypatch.setenv(pypi_mirror.ENV, "http://127.0.0.1:20001/simple/")
    assert pypi_mirror.standin_url() == "http://127.0.0.1:20001/standin/simple/"
    assert venvs.index_env(standins=True)["PIP_INDEX_URL"] == venvs.index_env(standins=True)["UV_INDEX_URL"] == \
        "http://127.0.0.1:20001/standin/simple/"
    monkeypatch.setenv(pypi_mirror.ENV, "off")
    assert pypi_mirror.standin_url() is None and venvs.index_env(standins=True) == {}
