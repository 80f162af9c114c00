"""bench/ is run by hand (docs/benchmarks.md), so nothing else notices when a call it makes stops fitting the
pipeline: here every bench module is imported, and bench/run.py's planning runs without building or downloading:
the release's wheels and inputs (build.plan, offline), and its floor's compiler runs (build.compiles needs the
unpacked trees: it, the fetch, the compilers and the CPythons are stand-ins that accept only the calls the real
functions accept)."""
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from oeq_wheels import build, pins as P, product, toolchain as tc
from oeq_wheels.inputs import fetch, pythons

REPO = Path(__file__).resolve().parents[2]
BENCH = sorted((REPO / "bench").glob("*.py"))


def bench_module(path: Path, monkeypatch):
    """A bench module imported from its file, as `python bench/run.py` finds its neighbours (bench/ on sys.path)."""
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def stand_in(real, fake):
    """fake, called only as real can be called (a changed signature fails the call, as it would fail bench)."""
    signature = inspect.signature(real)

    def call(*args, **kwargs):
        signature.bind(*args, **kwargs)
        return fake(*args, **kwargs)
    return call


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_every_bench_module_imports(path, monkeypatch):
    assert bench_module(path, monkeypatch).__doc__


def test_the_release_plan_is_every_wheel_and_input_of_the_pins(monkeypatch):
    run = bench_module(REPO / "bench" / "run.py", monkeypatch)
    pins = P.load()
    plan = run.release_plan(pins)
    want = [f"{pins.package_name} {P.cp_tag(v)}" for v in pins.matrix.pythons]
    want += [f"openequivariance {l.key} {P.cp_tag(v)}" for l in pins.oeq_lines for v in l.pythons]
    assert plan.wheels == want
    assert set(plan.inputs) == set(pins.all_inputs([P.cp_tag(v) for v in pins.matrix.pythons])
                                   + pins.oeq_binary_inputs())
    assert {part.arch for _product, parts in plan.parts for part in parts} == set(pins.arches)


def test_the_floor_runs_each_of_the_builds_compiles_by_its_bare_compiler(monkeypatch, tmp_path):
    run = bench_module(REPO / "bench" / "run.py", monkeypatch)
    pins = P.load()
    seen = {}
    monkeypatch.setattr(fetch, "ensure", stand_in(fetch.ensure, lambda items, cache, *a, **kw: {
        i.file: tmp_path / i.file for i in items}))
    monkeypatch.setattr(tc, "cross_toolchain", stand_in(tc.cross_toolchain, lambda arch: tc.Toolchain(
        f"{arch.name}-g++ -m", "gcc", "strip", "GCC")))
    monkeypatch.setattr(build, "interpreters", stand_in(build.interpreters, lambda pins_, wanted, cache, *a: {
        v: pythons.Interpreter(v, f"{v}.0", "python", f"/include/{v}") for v in wanted}))

    def compiles(work, plan, interps):
        seen.update(work=work, plan=plan, interps=interps)
        objects = work.objects_for("aarch64")
        return [product.Compile(objects, Path("/src/a.cpp"), ["-O3"]), product.Compile(objects, Path("/src/b.cpp"), [])]
    monkeypatch.setattr(build, "compiles", stand_in(build.compiles, compiles))
    cmds = run.floor_commands(pins, tmp_path / "cache", tmp_path)
    assert cmds == [["aarch64-g++", "-m", "-c", "/src/a.cpp", "-o", str(tmp_path / "0-a.o"), "-O3"],
                    ["aarch64-g++", "-m", "-c", "/src/b.cpp", "-o", str(tmp_path / "1-b.o")]]
    # the floor compiles what the release build would: its plan, every pinned CPython, every architecture
    assert seen["plan"].wheels == run.release_plan(pins).wheels and set(seen["interps"]) == set(pins.pythons)
    assert set(seen["work"].toolchains) == set(pins.arches)


class FakeProduct:
    """Two parts on two architectures; each compile names its part, its Python and its source."""

    NAME = "fake"

    def __init__(self):
        self.calls = []

    def common(self, work, parts):
        self.calls.append(("common", [p.key for p in parts]))
        return "shared"

    def trees(self, work, part):
        self.calls.append(("trees", part.key))
        return f"tree-{part.key}"

    def setup(self, work, part, trees):
        assert work.unpacked[self.NAME] == "shared"
        return (part, trees)

    def compiles(self, work, ready, interp):
        part, _trees = ready
        objects = work.objects_for(part.arch)
        if interp is None:
            return [product.Compile(objects, Path(f"{part.key}-prep.cpp"), [])]
        # the same object for every part of one architecture (as nanobind's), and one of the part and Python's own
        return [product.Compile(objects, Path("shared.cpp"), [interp.version]),
                product.Compile(objects, Path(f"{part.key}.cpp"), [interp.version])]


def test_build_compiles_lists_each_compiler_run_once_in_build_order(tmp_path):
    """As the object cache compiles the same source, flags and compiler once: the floor runs it once."""
    fake = FakeProduct()
    parts = (product.Part("a", "x86_64", (product.Wheel("fake a 3.11", "3.11"), product.Wheel("fake a 3.12", "3.12")),
                          "a"),
             product.Part("b", "x86_64", (product.Wheel("fake b 3.11", "3.11"),), "b", prepared=True),
             product.Part("c", "aarch64", (product.Wheel("fake c 3.11", "3.11"),), "c"))
    pins = P.load()
    plan = build.Plan(pins, ["3.11", "3.12"], ((fake, parts),))
    toolchains = {a: tc.Toolchain(f"{a}-g++", "gcc", "strip", "GCC") for a in ("x86_64", "aarch64")}
    work = product.Run(pins, tmp_path, {}, toolchains, tc.ObjectCache(tmp_path / "o", toolchains["x86_64"], 1), 1,
                       tmp_path / "out", False)
    interps = {v: pythons.Interpreter(v, f"{v}.0", "python", "/include") for v in ("3.11", "3.12")}
    got = [(c.objects.toolchain.cxx, c.source.name, c.flags) for c in build.compiles(work, plan, interps)]
    assert got == [("x86_64-g++", "a-prep.cpp", []), ("x86_64-g++", "shared.cpp", ["3.11"]),
                   ("x86_64-g++", "a.cpp", ["3.11"]), ("x86_64-g++", "shared.cpp", ["3.12"]),
                   ("x86_64-g++", "a.cpp", ["3.12"]), ("x86_64-g++", "b-prep.cpp", []), ("x86_64-g++", "b.cpp", ["3.11"]),
                   ("aarch64-g++", "c-prep.cpp", []), ("aarch64-g++", "shared.cpp", ["3.11"]),
                   ("aarch64-g++", "c.cpp", ["3.11"])]
    assert fake.calls == [("common", ["a", "b", "c"]), ("trees", "a"), ("trees", "b"), ("trees", "c")]
