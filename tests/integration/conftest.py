"""The integration tier's fixtures: the pipeline's cache, a real cp311 build and the wheels beside it, the suite's
independent second build, torch venvs, the published post1, compiler sentinels, an upload server, emulation. Out of
tests/unit's scope: a unit test cannot ask for them."""
from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from oeq_wheels import build, debian, pins as pins_mod, driver_stub
from oeq_wheels.files import default_cache, locked
from oeq_wheels.output import extra_dir
from support.builds import (finish, hidden, oeq_wheel_of, private_cache, processes_of,
                            wait_for, wheels_in)
from support.capabilities import unavailable
from support.cli import start_cli
from support.uploads import upload_server as serving_uploads
from support.venvs import consumer_venv, overlay


@pytest.fixture
def emulation():
    """qemu-user and Debian's arm64 root file systems: brought up by the tests themselves where root (or a
    password-free sudo) can install them; elsewhere these tests are skipped by name, or fail where required."""
    arch = pins_mod.load().arches["aarch64"]
    if debian.as_root() is None and not shutil.which(arch.qemu):
        unavailable("emulation", f"{arch.qemu} is missing and installing qemu-user-static and debootstrap needs root "
                                 "(the test command installs them as root)")
    return arch


@pytest.fixture(scope="session")
def cache() -> Path:
    return default_cache()


@pytest.fixture(scope="session")
def cp311_wheel(tmp_path_factory, cache) -> Path:
    """The wheel for CPython 3.11 (the same run builds the OEq line's cp311 wheels: x86_64 and, cross-compiled,
    aarch64), with the pipeline's own cache: the objects `make wheels` left, else compiled
    there. The suite's real compile in an empty object cache is resumed_build (below), held byte-identical
    to this one by test_interrupts.py."""
    out = tmp_path_factory.mktemp("wheels") / "dist"
    # One worker at a time (all share the session's base folder): the first compiles what the cache lacks, the
    # others wait and then only link, instead of compiling the same objects at once on the same cores.
    with locked(tmp_path_factory.getbasetemp().parent / "cp311-build"):
        rows, failures = build.run(build.Options(out, ["3.11"], cache=cache))
    assert not failures, failures
    pins = pins_mod.load()
    assert len(rows) == len(pins.ext_variants) + len(pins.oeq_lines)  # a wheel of each architecture's build
    (whl,) = out.glob("*.whl")
    return whl


@pytest.fixture(scope="session")
def resumed_build(tmp_path_factory, cache):
    """The suite's one independent second build: the cp311 set (every line and architecture) in an object cache of
    its own, stopped with SIGTERM while the compilers run, then run again to the end. Records what the interrupt
    left (for the interrupt test); returns the finished OUTDIR (for the reproducibility test), those facts and its
    cache, whose objects are the cp311 ones alone (test_build's failing-CPython build starts from them).
    Its input trees are its own, linked from the shared member and stub stores (nothing fetched or stored again);
    that members and whole files give the same wheels is tests/unit/test_members.py's (and bench/run.py --fetch-equal's)."""
    root = tmp_path_factory.mktemp("resumed")
    c = private_cache(root / "cache", cache, share=("downloads", "members", "stubs", "buildroot"))
    out, tmp = root / "dist", root / "tmp"
    p = start_cli(["build", out, "--python", "3.11", "--runner", "host"], c, tmp)
    seen = wait_for(p, r"\[cp311\] compile +started")
    # Stopped once a compiler is at work (waited for, not timed: a loaded machine starts it later).
    deadline = time.monotonic() + 300
    running = processes_of(tmp, but=p.pid)
    while not any("cc1plus" in c for c in running) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
        running = processes_of(tmp, but=p.pid)
    p.send_signal(signal.SIGTERM)
    rc, err = finish(p, seen)
    facts = dict(running=running, rc=rc, err=err, left=processes_of(tmp), wheels=wheels_in(out),
                 hidden=hidden(out, extra_dir(out), c / "objects"), tmp=list(tmp.iterdir()))
    # The next run uses what the interrupted one left.
    p = start_cli(["build", out, "--python", "3.11", "--runner", "host", "-q"], c, tmp)
    facts["resumed"] = finish(p, [])
    return out, facts, c


@pytest.fixture(scope="session")
def cp311_oeq_wheel(cp311_wheel) -> Path:
    """The binary openequivariance wheel for CPython 3.11 (x86_64; every CUDA torch), built beside cp311_wheel."""
    return oeq_wheel_of(cp311_wheel.parent, pins_mod.load().oeq_binary.name)


def x86_64_oeq_wheel(tmp_path_factory, cache, python: str) -> Path:
    """The OEq line's x86_64 wheel of one CPython, built with its aarch64 wheel beside it."""
    out = tmp_path_factory.mktemp(f"py{python}") / "dist"
    with locked(tmp_path_factory.getbasetemp().parent / "cp311-build"):  # one build at a time, as cp311_wheel
        rows, failures = build.run(build.Options(out, [python], cache=cache, arches=["x86_64"]))
    assert not failures, failures
    return oeq_wheel_of(out, pins_mod.load().oeq_binary.name)


@pytest.fixture(scope="session")
def abi3_oeq_wheel(tmp_path_factory, cache) -> Path:
    """The OEq line's stable-ABI x86_64 wheel (cp312-abi3: CPython 3.12 and every later one)."""
    return x86_64_oeq_wheel(tmp_path_factory, cache, "3.12")


@pytest.fixture(scope="session")
def ft_oeq_wheel(tmp_path_factory, cache) -> Path:
    """The OEq line's free-threaded x86_64 wheel (cp314-cp314t)."""
    return x86_64_oeq_wheel(tmp_path_factory, cache, "3.14t")


@pytest.fixture(scope="session")
def cp311_oeq_aarch64_wheel(cp311_wheel) -> Path:
    """The OEq line's aarch64 wheel for CPython 3.11, cross-compiled beside cp311_wheel."""
    return oeq_wheel_of(cp311_wheel.parent, pins_mod.load().oeq_binary.name, "aarch64")


@pytest.fixture(scope="session")
def oeq_ops(cache) -> list[str]:
    """Every operator OEq registers under torch.ops.libtorch_tp_jit, read from the pinned sdist's C++ sources
    (tests/support/oeq_operators.py): what a load must register, exactly."""
    from oeq_wheels.inputs import fetch
    from support import oeq_operators
    pin = pins_mod.load().oeq
    ops = oeq_operators.from_sdist(fetch.ensure([pin], cache)[pin.file])
    assert ops, f"no {oeq_operators.NAMESPACE} operator found in {pin.file}'s sources"
    return ops


@pytest.fixture(scope="session")
def torch_base(cache) -> Path:
    """The cached venv with the release matrix's torch for CPython 3.11; never installed into (see torch_venv)."""
    from oeq_wheels.checks import venvs
    return venvs.torch_venv(pins_mod.load(), cache)


@pytest.fixture
def torch_venv(torch_base, tmp_path) -> Path:
    """This test's own venv over torch_base: what it installs stays in tmp_path."""
    return overlay(torch_base, tmp_path / "torch-venv")


@pytest.fixture(scope="session")
def libcuda_stub(tmp_path_factory, cp311_wheel) -> Path:
    """A directory with a stub libcuda.so.1 made from the shipped library's own driver symbols."""
    import zipfile
    d = tmp_path_factory.mktemp("stub")
    with zipfile.ZipFile(cp311_wheel) as zf:
        lib = d / "lib.so"
        lib.write_bytes(zf.read("fastmace_oeq_ext/libtorch_tp_jit.so"))
    return driver_stub.stub_for_library(lib, d / "lib").parent


@pytest.fixture(scope="session")
def oeq_stack(torch_base, cp311_wheel, tmp_path_factory, cache) -> Path:
    """A venv over torch_base with OpenEquivariance's Python package, its dependencies and the cp311
    wheel, made once a session; tests use oeq_venv, their own copy of what it adds."""
    from oeq_wheels.checks import venvs
    venv = overlay(torch_base, tmp_path_factory.mktemp("oeq-stack") / "venv")
    venvs.install_oeq_stack(venv, pins_mod.load(), cache, [cp311_wheel], tmp_path_factory.mktemp("oeqwheel"))
    return venv


@pytest.fixture
def oeq_venv(oeq_stack, tmp_path) -> Path:
    """oeq_stack as this test's own venv: what the test installs or removes stays in tmp_path."""
    return overlay(oeq_stack, tmp_path / "oeq-venv")


@pytest.fixture(scope="session")
def fastmace_base(cache) -> Path:
    """The cached venv: the matrix's torch as PyTorch's index serves it (consumer_torch) and FastMACE for CPython
    3.11; never installed into (see fastmace_venv)."""
    return consumer_venv(pins_mod.load(), cache)


@pytest.fixture
def fastmace_venv(fastmace_base, tmp_path) -> Path:
    """This test's own venv over fastmace_base."""
    return overlay(fastmace_base, tmp_path / "fastmace-venv")


@pytest.fixture(scope="session")
def cp311_plain_oeq(tmp_path_factory, cache) -> Path:
    """OpenEquivariance as a user's sdist build leaves it: the pinned version, no precompiled extension."""
    from oeq_wheels.oeq import wheel as oeqpy
    return oeqpy.build_pure(pins_mod.load(), tmp_path_factory.mktemp("plain-oeq"), cache)


@pytest.fixture
def sentinels(tmp_path) -> tuple[Path, Path]:
    """A bin directory whose g++, c++, ninja and nvcc log their call and fail; and the log."""
    from oeq_wheels.checks import sentinels as s
    log = tmp_path / "sentinel.log"
    return s.make(tmp_path / "sentinel-bin", log), log


@pytest.fixture(scope="session")
def post1_wheel(cache, tmp_path_factory):
    """The owner's published fastmace-oeq-ext (post1) for cp311: the real one, by pins.toml's sha256."""
    pin = pins_mod.load().consumer.published
    from oeq_wheels.inputs import fetch
    return fetch.ensure([pin], cache)[pin.file]


@pytest.fixture(scope="session")
def post1_manifest(post1_wheel) -> dict:
    """post1's own manifest.json: the torch and OEq it was built for, fixed whatever pins.toml's are."""
    import json
    import zipfile
    return json.loads(zipfile.ZipFile(post1_wheel).read("fastmace_oeq_ext/manifest.json"))


@pytest.fixture(scope="session")
def post1_torch(post1_manifest) -> str:
    """The torch post1 was built for, from its own manifest."""
    return post1_manifest["torch"]


@pytest.fixture
def upload_server(tmp_path):
    """pypiserver on loopback taking uploads (support/uploads.py): yields its root URL and its package directory."""
    with serving_uploads(tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def release_set(tmp_path_factory, cache):
    """The full pinned set, as `make wheels` builds it (per module: big_disk modules run one at a time)."""
    out = tmp_path_factory.mktemp("release") / "dist"
    rows, failures = build.run(build.Options(out, cache=cache))
    assert not failures, failures
    return out
