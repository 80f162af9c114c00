"""Progress lines while a build runs, and the closing table."""
from __future__ import annotations

import sys
import threading
import time

_lock = threading.Lock()


def say(msg: str) -> None:
    with _lock:
        print(msg, file=sys.stderr, flush=True)


class Stage:
    """`with Stage("cp312", "compile"):` prints one line with the elapsed seconds."""

    def __init__(self, who: str, stage: str, timings: dict | None = None):
        self.who, self.stage, self.timings, self.note = who, stage, timings, ""

    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb):
        dt = time.monotonic() - self.t0
        if self.timings is not None:
            self.timings[self.stage] = round(dt, 2)
        status = "FAILED" if exc_type else "ok"
        say(f"[{self.who}] {self.stage:<8} {status} {dt:6.1f}s{('  ' + self.note) if self.note else ''}")
        return False


def table(rows: list[dict]) -> str:
    head = ("wheel", "tag", "size", "sha256")
    data = [(r["wheel"], r["tag"], f"{r['size'] / 1024:.0f} KiB", r["sha256"]) for r in rows]
    widths = [max(len(h), *(len(d[i]) for d in data)) if data else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(d) for d in data])
