"""Child processes that stop with the run: the one place the pipeline starts tools.

Every child gets its own process group, so that an interrupt stops the compiler
together with what it started (cc1plus, as, ld) and a terminal's Ctrl-C reaches
only us: we decide what stops and what is cleaned up, then say so truthfully.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Callable

from . import stop
from .progress import debug
from .stop import stop_if_cancelled

_children: set[subprocess.Popen] = set()
_guard = threading.RLock()  # re-entrant: the signal handler (cancel) may run while the main thread holds it


def cancel() -> None:
    """Stop the run: no new child starts, every running child's group gets SIGTERM."""
    stop.request()
    with _guard:
        running = list(_children)
    for p in running:
        try:
            if p.pid == os.getpgid(p.pid):  # its own group (proc.run's children but the foreground ones)
                os.killpg(p.pid, signal.SIGTERM)
            else:
                p.terminate()
        except ProcessLookupError:
            pass


def run(cmd: list[str], *, capture_output: bool = False, text: bool = False, check: bool = False,
        env: dict | None = None, cwd=None, timeout: float | None = None,
        on_line: Callable[[str], None] | None = None, input: str | bytes | None = None, stdin=None,
        foreground: bool = False, cleanup: bool = False) -> subprocess.CompletedProcess:
    """subprocess.run's contract (the subset we use), stopped by cancel().

    on_line: stdout is read line by line (text) and each line handed over as it comes,
    e.g. pip's progress; the full text is still returned.
    input, stdin: as subprocess.run's.
    foreground: the child stays in our process group, with the terminal (twine may ask for a password there);
    cancel() still stops it.
    cleanup: runs even when the run is stopped (removing what a stopped step left).
    """
    if on_line is not None and input is not None:
        raise ValueError("proc.run: on_line and input together are not supported")
    debug("$ " + " ".join(map(str, cmd)))
    pipe = subprocess.PIPE if (capture_output or on_line) else None
    with _guard:  # checked under the guard: cancel() either sees this child or stops it from starting
        if not cleanup:
            stop_if_cancelled()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else stdin, stdout=pipe,
                             stderr=subprocess.PIPE if capture_output else None, text=text or bool(on_line), env=env,
                             cwd=cwd, start_new_session=not foreground)
        _children.add(p)
    try:
        if on_line is not None:
            err_box: list = []
            reader = None
            if capture_output:  # drain stderr beside stdout so neither pipe fills up
                reader = threading.Thread(target=lambda: err_box.append(p.stderr.read()), daemon=True)
                reader.start()
            lines = []
            for line in p.stdout:
                lines.append(line)
                on_line(line.rstrip("\n"))
            p.wait(timeout)
            if reader:
                reader.join()
            out, err = "".join(lines), (err_box[0] if err_box else None)
        else:
            out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        if foreground:
            p.kill()
        else:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    finally:
        with _guard:
            _children.discard(p)
    if not cleanup:
        stop_if_cancelled()
    result = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check:
        result.check_returncode()
    return result
