"""The package registry as `oeq-wheels pins` reads it: a project's files with their sha256 and size from the JSON
simple API (PEP 691), and single members of a remote wheel (METADATA, torch/version.py) through HTTP range
requests on its central directory, so that no 500 MB wheel is downloaded to learn two small files.

Hand-rolled on purpose: pip and uv expose no API for either; zipfile does the zip reading over a seekable
file object whose reads are range requests."""
from __future__ import annotations

import io
import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass

from .errors import RegistryError

PYPI = "https://pypi.org/simple/"
_ACCEPT = "application/vnd.pypi.simple.v1+json"
_TIMEOUT = 60


@dataclass(frozen=True)
class File:
    filename: str
    url: str
    sha256: str
    size: int
    yanked: bool


def _open(req: urllib.request.Request | str, what: str):
    try:
        return urllib.request.urlopen(req, timeout=_TIMEOUT)
    except urllib.error.HTTPError as exc:
        raise RegistryError(f"{what}: the registry answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryError(f"{what}: cannot reach the registry ({reason})") from None


def project_files(index: str, project: str) -> list[File]:
    """Every file of `project` on the index (PEP 691 JSON), with absolute URLs."""
    url = urllib.parse.urljoin(index if index.endswith("/") else index + "/", f"{project}/")
    with _open(urllib.request.Request(url, headers={"Accept": _ACCEPT}), f"{project} on {index}") as r:
        if _ACCEPT not in r.headers.get("Content-Type", ""):
            raise RegistryError(f"{project} on {index}: the index does not serve the JSON simple API (PEP 691)")
        doc = json.load(r)
    out = []
    for f in doc.get("files", []):
        sha = f.get("hashes", {}).get("sha256")
        if sha:
            out.append(File(f["filename"], urllib.parse.urljoin(url, f["url"]), sha, int(f.get("size") or 0),
                            bool(f.get("yanked"))))
    return out


class _RangeReader(io.RawIOBase):
    """A read-only, seekable view of a remote file: each read is an HTTP range request, cached by block."""

    BLOCK = 1 << 16

    def __init__(self, f: File):
        super().__init__()
        self.file, self.pos, self.blocks, self.fetched = f, 0, {}, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.file.size + offset
        return self.pos

    def _range(self, start: int, end: int) -> bytes:
        req = urllib.request.Request(self.file.url, headers={"Range": f"bytes={start}-{end - 1}"})
        with _open(req, self.file.filename) as r:
            body = r.read()
            if r.status != 206 or len(body) != end - start:
                raise RegistryError(f"{self.file.filename}: the file host ignored or cut a range request "
                                    f"(HTTP {r.status}, {len(body)} of {end - start} bytes)")
        self.fetched += len(body)
        return body

    def readinto(self, buf) -> int:
        n = min(len(buf), self.file.size - self.pos)
        if n <= 0:
            return 0
        if n > self.BLOCK:  # a member's data: one request, not cached
            data = self._range(self.pos, self.pos + n)
        else:
            index, offset = divmod(self.pos, self.BLOCK)
            if index not in self.blocks:
                start = index * self.BLOCK
                self.blocks[index] = self._range(start, min(start + self.BLOCK, self.file.size))
            data = self.blocks[index][offset:offset + n]
        buf[:len(data)] = data
        self.pos += len(data)
        return len(data)


def read_members(f: File, names: list[str]) -> dict[str, bytes]:
    """The named members of a remote wheel (each a name or a regular expression matched whole), by range requests."""
    if not f.size:
        raise RegistryError(f"{f.filename}: the index gives no size, so it cannot be read by range")
    raw = _RangeReader(f)
    try:
        with zipfile.ZipFile(io.BufferedReader(raw, _RangeReader.BLOCK)) as zf:
            listing = zf.namelist()
            out = {}
            for want in names:
                hit = next((n for n in listing if re.fullmatch(want, n)), None)
                if hit is None:
                    raise RegistryError(f"{f.filename} has no member {want}")
                out[want] = zf.read(hit)
            return out
    except zipfile.BadZipFile as exc:
        raise RegistryError(f"{f.filename}: not a readable zip over range requests ({exc})") from None


def download(f: File) -> bytes:
    """A small file whole (a metapackage's wheel), checked against the index's sha256."""
    import hashlib
    with _open(f.url, f.filename) as r:
        body = r.read()
    if hashlib.sha256(body).hexdigest() != f.sha256:
        raise RegistryError(f"{f.filename}: its bytes do not have the sha256 the index gives")
    return body
