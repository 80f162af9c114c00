"""A registry that takes uploads: pypiserver on loopback, for publish's and the index server's tests."""
import contextlib
from pathlib import Path

UPLOAD_PASSWORD = "pypirc-S3cret-never-printed"


@contextlib.contextmanager
def upload_server(tmp_path: Path):
    """pypiserver on loopback; uploads need user `owner` with UPLOAD_PASSWORD, reading does not; never falls back
    to PyPI. Yields its root URL and its package directory."""
    from passlib.apache import HtpasswdFile
    from oeq_wheels.checks import hosts
    pkgs = tmp_path / "packages"
    pkgs.mkdir()
    ht = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    ht.set_password("owner", UPLOAD_PASSWORD)
    ht.save()
    with hosts.pypiserver(pkgs, tmp_path / "server.log", "-a", "update", "-P", str(tmp_path / "htpasswd"),
                          "--disable-fallback") as url:
        yield url, pkgs
