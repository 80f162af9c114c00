"""build.sh's runner choice without an engine: what it refuses in one line, what it passes the container runner,
and which image it builds in (the real engines are tests/integration/test_container.py's)."""
import json
import os
import subprocess
import sys

import pytest

from support import REPO

BUILD = str(REPO / "tools/release/oeq_wheels/build.sh")


# The container builds x86_64 only, for time: the aarch64 cross build's bytes are proven by the host runner's
# (tests/integration/test_aarch64.py) and both runners use the same pinned packages (docs/validation.md: all of them in each engine).
X86 = ("--arch", "x86_64")


def test_runner_docker_without_engine_is_a_clear_error(tmp_path):
    env = dict(os.environ, DOCKER="/bin/false")
    r = subprocess.run([BUILD, "--runner", "docker", str(tmp_path / "out")], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "no working container engine" in r.stderr


def test_auto_falls_back_to_the_host_with_a_notice(tmp_path):
    env = dict(os.environ, DOCKER="/bin/false")
    (tmp_path / "file").write_text("")
    r = subprocess.run([BUILD, str(tmp_path / "file" / "out"), "--python", "3.11"], env=env, capture_output=True,
                       text=True)
    assert "building on this host" in r.stderr
    assert r.returncode == 2 and "cannot create output directory" in r.stderr  # then the host build's own check ran


@pytest.mark.parametrize("option, says", [(("--python", "3.99"), "Python 3.99 is not in matrix"),
                                          (("--arch", "riscv64"), "--arch riscv64: pins.toml builds for x86_64, aarch64")])
def test_bad_python_or_arch_is_refused_before_choosing_a_runner(tmp_path, option, says):
    env = dict(os.environ, DOCKER="/bin/false")
    r = subprocess.run([BUILD, "--runner", "docker", *option, str(tmp_path / "out")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    assert len(r.stderr.strip().splitlines()) == 1


def test_pull_errors_say_their_cause_in_a_few_words():
    from oeq_wheels.runner import pull_cause
    docker = ('Error response from daemon: Get "https://quay.io/v2/": dial tcp: lookup quay.io on 127.0.0.11:53: '
              'no such host')
    assert pull_cause(docker) == "quay.io: no such host"
    assert pull_cause("Error: initializing source docker://x:1: reading manifest 1 in x: manifest unknown") == \
        "manifest unknown"


@pytest.mark.parametrize("order", ["outdir-first", "outdir-last"])
def test_runner_receives_outdir_and_options_in_any_order(tmp_path, order):
    """The CLI parses once; the container runner gets OUTDIR first and canonical options (a fake runner records them)."""
    out = tmp_path / "out"
    opts = ["--python", "3.12,3.11", "--force", "--runner", "docker", "--jobs", "3"]
    argv = [str(out), *opts] if order == "outdir-first" else [*opts, str(out)]
    probe = (f"import sys, json; from oeq_wheels import cli, runner; runner._engine_answers = lambda: True; "
             f"runner.ensure_image = lambda *a: 'image'; "
             f"runner.exec_container = lambda a, n: print(json.dumps(a)) or sys.exit(0); "
             f"sys.exit(cli.main({['build', *argv]!r}))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=f"{REPO}:{REPO / 'runtime'}"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [str(out), "--python", "3.12,3.11", "--force", "--jobs", "3"]


def test_the_runner_builds_in_the_pinned_toolchains_image_unless_one_is_named(monkeypatch, capsys):
    """No OEQ_WHEELS_IMAGE: the build image of the pinned packages (made, not pulled); one that cannot be made is one
    line for --runner docker and a notice and this host for auto (bubblewrap runs the same packages here)."""
    from oeq_wheels import buildimage, runner
    from oeq_wheels.errors import UsageError
    monkeypatch.delenv("OEQ_WHEELS_IMAGE", raising=False)
    monkeypatch.setattr(runner, "_engine_answers", lambda: True)
    made = []
    monkeypatch.setattr(buildimage, "ensure", lambda client, pins, cache, env=None: made.append(client) or "b:1")
    assert runner.choose("docker") == "b:1" and runner.choose("auto") == "b:1" and made == ["docker", "docker"]
    assert runner.choose("host") is None

    def cannot(*a, **k):
        raise buildimage.BuildImageError("making the build image needs root or password-free sudo (debootstrap, dpkg)")
    monkeypatch.setattr(buildimage, "ensure", cannot)
    with pytest.raises(UsageError) as exc:
        runner.choose("docker")
    assert str(exc.value) == ("the build image cannot be made for docker: making the build image needs root or "
                              "password-free sudo (debootstrap, dpkg); build with --runner host (the same toolchain, "
                              "through bubblewrap)")
    assert runner.choose("auto") is None and "building on this host instead (--runner host)" in capsys.readouterr().err
    monkeypatch.setenv("OEQ_WHEELS_IMAGE", "quay.io/pypa/manylinux_2_28_x86_64:x")  # named: pulled, never made
    monkeypatch.setattr(runner, "ensure_image", lambda name=None: name or runner.image())
    assert runner.choose("docker") == "quay.io/pypa/manylinux_2_28_x86_64:x"
