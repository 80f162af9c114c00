"""Progress a person can follow: stage start and end lines, a heartbeat, the closing table.

All of it goes to stderr (stdout stays for results). -q keeps only warnings and
errors; -v adds every command the pipeline starts.
"""
from __future__ import annotations

import sys
import threading
import time

from .stop import stop_if_cancelled

QUIET, NORMAL, VERBOSE = 0, 1, 2
HEARTBEAT_S = 15.0

_lock = threading.Lock()
_level = NORMAL


def set_level(level: int) -> None:
    global _level
    _level = level


def _emit(msg: str) -> None:
    with _lock:
        print(msg, file=sys.stderr, flush=True)


def say(msg: str) -> None:
    """A progress line (hidden by -q)."""
    if _level >= NORMAL:
        _emit(msg)


def warn(msg: str) -> None:
    """A line that matters even with -q."""
    _emit(msg)


def debug(msg: str) -> None:
    """Shown with -v only."""
    if _level >= VERBOSE:
        _emit(msg)


class _Heartbeat:
    """One thread; when nothing was printed about the running stages for HEARTBEAT_S, one line names them all."""

    def __init__(self):
        self.active: dict[int, "Stage"] = {}
        self.guard = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, st: "Stage") -> None:
        with self.guard:
            self.active[id(st)] = st
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="oeq-wheels-heartbeat", daemon=True)
                self.thread.start()

    def remove(self, st: "Stage") -> None:
        with self.guard:
            self.active.pop(id(st), None)

    def _loop(self) -> None:
        while True:
            time.sleep(1.0)
            now = time.monotonic()
            with self.guard:
                running = sorted(self.active.values(), key=lambda s: s.t0)
                if not running or now - max(s.last_beat for s in running) < HEARTBEAT_S:
                    continue
                for s in running:
                    s.last_beat = now
            parts = []
            for s in running:
                detail = s.detail() if s.detail else ""
                parts.append(f"[{s.who}] {s.stage} {now - s.t0:.0f}s{(' (' + detail + ')') if detail else ''}")
            say("still running: " + ", ".join(parts))


_heartbeat = _Heartbeat()


class Stage:
    """`with Stage("cp312", "compile"):` prints a line when the stage starts and one when it ends.

    A stage still running after HEARTBEAT_S says so every HEARTBEAT_S; `detail`, a
    callable, adds what it is doing (e.g. download sizes and rates).
    """

    def __init__(self, who: str, stage: str, timings: dict | None = None, detail=None):
        self.who, self.stage, self.timings, self.note, self.detail = who, stage, timings, "", detail

    def __enter__(self):
        stop_if_cancelled()  # a stopped run starts no new stage
        self.t0 = self.last_beat = time.monotonic()
        say(f"[{self.who}] {self.stage:<8} started")
        _heartbeat.add(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _heartbeat.remove(self)
        dt = time.monotonic() - self.t0
        if self.timings is not None:
            self.timings[self.stage] = round(dt, 2)
        status = ("stopped" if exc_type.__name__ == "Interrupted" else "FAILED") if exc_type else "ok"
        line = f"[{self.who}] {self.stage:<8} {status} {dt:6.1f}s{('  ' + self.note) if self.note else ''}"
        (warn if exc_type else say)(line)
        return False


def table(rows: list[dict]) -> str:
    head = ("wheel", "tag", "size", "sha256")
    data = [(r["wheel"], r["tag"], f"{r['size'] / 1024:.0f} KiB", r["sha256"]) for r in rows]
    widths = [max(len(h), *(len(d[i]) for d in data)) if data else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(d) for d in data])
