"""The run's stop flag: set once by SIGINT/SIGTERM, checked before any new tool, stage or write.

Its own module so that the layers stay one-way: proc (children) and progress (stages) both
read it, and progress never imports proc.
"""
from __future__ import annotations

import threading

from .errors import Interrupted


_stopped = threading.Event()


def request() -> None:
    _stopped.set()


def requested() -> bool:
    return _stopped.is_set()


def stop_if_cancelled() -> None:
    """Raise Interrupted once the run is being stopped (call before anything is written)."""
    if _stopped.is_set():
        raise Interrupted("interrupted")
