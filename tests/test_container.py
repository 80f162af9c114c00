"""The container runner, through a stand-in docker client (bubblewrap) on a machine with no engine."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO
from oeq_wheels import verify

pytestmark = pytest.mark.slow
BUILD = str(REPO / "tools/release/oeq_wheels/build.sh")
STANDIN = str(REPO / "tests/docker_standin/docker")


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    if not shutil.which("bwrap"):
        pytest.fail("bubblewrap is needed for the container tests: apt-get install bubblewrap")
    return tmp_path_factory.mktemp("standin")


def seeded_env(root: Path, cache: Path, work_volume: str) -> dict:
    """Environment for build.sh with the stand-in, its work volume holding the pinned downloads
    (as a volume does after an earlier run; nothing else carries over)."""
    dl = root / "volumes" / work_volume / "cache" / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    for f in (cache / "downloads").iterdir():
        if f.is_file() and not f.name.endswith(".verified") and not (dl / f.name).exists():
            try:
                os.link(f, dl / f.name)
            except OSError:  # another filesystem
                shutil.copy2(f, dl / f.name)
    return dict(os.environ, DOCKER=STANDIN, STANDIN_ROOT=str(root), OEQ_WHEELS_WORK_VOLUME=work_volume)


def git_status():
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True).stdout


def test_docker_runner_builds_the_same_wheel_as_the_host(standin, cache, cp311_wheel, tmp_path):
    before = git_status()
    env = seeded_env(standin, cache, "work-a")
    out = tmp_path / "out"
    # OUTDIR first, options after: the container runner finds OUTDIR wherever it stands.
    r = subprocess.run([BUILD, str(out), "--python", "3.11"], env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    image = [l for l in (REPO / "docker/IMAGE").read_text().splitlines() if not l.startswith("#")][0]
    assert f"image {image}" in r.stderr
    (whl,) = out.glob("*.whl")
    assert whl.name == cp311_wheel.name
    assert whl.read_bytes() == cp311_wheel.read_bytes()  # same bytes as the host runner's build
    from oeq_wheels.output import extra_dir
    (oeq,) = extra_dir(out).glob("openequivariance-*.whl")
    (host_oeq,) = extra_dir(cp311_wheel.parent).glob("openequivariance-*.whl")
    assert oeq.read_bytes() == host_oeq.read_bytes()
    v = verify.verify_wheel(whl)
    assert v.ok, v.problems
    assert not list(out.glob(".incoming*"))
    assert git_status() == before  # nothing written into the repository
    log = (standin / "runs" / "log").read_text()
    assert image in log and '"/' not in log.split('"volumes"')[1].split("]")[0]  # volumes only, no bind mounts


def test_failing_compile_in_container_leaves_no_wheel(standin, cache, tmp_path):
    env = seeded_env(standin, cache, "work-a")
    env["OEQ_WHEELS_CONTAINER_CXX"] = "g++ -include /nonexistent/forced-failure.h"
    out = tmp_path / "out"
    r = subprocess.run([BUILD, "--runner", "docker", "--python", "3.11", str(out)], env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode != 0
    assert "forced-failure.h" in r.stderr and "no wheel written" in r.stderr
    assert not list(out.glob("*.whl")) and not list(out.glob(".incoming*"))


def test_interrupt_stops_the_container_and_writes_nothing(standin, cache, tmp_path):
    env = seeded_env(standin, cache, "work-interrupt")  # no objects yet: the compile takes a while
    out = tmp_path / "out"
    p = subprocess.Popen([BUILD, "--python", "3.11", str(out)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    seen = ""
    while time.monotonic() < deadline:  # wait until the build runs inside the container
        line = p.stderr.readline()
        seen += line
        if "[all] unpack" in line or not line:
            break
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, seen + err
    assert "interrupted" in err
    assert not list(out.glob("*.whl")) and not list(out.glob(".incoming*"))
    assert not list((standin / "containers").glob("*"))
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "work-interrupt:/work" not in ps


def test_runner_docker_without_engine_is_a_clear_error(tmp_path):
    env = dict(os.environ, DOCKER="/bin/false")
    r = subprocess.run([BUILD, "--runner", "docker", str(tmp_path / "out")], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "no working container engine" in r.stderr


def test_auto_falls_back_to_the_host_with_a_notice(tmp_path):
    env = dict(os.environ, DOCKER="/bin/false")
    r = subprocess.run([BUILD, "--python", "3.99", str(tmp_path / "out")], env=env, capture_output=True, text=True)
    assert "building on this host" in r.stderr
    assert r.returncode == 2 and "3.99" in r.stderr  # then the host build's own check ran
