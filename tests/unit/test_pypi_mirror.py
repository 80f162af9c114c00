"""The kept mirror of PyPI the suite's installs go through (oeq_wheels/checks/pypi_mirror.py), over a loopback
registry (tests/fake_registry.py) that counts what it sends: each file comes from the registry once, is kept only
whole and of the sha256 the page lists, and real pip and uv install through it."""
import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from fake_registry import Registry, wheel_bytes
from oeq_wheels.checks import pypi_mirror, venvs

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
