"""Local stand-ins for the hosts a release goes through, with their rules (for the rehearsal and tests).

- ReleaseHost: GitHub release assets. An uploaded file is stored under the name GitHub gives it
  (site.release_asset_name), listed like the REST API's release object, and a download answers
  302 to a second address (GitHub's object storage), as github.com/<o>/<r>/releases/download does.
- Pages: GitHub Pages serving a project site under /<repository name>/: static files only, a
  folder's index.html, a folder without its slash redirected, no content negotiation.
- pypi_standin(): a real pypiserver holding OUTDIR's wheels (what the release uploads to PyPI)
  that redirects every other project to PyPI, so that `pip install fastmace-oeq-ext ...` runs
  unchanged before anything is uploaded.
Every server binds 127.0.0.1 on a free port and stops with its context.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from ..errors import HostError
from ..registry import PYPI
from ..release.site import release_asset_name


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving_on_loopback(handler):
    """Serve with `handler` on a free loopback port in a thread; yields the root URL (no trailing slash)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def pages(site: Path, repo_name: str):
    """Serve `site` as Pages serves a project site; yields the site's base URL (ending in /)."""
    prefix = f"/{repo_name}/"

    class Handler(_Quiet):
        def send_head(self):
            clean = urlsplit(self.path).path
            if not (clean == prefix[:-1] or clean.startswith(prefix)):
                self.send_error(404)  # outside the project site
                return None
            return super().send_head()

        def translate_path(self, path):
            return super().translate_path("/" + urlsplit(path).path[len(prefix):])

    with serving_on_loopback(functools.partial(Handler, directory=str(site))) as root:
        yield f"{root}/{repo_name}/"


class ReleaseHost:
    """Release assets of one repository, renamed on upload and downloaded through a redirect."""

    def __init__(self, storage: Path, repository: str):
        self.storage, self.repository = storage, repository
        self.storage.mkdir(parents=True, exist_ok=True)
        self.api = self.downloads = ""

    def upload(self, tag: str, files: list[Path]) -> list[str]:
        """Attach files to the release `tag`; returns the names the host gave them."""
        d = self.storage / tag
        d.mkdir(parents=True, exist_ok=True)
        names = []
        for f in files:
            name = release_asset_name(f.name)
            shutil.copyfile(f, d / name)
            names.append(name)
        return names

    @contextlib.contextmanager
    def serving(self):
        storage, repository = self.storage, self.repository

        class Objects(_Quiet):  # the second address downloads are redirected to
            pass

        with serving_on_loopback(functools.partial(Objects, directory=str(storage))) as objects:
            class Front(_Quiet):
                def do_GET(self):
                    parts = unquote(urlsplit(self.path).path).strip("/").split("/")
                    if parts[:4] == ["repos", *repository.split("/"), "releases"] and len(parts) == 6 \
                            and parts[4] == "tags":
                        return self._release(parts[5])
                    if parts[:2] == repository.split("/") and parts[2:4] == ["releases", "download"] \
                            and len(parts) == 6 and (storage / parts[4] / parts[5]).is_file():
                        self.send_response(302)
                        self.send_header("Location", f"{objects}/{quote(parts[4])}/{quote(parts[5])}")
                        self.end_headers()
                        return None
                    self.send_error(404)
                    return None

                def _release(self, tag):
                    d = storage / tag
                    if not d.is_dir():
                        self.send_error(404)
                        return
                    body = json.dumps({"tag_name": tag, "assets": [
                        {"name": f.name, "size": f.stat().st_size,
                         "browser_download_url": f"{front}/{repository}/releases/download/{tag}/{quote(f.name)}"}
                        for f in sorted(d.iterdir())]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            with serving_on_loopback(Front) as front:
                self.api, self.downloads = front, objects
                yield self

    def download(self, tag: str, dest: Path) -> Path:
        """What `gh release download TAG` does: every asset, by its (renamed) name, following the redirect."""
        dest.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(f"{self.api}/repos/{self.repository}/releases/tags/{tag}", timeout=60) as r:
            release = json.load(r)
        for asset in release["assets"]:
            with urllib.request.urlopen(asset["browser_download_url"], timeout=300) as r, \
                    open(dest / asset["name"], "wb") as out:
                shutil.copyfileobj(r, out)
        return dest


def _free_port(preferred: int = 0) -> int:
    """`preferred` where it is free, else any free port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stable_port(key: str) -> int:
    """A port in 20000-31999 that depends on `key` only. uv keys its cache by an index's URL, port included: a
    stand-in served on a new port each session would add its wheels to uv's cache again each session. Below
    Linux's ephemeral range (32768-60999), so that no outgoing connection holds it."""
    import hashlib
    return 20000 + int(hashlib.sha256(key.encode()).hexdigest(), 16) % 12000


@contextlib.contextmanager
def pypi_standin(packages: Path, log: Path, fallback: str | None = None):
    """pypiserver over `packages`, redirecting every project it lacks to `fallback` (default: PyPI, through the
    session's mirror of it where there is one); yields its simple URL."""
    from .venvs import mirror_url as mirror
    fallback = fallback or mirror() or PYPI
    with pypiserver(packages, log, "-a", ".", "-P", ".", "--fallback-url", fallback) as root:
        yield root + "simple/"


@contextlib.contextmanager
def _port_claim(port: int):
    """Processes that would serve on this port take turns until the one serving it answers: the matrix jobs of one
    workflow, which act runs at once on one host (GitHub gives each its own machine), pick the same stable port,
    and between one's free-port check and its server's bind the other would take it. A lock file in /tmp, as the
    port is the machine's; the kernel drops the lock with its process."""
    if not port:
        yield
        return
    path = Path("/tmp") / f"oeq-wheels-port-{port}.lock"
    try:
        fd = os.open(path, os.O_RDONLY)  # another user's lock file: opened, never re-created (protected_regular)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def pypiserver(packages: Path, log: Path, *options: str, port: int = 0):
    """A real pypiserver over `packages` on loopback with `options` (auth, fallback), on `port` where it is free;
    yields its root URL."""
    with contextlib.ExitStack() as claim, open(log, "w") as out:
        claim.enter_context(_port_claim(port))  # held until this server answers (or failed), not while it serves
        port = _free_port(port)
        p = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
                              *options, str(packages)], stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/simple/"
        try:
            for _ in range(150):
                try:
                    urllib.request.urlopen(url, timeout=2).close()
                    break
                except (urllib.error.URLError, OSError):
                    if p.poll() is not None:
                        break
                    time.sleep(0.2)
            else:
                raise HostError(f"pypiserver did not answer on {url}: {log.read_text()[-500:]}")
            if p.poll() is not None:
                raise HostError(f"pypiserver stopped: {log.read_text()[-500:]}")
            claim.close()
            yield f"http://127.0.0.1:{port}/"
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
