"""PyPI for the tests' installs, kept: a read-through mirror of PyPI's simple index on loopback over a
content-addressed store (<cache>/pypi-mirror/<sha256>/<file name>), which keeps what the runs of the last 30 days
used.

A test suite that installs real torch stacks with pip and uv as a user would fetched them again on every run (24 GB
on a second `make test`), and fetched the same stack again for each installer and test within one run. Through
this mirror each file comes from PyPI once: a page is PyPI's own, read live (its files, hashes, markers, yanks and
core metadata as PyPI lists them); each file it lists is served from the store, or fetched, checked against the
sha256 PyPI lists and kept. Installers verify the same hashes again. Nothing half-fetched is ever kept.

Hand-rolled in the standard library (~250 lines) because what exists does more and less: devpi-server brings a
database and its own index semantics; proxpi keys its cache by URL with expiry rather than by content.

The pytest session starts one (support/plugin.py) and names it in OEQ_WHEELS_PYPI_MIRROR; venvs.pip_env() then
points pip (PIP_INDEX_URL) and uv (UV_INDEX_URL) at it. OEQ_WHEELS_PYPI_MIRROR=off installs from PyPI directly.
The port is stable per store (hosts.stable_port): uv keys its cache by the index's URL, port included.

Its second index, /standin/simple/ (standin_url()), is PyPI's own pages with one difference: NVIDIA's library
wheels and Triton (STANDIN) are stand-ins, each a wheel of the same file name holding the real wheel's METADATA
(its requirements, as the resolver sees them) and none of its files. A plain `pip install torch==X ...` through it
resolves exactly as through PyPI and installs torch whole, without the ~2.5 GB of libraries that a check on a
machine without a GPU loads and never calls into; load stubs (loader_stubs.py) stand in for those libraries at
load time. Only the install rows whose stack nothing else in the suite installs use it (installmatrix.run's
`standins`); the release's own stack is installed whole wherever it is installed. A stand-in's METADATA is PyPI's
core metadata of the wheel where PyPI lists one, else the wheel's own read by range (checked against its RECORD); it
is kept as <store>/<the wheel's sha256>/<file>.standin. Stand-ins are never published.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import io
import json
import os
import re
import shutil
import threading
import zipfile
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name

from oeq_wheels import registry
from oeq_wheels.checks import hosts
# The product's side of it: the verbs the tests run (install-matrix, clean-install) read the running mirror's URL
# (OEQ_WHEELS_PYPI_MIRROR, through oeq_wheels.settings) and spell every index from it (oeq_wheels/checks/venvs.py).
from oeq_wheels.checks.venvs import mirror_url as url, standin_url  # noqa: F401
from oeq_wheels.settings import PYPI_MIRROR as ENV  # noqa: F401
from oeq_wheels.errors import RegistryError
from oeq_wheels.files import locked, sweep_stale, temp_prefix

PYPI = "https://pypi.org/simple/"
JSON = "application/vnd.pypi.simple.v1+json"
SHA256 = re.compile(r"[0-9a-f]{64}")
KEEP_DAYS = 30  # a file no session served for this long is removed when the next one starts
# As PyPI sends its files: named by content, they never change. Without it uv revalidates its cached copy of each
# wheel at every install, and fetches it again from the store (46 GB served in a run).
IMMUTABLE = "max-age=365000000, immutable, public"
# Projects the stand-in index serves as stand-ins, each platform wheel of theirs: what
# `import torch` loads (NVIDIA's libraries) or imports only when asked (Triton), on a machine with no GPU nothing
# runs. A pure-Python wheel of theirs (nvidia-ml-py) is served whole.
STANDIN = re.compile(r"nvidia-.+|triton")
STANDIN_NOTE = "OEQ_WHEELS_STANDIN"  # the file in a stand-in's .dist-info that says what it is


def is_standin_file(project: str, filename: str) -> bool:
    return bool(STANDIN.fullmatch(canonicalize_name(project))) and filename.endswith(".whl") and \
        not filename.endswith("-any.whl")


def standin_wheel(filename: str, metadata: bytes) -> bytes:
    """The stand-in of PyPI's wheel `filename`: a .dist-info with its METADATA byte for byte, a WHEEL of the file
    name's tags and a note; no other file. The same bytes for the same input (fixed times, sorted entries)."""
    parts = filename[:-len(".whl")].split("-")
    dist_info = f"{parts[0]}-{parts[1]}.dist-info"
    pythons, abis, platforms = (t.split(".") for t in parts[-3:])
    wheel = "Wheel-Version: 1.0\nGenerator: oeq-wheels (test stand-in)\nRoot-Is-Purelib: false\n" + "".join(
        f"Tag: {p}-{a}-{pl}\n" for p in pythons for a in abis for pl in platforms)
    note = (f"A stand-in for {filename} made by oeq-wheels' test mirror of PyPI: its METADATA and none of its "
            f"files. Never published.\n")
    members = {f"{dist_info}/METADATA": metadata, f"{dist_info}/WHEEL": wheel.encode(),
               f"{dist_info}/{STANDIN_NOTE}": note.encode()}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for n, d in sorted(members.items())) + f"{dist_info}/RECORD,,\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr, info.compress_type = 0o644 << 16, zipfile.ZIP_DEFLATED
            zf.writestr(info, members[name])
    return buf.getvalue()


class Mirror:
    def __init__(self, store: Path, upstream: str = PYPI):
        self.store, self.upstream = store, upstream.rstrip("/") + "/"
        self.sources: dict[tuple[str, str], str] = {}  # (sha256, file name) -> PyPI's URL of it, from pages read
        self.metadata: dict[tuple[str, str], str] = {}  # (a wheel's sha256, its name) -> its core metadata's sha256
        self.sizes: dict[tuple[str, str], int] = {}     # (sha256, file name) -> its size as the page lists it
        self.pages: dict[tuple[str, bool], bytes] = {}  # (project, stand-ins) -> its page as served, this server's life
        self.fetched = self.from_store = 0              # bytes of files: from PyPI, and from the store
        self.index = ""
        self.lock = threading.Lock()

    def path(self, sha256: str, name: str) -> Path:
        return self.store / sha256 / name

    def page(self, project: str, standins: bool = False) -> bytes | None:
        """PyPI's page of `project` with each file's URL on this mirror (relative, as PEP 691 allows, so one page
        serves whatever address a client reached the mirror by); None where PyPI has no such project. standins: the
        stand-in index's page, where each of STANDIN's platform wheels is listed as its stand-in (under
        /standin/files/, no hash or size: its bytes are made when asked; its core metadata's hash, where PyPI lists
        one, is PyPI's)."""
        with self.lock:
            if (project, standins) in self.pages:
                return self.pages[(project, standins)]
        req = urllib.request.Request(self.upstream + project + "/", headers={"Accept": JSON})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                data = json.load(r)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        sources, metadata, sizes = {}, {}, {}
        for f in data.get("files", []):
            sha, name = f.get("hashes", {}).get("sha256", ""), f["filename"]
            if not SHA256.fullmatch(sha) or "/" in name:
                continue  # left as PyPI lists it: an installer that picks it fetches and checks it itself
            source = urllib.parse.urljoin(self.upstream + project + "/", f["url"])
            sources[(sha, name)] = source
            if isinstance(f.get("size"), int):
                sizes[(sha, name)] = f["size"]
            meta = f.get("core-metadata") or f.get("dist-info-metadata")
            if isinstance(meta, dict) and SHA256.fullmatch(meta.get("sha256", "")):
                sources[(meta["sha256"], name + ".metadata")] = source + ".metadata"
                metadata[(sha, name)] = meta["sha256"]
            f["url"] = f"/files/{sha}/{name}"
        body = json.dumps(data).encode()
        data = copy.deepcopy(data)
        for f in data.get("files", []):
            sha = f.get("hashes", {}).get("sha256", "")
            if (sha, f["filename"]) in sources and is_standin_file(project, f["filename"]):
                f.update(url=f"/standin/files/{sha}/{f['filename']}", hashes={})
                f.pop("size", None)
        data.setdefault("meta", {})["api-version"] = "1.0"  # 1.1 requires each file's size
        standin_body = json.dumps(data).encode()
        with self.lock:
            self.sources.update(sources)
            self.metadata.update(metadata)
            self.sizes.update(sizes)
            self.pages[(project, False)], self.pages[(project, True)] = body, standin_body
        return standin_body if standins else body

    def standin(self, sha256: str, name: str) -> Path | None:
        """The kept stand-in (<store>/<sha256>/<name>.standin) of the wheel a page listed, made once from its
        METADATA; None where no page of this session listed it."""
        with self.lock:
            source, size = self.sources.get((sha256, name)), self.sizes.get((sha256, name))
            meta_sha = self.metadata.get((sha256, name))
            meta_source = self.sources.get((meta_sha, name + ".metadata")) if meta_sha else None
        path = self.path(sha256, name + ".standin")
        if not path.is_file() and not source:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path):
            if not path.is_file():
                metadata = self._metadata(sha256, name, source, size, meta_sha, meta_source)
                tmp = path.with_name(temp_prefix(path.name) + "part")
                tmp.write_bytes(standin_wheel(name, metadata))
                os.replace(tmp, path)
        return path

    def _metadata(self, sha256: str, name: str, source: str, size: int | None, meta_sha: str | None,
                  meta_source: str | None) -> bytes:
        """The wheel's METADATA: PyPI's core metadata of it where its page lists one (checked against that sha256);
        else the wheel's own, from the kept wheel or read from PyPI by range (its central directory, RECORD and
        METADATA: a few hundred KB of a wheel of hundreds of MB), checked against the wheel's RECORD."""
        if meta_source:
            with urllib.request.urlopen(meta_source, timeout=120) as r:
                data = r.read()
            with self.lock:
                self.fetched += len(data)
            if hashlib.sha256(data).hexdigest() != meta_sha:
                raise OSError(f"{meta_source}: not the core metadata PyPI lists")
            return data
        kept = self.path(sha256, name)
        if kept.is_file():
            try:
                return _own_metadata(zipfile.ZipFile(kept), name)
            except (zipfile.BadZipFile, KeyError) as exc:
                raise OSError(f"{name}: {exc}") from None
        if not size:
            raise OSError(f"{name}: PyPI's page gives no size, so it cannot be read by range")
        reader = registry._RangeReader(registry.File(name, source, sha256, size, False))
        try:
            return _own_metadata(zipfile.ZipFile(io.BufferedReader(reader, 1 << 16)), name)
        except (RegistryError, zipfile.BadZipFile, KeyError) as exc:
            raise OSError(f"{name}: {exc}") from None
        finally:
            with self.lock:
                self.fetched += reader.fetched


def _own_metadata(zf: zipfile.ZipFile, name: str) -> bytes:
    """A wheel's .dist-info/METADATA, of the sha256 its RECORD gives it (KeyError where it has none)."""
    dist_info = next((n.removesuffix("METADATA") for n in zf.namelist()
                      if n.endswith(".dist-info/METADATA") and n.count("/") == 1), "?.dist-info/")
    data, record = zf.read(dist_info + "METADATA"), zf.read(dist_info + "RECORD").decode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if f"{dist_info}METADATA,sha256={digest}," not in record:
        raise OSError(f"{name}: its METADATA is not the one its RECORD lists")
    return data

def prune(store: Path, days: int = KEEP_DAYS) -> int:
    """Remove what no session has served for `days` (a torch the pins left): the store keeps what runs use."""
    import time
    cutoff, removed = time.time() - days * 86400, 0
    for d in store.iterdir():
        files = [f for f in d.iterdir() if not f.name.endswith(".lock")] if d.is_dir() else []
        if files and all(f.stat().st_mtime < cutoff for f in files):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range (first, last) a Range header asks for, or None for the whole file. uv reads a wheel's
    requirements this way (its central directory and METADATA) where the index offers ranges."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", (header or "").strip())
    if not m or not (m.group(1) or m.group(2)):
        return None
    if not m.group(1):  # the last N bytes
        return max(0, size - int(m.group(2))), size - 1
    return int(m.group(1)), min(size - 1, int(m.group(2))) if m.group(2) else size - 1


def _file_headers(handler, length: int | str | None) -> None:
    """A file's headers as PyPI sends them: immutable, ranges offered; without a length the connection ends it."""
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Cache-Control", IMMUTABLE)
    handler.send_header("Accept-Ranges", "bytes")
    if length is not None:
        handler.send_header("Content-Length", str(length))
    else:
        handler.close_connection = True


def _send_file(handler, mirror: Mirror, path: Path) -> None:
    os.utime(path)  # served now: kept (prune)
    size = path.stat().st_size
    ranged = _range(handler.headers.get("Range"), size)
    first, last = ranged or (0, size - 1)
    if first > last:  # beyond the file's end
        handler.send_response(416)
        handler.send_header("Content-Range", f"bytes */{size}")
        handler.send_header("Content-Length", "0")
        return handler.end_headers()
    with mirror.lock:  # counted before it is sent: a client may read it all before this thread runs on
        mirror.from_store += last - first + 1
    handler.send_response(206 if ranged else 200)  # 206 for any range asked, the whole file's too (uv wants it)
    if ranged:
        handler.send_header("Content-Range", f"bytes {first}-{last}/{size}")
    _file_headers(handler, last - first + 1)
    handler.end_headers()
    with open(path, "rb") as f, contextlib.suppress(BrokenPipeError, ConnectionResetError):
        f.seek(first)
        left = last - first + 1
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            handler.wfile.write(chunk)
            left -= len(chunk)


def _fetch_and_send(handler, mirror: Mirror, sha256: str, path: Path, source: str, send: bool = True) -> None:
    """PyPI's file to the client (unless not `send`: the caller then answers from the store) and into the store at
    once; kept only whole and of the listed sha256. A client that goes away does not stop the fetch: the next one
    finds the file kept."""
    tmp = path.with_name(temp_prefix(path.name) + "part")
    digest, sent = hashlib.sha256(), send
    try:
        r = urllib.request.urlopen(source, timeout=300)
    except (urllib.error.URLError, OSError) as exc:
        handler.log_error("%s: %s", source, exc)
        return handler.send_error(502, f"PyPI: {exc}")
    with r, open(tmp, "wb") as out:
        if send:
            handler.send_response(200)
            _file_headers(handler, r.headers.get("Content-Length") or None)
            handler.end_headers()
        for chunk in iter(lambda: r.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
            with mirror.lock:
                mirror.fetched += len(chunk)
            if sent:
                try:
                    handler.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    sent = False
    if digest.hexdigest() != sha256:
        tmp.unlink()
        handler.log_error("%s: sha256 %s, not the %s PyPI lists; not kept", source, digest.hexdigest(), sha256)
        if send:
            handler.close_connection = True
        else:
            handler.send_error(502, "PyPI sent other bytes than its page lists")
        return
    os.replace(tmp, path)


def _handler(mirror: Mirror):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def log_error(self, fmt, *args):
            print("pypi-mirror: " + fmt % args, flush=True)

        def _missing(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _file(self) -> tuple[str, str, Path, str | None] | None:
            """(sha256, file name, its place in the store, PyPI's URL of it) of a file request, or None where this
            session's pages never listed it and the store lacks it."""
            m = re.fullmatch(r"/files/([0-9a-f]{64})/([^/]+)", self.path)
            if not m:
                return None
            sha, name = m.groups()
            with mirror.lock:
                if name.endswith(".metadata"):  # listed under the wheel's sha256; kept under its own
                    sha = mirror.metadata.get((sha, name.removesuffix(".metadata")), "")
                source = mirror.sources.get((sha, name))
            path = mirror.path(sha, name) if sha else None
            return (sha, name, path, source) if path and (path.is_file() or source) else None

        def _standin(self) -> Path | None:
            """The stand-in a /standin/files/ request names, or None (after a line in the log where making it failed)."""
            m = re.fullmatch(r"/standin/files/([0-9a-f]{64})/([^/]+\.whl)", self.path)
            if not m:
                return None
            try:
                return mirror.standin(*m.groups())
            except (urllib.error.URLError, OSError) as exc:
                self.log_error("stand-in of %s: %s", m.group(2), exc)
                return None

        def _unprefix_metadata(self):
            """A stand-in's core metadata is its wheel's: /standin/files/X.metadata is /files/X.metadata."""
            if self.path.startswith("/standin/files/") and self.path.endswith(".metadata"):
                self.path = self.path.removeprefix("/standin")

        def do_HEAD(self):
            """uv asks before it fetches, whether ranges are offered: with them it reads a wheel's requirements from
            a few ranges rather than fetching it whole twice (once to resolve, once to install)."""
            self._unprefix_metadata()
            if self.path.startswith("/standin/files/"):
                path = self._standin()
                if not path:
                    return self._missing()
                self.send_response(200)
                _file_headers(self, path.stat().st_size)
                return self.end_headers()
            found = self._file()
            if not found:
                return self._missing()
            with mirror.lock:
                size = found[2].stat().st_size if found[2].is_file() else mirror.sizes.get(found[:2])
            self.send_response(200)
            _file_headers(self, size)
            self.end_headers()

        def do_GET(self):
            self._unprefix_metadata()
            if self.path.startswith("/standin/files/"):
                path = self._standin()
                return _send_file(self, mirror, path) if path else self._missing()
            m = re.fullmatch(r"(/standin)?/simple/([A-Za-z0-9._-]+)/?", self.path)
            if m:
                body = mirror.page(canonicalize_name(m.group(2)), standins=bool(m.group(1)))
                if body is None:
                    return self._missing()
                self.send_response(200)
                self.send_header("Content-Type", JSON)
                self.send_header("Cache-Control", "no-cache")  # uv asks again each run, and gets this run's page
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            found = self._file()
            if not found:
                return self._missing()
            sha, name, path, source = found
            ranged = _range(self.headers.get("Range"), 1 << 62) is not None
            with locked(path):  # one fetch of a file: a second request for it waits, then reads the store
                if not path.is_file():
                    _fetch_and_send(self, mirror, sha, path, source, send=not ranged)
                    if not ranged or not path.is_file():
                        return
            _send_file(self, mirror, path)
    return Handler


@contextlib.contextmanager
def serving(store: Path, upstream: str = PYPI):
    """A mirror of `upstream` over `store` on loopback, on the store's stable port where free (else any); yields
    the Mirror, whose .index is its simple index URL."""
    store.mkdir(parents=True, exist_ok=True)
    sweep_stale(*(d for d in store.iterdir() if d.is_dir()))  # a killed run's half-fetched files
    prune(store)
    mirror = Mirror(store, upstream)
    try:
        server = ThreadingHTTPServer(("127.0.0.1", hosts.stable_port(str(store.resolve()))), _handler(mirror))
    except OSError:  # taken (another session on this store): uv then keeps this session's installs apart
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mirror))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mirror.index = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
