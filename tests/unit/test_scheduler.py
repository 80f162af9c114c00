"""build.run's scheduling over the product protocol, with stand-in products (nothing compiled or fetched): the trees
of the parts with a preparation are made first, one at a time, in the background; a part's preparation runs once
its trees are there and only if it has wheels; a failed preparation fails each of its wheels, a failed wheel only
itself; what the preparations leave is removed when the run ends; the report lists every failure."""
import threading
from pathlib import Path

import pytest

from oeq_wheels import build, product, toolchain as tc
from oeq_wheels.errors import BuildError
from oeq_wheels.inputs import fetch, pythons


class Fake:
    """A product whose parts are given; it records what the scheduler asks of it."""

    def __init__(self, name, parts, log, fail_prepare=(), fail_build=()):
        self.NAME, self._parts, self.log = name, parts, log
        self.fail_prepare, self.fail_build = fail_prepare, fail_build

    def parts(self, pins, wanted, arches):
        return [p for p in self._parts if p.arch in arches]

    def inputs(self, pins, parts):
        return []

    def common(self, work, parts):
        self.log.append(("common", self.NAME))
        return self.NAME

    def trees(self, work, part):
        self.log.append(("trees", part.key, threading.current_thread().name.startswith("trees")))
        return f"tree-{part.key}"

    def setup(self, work, part, trees):
        assert trees == f"tree-{part.key}" and work.unpacked[self.NAME] == self.NAME
        return part

    def prepare(self, work, part):
        self.log.append(("prepare", part.key))
        work.later.callback(self.log.append, ("removed", part.key))
        if part.key in self.fail_prepare:
            raise BuildError(f"{part.key}'s preparation failed")

    def build(self, work, part, interp):
        if (part.key, interp.version) in self.fail_build:
            raise BuildError(f"{part.key} {interp.version} failed")
        self.log.append(("build", part.key, interp.version))
        return [{"wheel": f"{self.NAME}-1.0-{interp.cp_tag}-{interp.cp_tag}-linux_{part.arch}.whl", "tag": "t",
                 "size": 1, "sha256": "0" * 64, "timings": {}, "python": interp.full_version}]

    def compiles(self, work, ready, interp):
        return []


def wheels(key, *versions, name="fake"):
    return tuple(product.Wheel(f"{name} {key} {v}", v) for v in versions)


@pytest.fixture
def stand_ins(monkeypatch, tmp_path):
    toolchain = tc.Toolchain("g++", "gcc", "strip", "GCC 0")
    monkeypatch.setattr(build, "toolchain_maker", lambda pins, mode, cache: (lambda arch: toolchain, "stand-in"))
    monkeypatch.setattr(build, "interpreters", lambda pins, wanted, cache, mode="pinned": {
        v: pythons.Interpreter(v, f"{v}.0", "python", "/include") for v in wanted})
    monkeypatch.setattr(fetch, "ensure", lambda items, cache, *a, **kw: {})
    return tmp_path


def test_the_order_the_failures_and_the_cleanup(stand_ins, monkeypatch):
    log = []
    first = Fake("first", [product.Part("a", "x86_64", wheels("a", "3.11", "3.12", name="first"), "a"),
                           product.Part("b", "x86_64", wheels("b", "3.12", name="first"), "b")], log,
                 fail_build=[("b", "3.12")])
    second = Fake("second", [product.Part("l1", "x86_64", wheels("l1", "3.11", name="second"), "l1", prepared=True),
                             product.Part("l2", "x86_64", wheels("l2", "3.11", name="second"), "l2", prepared=True),
                             product.Part("l3", "x86_64", (), "l3", prepared=True),
                             product.Part("l4", "aarch64", wheels("l4", "3.11", name="second"), "l4", prepared=True)],
                  log, fail_prepare=["l2"])
    monkeypatch.setattr(build, "PRODUCTS", (first, second))
    rows, failures = build.run(build.Options(stand_ins / "out", ["3.11", "3.12"], cache=stand_ins / "cache",
                                             arches=["x86_64"]))
    assert [e for e in log if e[0] == "common"] == [("common", "first"), ("common", "second")]
    # the prepared parts' trees first (the compilers start on them), then the others; all in the background
    assert [e for e in log if e[0] == "trees"] == [("trees", k, True) for k in ("l1", "l2", "l3", "a", "b")]
    assert [e for e in log if e[0] == "prepare"] == [("prepare", "l1"), ("prepare", "l2")]  # l3: no wheel
    assert sorted(e for e in log if e[0] == "build") == [("build", "a", "3.11"), ("build", "a", "3.12"),
                                                          ("build", "l1", "3.11")]
    assert failures == {"second l2 3.11": "l2's preparation failed", "first b 3.12": "b 3.12 failed"}
    assert [r["wheel"] for r in rows] == sorted(r["wheel"] for r in rows) and len(rows) == 3
    assert log[-2:] == [("removed", "l2"), ("removed", "l1")]  # after every wheel, when the run ends
    report = (stand_ins / "out-extra" / "REPORT-failed.md").read_text()
    assert "first b 3.12: FAILED" in report and "second l2 3.11: FAILED" in report


def test_a_run_without_failures_writes_the_report(stand_ins, monkeypatch):
    log = []
    monkeypatch.setattr(build, "PRODUCTS", (Fake("only", [product.Part("a", "x86_64", wheels("a", "3.11"), "a")],
                                                 log),))
    rows, failures = build.run(build.Options(stand_ins / "out", ["3.11"], cache=stand_ins / "cache",
                                             arches=["x86_64"]))
    assert not failures and [r["wheel"] for r in rows] == ["only-1.0-cp311-cp311-linux_x86_64.whl"]
    assert (stand_ins / "out-extra" / "REPORT.md").is_file()
    assert not Path(stand_ins / "out-extra" / "REPORT-failed.md").exists()
