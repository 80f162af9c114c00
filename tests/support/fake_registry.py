"""A package registry on loopback for the tests: the JSON simple API (PEP 691) and files served with HTTP range
requests (or, as a bad host would, ignoring them). It counts the bytes each file sent."""
from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import zipfile
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from packaging.utils import canonicalize_name


def wheel_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class Registry:
    def __init__(self):
        self.files: dict[str, list[dict]] = {}   # project -> PEP 691 file entries
        self.bodies: dict[str, bytes] = {}       # file name -> bytes (listed-only files have none)
        self.sent: dict[str, int] = {}           # file name -> bytes sent
        self.honour_ranges = True

    def add(self, project: str, filename: str, body: bytes | None = None, sha256: str | None = None,
            size: int | None = None, yanked: bool = False) -> None:
        if body is not None:
            self.bodies[filename] = body
        entry = {"filename": filename, "url": f"/files/{filename}",
                 "hashes": {"sha256": sha256 or hashlib.sha256(body or b"").hexdigest()},
                 "size": size if size is not None else len(body or b""), "yanked": yanked}
        self.files.setdefault(canonicalize_name(project), []).append(entry)

    @contextmanager
    def serve(self):
        reg = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                m = re.fullmatch(r"/simple/([^/]+)/", self.path)
                if m:
                    name = canonicalize_name(m.group(1))
                    if name not in reg.files:
                        return self.send_error(404)
                    body = json.dumps({"meta": {"api-version": "1.1"}, "name": name,
                                       "files": reg.files[name]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    return self.wfile.write(body)
                m = re.fullmatch(r"/files/(.+)", self.path)
                if not m or m.group(1) not in reg.bodies:
                    return self.send_error(404)
                data = reg.bodies[m.group(1)]
                rng = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if rng and reg.honour_ranges:
                    a, b = int(rng.group(1)), min(int(rng.group(2)), len(data) - 1)
                    part = data[a:b + 1]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
                else:
                    part = data
                    self.send_response(200)
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                reg.sent[m.group(1)] = reg.sent.get(m.group(1), 0) + len(part)
                self.wfile.write(part)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        t = threading.Thread(target=server.serve_forever, daemon=True)
        t.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
        finally:
            server.shutdown()
            server.server_close()
