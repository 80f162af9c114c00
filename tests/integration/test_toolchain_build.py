"""A g++ that is not the pinned one first on PATH: the pinned toolchain builds the recorded bytes anyway."""
import os


from support.cli import run_cli
from oeq_wheels.release import recorded


def test_a_different_compiler_first_on_path_still_gives_the_recorded_bytes(tmp_path, cache, cp311_wheel):
    """A g++ that says another version and compiles differently (-O0), first on PATH and as CXX: the pinned
    toolchain builds anyway, so the cp311 wheels are docs/validation.md's; --toolchain host takes it, and says so."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("g++", "c++"):
        (fake / tool).write_text('#!/bin/sh\ncase "$1" in --version) echo "g++ (Other) 99.0.0"; exit 0;; esac\n'
                                 'exec /usr/bin/g++ -O0 "$@"\n')
        (fake / tool).chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "CXX": str(fake / "g++"), "OEQ_WHEELS_CACHE": str(cache)}
    out = tmp_path / "dist"
    r = run_cli("build", str(out), "--python", "3.11", "--runner", "host", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CXX ignored" in r.stderr and "the pinned build root" in r.stderr
    built = sorted(out.glob("*.whl")) + sorted((tmp_path / "dist-extra").glob("*.whl"))
    assert len(built) == 4 and recorded.load().problems(built) == []  # fastmace-oeq-ext and its twin; OEq x86_64, aarch64
    r = run_cli("build", str(tmp_path / "host"), "--python", "3.11", "--arch", "x86_64", "--runner", "host",
                "--toolchain", "host", env=env)
    assert "--toolchain host: this host's compilers, not the pinned toolchain" in r.stderr
    assert "g++ (Other) 99.0.0" in r.stderr
