"""Interrupts (SIGINT, SIGTERM at fetch, compile and pack) and builds running side by side.

Each interrupted run must stop every tool it started, leave no wheel that it does not
name, no temporary file or tree, no partial download, and a cache the next run uses.
"""
import http.server
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from support.builds import finish, hidden, wait_for, wheels_in
from support.cli import start_cli as cli
from oeq_wheels import pins as P
from oeq_wheels.inputs import fetch
from oeq_wheels.output import extra_dir


def interrupted_truthfully(rc: int, err: str, out: Path, signame: str, left: set[str] | None = None) -> None:
    """The run said it was interrupted and named exactly the wheels it left (`left`: as seen right after it, where
    out has changed since)."""
    assert rc == 130, err[-3000:]
    assert f"interrupted ({signame})" in err and "Traceback" not in err, err[-3000:]
    named = set(re.findall(r"[\w.+-]+\.whl", err.split("interrupted (")[-1]))
    left = wheels_in(out) if left is None else left
    assert left == named, (left, err[-2000:])  # what the CLI says stays is exactly what stays
    if not named:
        assert "no wheel was written by this run" in err


def test_sigterm_during_compile_stops_the_compilers_and_the_next_run_recovers(resumed_build, cp311_wheel,
                                                                             cp311_oeq_wheel):
    out, f, _ = resumed_build
    assert any("cc1plus" in c for c in f["running"]), f["running"]  # the compilers were at work
    interrupted_truthfully(f["rc"], f["err"], out, "SIGTERM", f["wheels"])
    assert f["left"] == []  # no compiler (nor its cc1plus, as) outlived the run
    assert not f["hidden"] and not f["tmp"]
    # The next run finished from what the interrupted one left, with the same bytes as an uninterrupted build.
    rc, err = f["resumed"]
    assert rc == 0, err[-3000:]
    assert (out / cp311_wheel.name).read_bytes() == cp311_wheel.read_bytes()
    assert (extra_dir(out) / cp311_oeq_wheel.name).read_bytes() == cp311_oeq_wheel.read_bytes()


def test_reproducible_two_builds_same_bytes(resumed_build, cp311_wheel, cp311_oeq_wheel, cp311_oeq_aarch64_wheel):
    """A second, independent build (other output directory, other object cache and input trees, later;
    resumed_build) is byte-identical: every line's wheel, the cross-compiled aarch64 one too, and its report names
    them."""
    again, f, _ = resumed_build
    assert f["resumed"][0] == 0, f["resumed"][1][-3000:]
    for first in (cp311_wheel, *extra_dir(cp311_wheel.parent).glob("*.whl")):
        second = (again if first.parent == cp311_wheel.parent else extra_dir(again)) / first.name
        assert second.read_bytes() == first.read_bytes(), first.name
    assert {cp311_oeq_wheel.name, cp311_oeq_aarch64_wheel.name} <= \
        {w.name for w in extra_dir(again).glob("*.whl")}
    report = (extra_dir(again) / "REPORT.md").read_text()
    assert cp311_wheel.name in report and cp311_oeq_wheel.name in report and P.load().oeq.sha256 in report


def test_sigint_at_pack_leaves_only_what_it_names(tmp_path, cache, cp311_wheel):
    out, tmp = tmp_path / "dist", tmp_path / "tmp"
    p = cli(["build", out, "--python", "3.11", "--runner", "host"], cache, tmp)
    seen = wait_for(p, r"\[cp311\] wheel +started")
    p.send_signal(signal.SIGINT)
    rc, err = finish(p, seen)
    interrupted_truthfully(rc, err, out, "SIGINT")
    assert not hidden(out, extra_dir(out)) and not list(tmp.iterdir())
    assert not (extra_dir(out) / "REPORT.md").exists()  # an interrupted build reports nothing as built


class SlowIndex(http.server.ThreadingHTTPServer):
    """A one-package index whose file comes slowly until `fast` is set."""

    def __init__(self, pin, data: bytes):
        self.pin, self.data = pin, data
        self.fast, self.started, self.aborted = threading.Event(), threading.Event(), threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        srv: SlowIndex = self.server
        name = srv.pin.name.lower().replace("_", "-")
        if self.path.rstrip("/") == f"/simple/{name}":
            body = f'<a href="/files/{srv.pin.file}#sha256={srv.pin.sha256}">{srv.pin.file}</a>'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == f"/files/{srv.pin.file}":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(srv.data)))
            self.end_headers()
            srv.started.set()
            try:
                for i in range(0, len(srv.data), 4096):
                    self.wfile.write(srv.data[i:i + 4096])
                    self.wfile.flush()
                    if not srv.fast.is_set():
                        time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                srv.aborted.set()
            return
        self.send_error(404)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_download_leaves_no_partial_file(tmp_path, cache, sig):
    pins = P.load()
    pin = pins.pybind11
    real = fetch.ensure([pin], cache, whole=True)
    c, tmp = tmp_path / "cache", tmp_path / "tmp"
    dl = c / "downloads"
    srv = SlowIndex(pin, real[pin.file].read_bytes())
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(PIP_INDEX_URL=f"http://127.0.0.1:{srv.server_address[1]}/simple/", PIP_CONFIG_FILE="/dev/null",
               PIP_NO_CACHE_DIR="1", PIP_FIND_LINKS="")
    try:
        p = cli(["fetch", "--python", "3.11", "--only", pin.name], c, tmp, **env)
        assert srv.started.wait(60), "the download never started"
        time.sleep(1)
        p.send_signal(sig)
        rc, err = finish(p, [])
        assert rc == 130 and f"interrupted ({sig.name})" in err, err[-3000:]
        assert srv.aborted.wait(10)  # pip was stopped mid-file, not left to finish
        assert not (dl / pin.file).exists() and not hidden(dl) and not list(tmp.iterdir())
        srv.fast.set()
        p = cli(["fetch", "--python", "3.11", "--only", pin.name], c, tmp, **env)
        rc, err = finish(p, [])
        assert rc == 0, err[-3000:]
        assert fetch.sha256_file(dl / pin.file) == pin.sha256
        assert [f.name for f in dl.glob("*.whl")] + [f.name for f in dl.glob("*.tar.gz")] == [pin.file]
    finally:
        srv.shutdown()


def test_parallel_builds_into_one_outdir(tmp_path, cache, cp311_wheel, cp311_oeq_wheel):
    out = tmp_path / "dist"
    for _round in range(2):
        ps = [cli(["build", out, "--python", "3.11", "--runner", "host", "-q"], cache, tmp_path / f"tmp{i}")
              for i in range(3)]
        for p in ps:
            rc, err = finish(p, [])
            assert rc == 0, err[-3000:]
    assert [w.name for w in out.glob("*.whl")] == [cp311_wheel.name]
    assert (out / cp311_wheel.name).read_bytes() == cp311_wheel.read_bytes()
    assert (extra_dir(out) / cp311_oeq_wheel.name).read_bytes() == cp311_oeq_wheel.read_bytes()
    assert not hidden(out, extra_dir(out))


def test_parallel_builds_never_replace_a_different_wheel(tmp_path, cache, cp311_wheel):
    out = tmp_path / "dist"
    out.mkdir()
    other = out / cp311_wheel.name
    other.write_bytes(b"a different wheel of the same name")
    extra_dir(out).mkdir()
    (extra_dir(out) / "REPORT.md").write_text("the report of the build that made the wheels here\n")
    ps = [cli(["build", out, "--python", "3.11", "--runner", "host", "-q"], cache, tmp_path / f"tmp{i}")
          for i in range(3)]
    for p in ps:
        rc, err = finish(p, [])
        assert rc == 1 and "already exists with different content" in err, err[-3000:]
        assert "Traceback" not in err
    assert other.read_bytes() == b"a different wheel of the same name"
    assert (extra_dir(out) / "REPORT.md").read_text() == "the report of the build that made the wheels here\n"
    assert "FAILED" in (extra_dir(out) / "REPORT-failed.md").read_text()
    assert not hidden(out, extra_dir(out))


@pytest.mark.parametrize("cxx, says", [("/nonexistent/g++", "does not run"), ("", "CXX is set but empty"),
                                       ("false", "does not run")])
def test_missing_or_broken_compiler_is_one_line(tmp_path, cache, cxx, says):
    p = cli(["build", tmp_path / "dist", "--python", "3.11", "--runner", "host", "--toolchain", "host"], cache,
            tmp_path / "tmp", CXX=cxx)
    rc, err = finish(p, [])
    assert rc == 1 and says in err and "Traceback" not in err, err
    assert len([l for l in err.splitlines() if l.startswith("oeq-wheels: error")]) == 1
