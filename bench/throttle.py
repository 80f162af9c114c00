"""A local HTTPS proxy (CONNECT tunnels) that holds every byte it passes to one shared rate: a user's slower line,
for bench/run.py --throttle. pip and urllib (the build's downloads and range requests) honour HTTPS_PROXY.
Standard library only; bytes in both directions count against the one budget, as on a real line."""
from __future__ import annotations

import select
import socket
import socketserver
import threading
import time


class _Budget:
    def __init__(self, bytes_per_second: float):
        self.rate, self.next, self.lock, self.passed = bytes_per_second, time.monotonic(), threading.Lock(), 0

    def take(self, n: int) -> None:
        """Wait until n more bytes fit the rate (all tunnels together)."""
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + n / self.rate
            self.passed += n
        if start > now:
            time.sleep(start - now)


class _Tunnel(socketserver.BaseRequestHandler):
    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode()
        method, target, _ = line.split(" ", 2)
        if method != "CONNECT":
            self.request.sendall(b"HTTP/1.1 405 CONNECT only\r\n\r\n")
            return
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)), timeout=60)
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        budget, ends = self.server.budget, [self.request, upstream]
        try:
            while True:
                ready, _, _ = select.select(ends, [], [], 120)
                if not ready:
                    return
                for s in ready:
                    data = s.recv(16384)
                    if not data:
                        return
                    budget.take(len(data))
                    (upstream if s is self.request else self.request).sendall(data)
        except OSError:  # either end hung up: the tunnel ends
            return
        finally:
            upstream.close()


class Throttle(socketserver.ThreadingTCPServer):
    """with Throttle(mbit) as url: ... (url for HTTPS_PROXY)."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mbit_per_second: float):
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.budget = _Budget(mbit_per_second * 1e6 / 8)

    def __enter__(self) -> str:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
