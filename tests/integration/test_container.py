"""The container runner against real engines: Debian's dockerd (the test command's own, on a private
socket) and podman, with the build image of the pinned toolchain (oeq_wheels/buildimage.py, which the runner makes
and imports), so that its wheels equal the host runner's: the released bytes."""
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from support import REPO
from support.capabilities import build_image, unavailable
from oeq_wheels import debian
from oeq_wheels.inputs import members
from oeq_wheels.ext.gate import verify_wheel
from oeq_wheels.output import extra_dir

pytestmark = pytest.mark.engines  # tools/ci/test.sh brings its engines up for these files

BUILD = str(REPO / "tools/release/oeq_wheels/build.sh")
REAL = os.environ.get("OEQ_WHEELS_TEST_ENGINE")  # docker: the engine `docker` reaches; private: test.sh's own


ENGINES = ("docker", "podman")  # always collected: an engine that is not up is a named SKIPPED or a FAILURE


def engine_state(kind: str) -> str:
    """What the test command (tools/ci/engine.sh) says of an engine: up, skip: WHY or fail: WHY."""
    return os.environ.get(f"OEQ_WHEELS_ENGINE_{kind.upper()}", "skip: not started: run the tests through the "
                                                                "test command (make test, tools/ci/test.sh)")


def require_engine(kind: str) -> None:
    """An engine that is not up: a SKIPPED naming why, or a FAILURE where engines are required (the test command's
    default as root with apt-get, where it could have brought them up)."""
    state = engine_state(kind)
    if state != "up":
        unavailable("engines", f"container engine {kind}: {state}")


class Engine:
    """One engine for a module: its client, the image, and the work volume every build reuses."""

    def __init__(self, kind, cache):
        self.kind = kind
        self.client = "docker" if kind == "docker" else os.environ["OEQ_WHEELS_TEST_PODMAN"]
        self.image = build_image(self.client, cache)
        # The work volume (downloads, unpacked inputs, objects) is kept between sessions, one per engine and cache
        # (the engines' stores live in the cache too): a second `make test` downloads and compiles nothing in it.
        # The build is safe to share it with (temporary names, atomic renames, checked caches).
        key = hashlib.sha256(str(Path(cache).resolve()).encode()).hexdigest()[:12]
        self.work, self.out = f"oeqt-work-{kind}-{key}", f"oeqt-out-{os.getpid()}-{kind}"
        self.seeded = self.seed_work_volume(Path(cache))

    def seed_work_volume(self, cache: Path) -> int:
        """A new work volume is a local volume bound to a folder of the cache (the engine's own `volume create --opt
        type=none --opt o=bind`; build.sh uses it by name as any volume), and starts with the host's member store
        (torch's and NVIDIA's files by sha256) and link stubs hard-linked into it: each engine would otherwise fetch
        and store them again. The build in it still reads the central directories and RECORDs, checks every member it links
        against them, and compiles everything. Where the links cannot be made (another file system) the folder
        starts empty. Returns the number of files linked."""
        if subprocess.run([self.client, "volume", "inspect", self.work], capture_output=True).returncode == 0:
            return 0  # kept from an earlier session, with what its builds left
        folder = cache / "engine-volumes" / self.work
        shutil.rmtree(folder, ignore_errors=True)  # a volume removed since: its folder starts again
        linked = 0
        for store in ("members", "stubs"):
            dest = folder / "cache" / store
            try:  # not the stores' temporary files (hidden names) nor the ledger of fetches
                shutil.copytree(cache / store, dest, copy_function=os.link,
                                ignore=lambda d, names: [n for n in names if n.startswith(".") or n == members.LEDGER])
                linked += sum(1 for f in dest.rglob("*") if f.is_file())
            except OSError:  # shutil.Error (a file that would not link) is one too; so is a store not there
                shutil.rmtree(dest, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([self.client, "volume", "create", "--opt", "type=none", "--opt", "o=bind", "--opt",
                        f"device={folder}", self.work], capture_output=True, text=True, check=True)
        return linked

    def env(self, **more):
        e = dict(os.environ, DOCKER=self.client, OEQ_WHEELS_IMAGE=self.image, OEQ_WHEELS_WORK_VOLUME=self.work,
                 OEQ_WHEELS_OUT_VOLUME=self.out)
        e.update(more)
        return e

    def ours(self):
        """Containers of ours that exist (running or not)."""
        r = subprocess.run([self.client, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
        return [n for n in r.stdout.split() if n.startswith("oeq-wheels-")]

    def cleanup(self):
        subprocess.run([self.client, "volume", "rm", "-f", self.out], capture_output=True)


@pytest.fixture(scope="module", params=ENGINES)
def eng(request, cache):
    require_engine(request.param)
    e = Engine(request.param, cache)
    yield e
    e.cleanup()


# The container builds x86_64 only, for time: the aarch64 cross build's bytes are proven by the host runner's
# (tests/integration/test_aarch64.py) and both runners use the same pinned packages (docs/validation.md: all of them in each engine).
X86 = ("--arch", "x86_64")


def build(eng, out, *args, env=None, timeout=1800):
    """build.sh OUTDIR ARGS --arch x86_64 (or ARGS OUTDIR when the first is --last); returns (result, seconds)."""
    t0 = time.monotonic()
    argv = [BUILD, *args[1:], *X86, str(out)] if args and args[0] == "--last" else \
        [BUILD, str(out), *args, *X86]
    r = subprocess.run(argv, env=env or eng.env(), capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def git_status():
    return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True, text=True).stdout


def test_container_build_equals_the_host_build_and_reuses_its_volume(eng, cp311_wheel, tmp_path, capsys):
    before = git_status()
    first, t1 = build(eng, tmp_path / "a", "--runner", "docker", "--python", "3.11")
    assert first.returncode == 0, first.stderr[-4000:]
    assert f"image {eng.image}" in first.stderr
    host = {w.name: w.read_bytes() for d in (cp311_wheel.parent, extra_dir(cp311_wheel.parent))
            for w in d.glob("*_x86_64.whl")}
    got = {w.name: w.read_bytes() for d in (tmp_path / "a", extra_dir(tmp_path / "a")) for w in d.glob("*.whl")}
    assert sorted(got) == sorted(host)
    assert got == host  # the pinned toolchain in the image and in the host's build root: the same bytes
    assert "this host's toolchain is the pinned one" in first.stderr
    assert git_status() == before  # nothing written into the repository
    # The second run reuses the work volume: no download, every object from the cache.
    second, t2 = build(eng, tmp_path / "b", "--runner", "docker", "--python", "3.11")
    assert second.returncode == 0, second.stderr[-4000:]
    assert "downloading" not in second.stderr and re.search(r"\[cp311\] compile +ok .*2/2 from cache", second.stderr)
    assert {w.name: w.read_bytes() for w in (tmp_path / "b").glob("*.whl")} == \
        {n: b for n, b in got.items() if (tmp_path / "a" / n).exists()}
    assert not eng.ours()
    with capsys.disabled():
        print(f"\n[{eng.kind}] container build: first {t1:.1f} s (volume seeded with {eng.seeded} stored members and stubs), "
              f"second {t2:.1f} s (volume reused)")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_the_container_and_writes_nothing(eng, tmp_path, sig):
    out = tmp_path / "out"
    p = subprocess.Popen([BUILD, "--python", "3.11", "--runner", "docker", *X86, str(out)], env=eng.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen, deadline = "", time.monotonic() + 600
    while time.monotonic() < deadline:  # wait until the build runs inside the container
        line = p.stderr.readline()
        seen += line
        if "[all] fetch" in line or not line:
            break
    time.sleep(2)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, seen + err
    assert "interrupted" in err
    assert not list(out.glob("*.whl")) and not list(extra_dir(out).glob("*.whl")) and not list(out.glob(".incoming*"))
    assert not eng.ours(), eng.ours()  # no container of ours left, running or stopped


def test_no_clobber_and_options_in_any_order(eng, cp311_wheel, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    squatter = out / cp311_wheel.name
    squatter.write_bytes(b"not the same wheel")
    r, _ = build(eng, out, "--last", "--python", "3.11", "--runner", "docker")  # OUTDIR last
    assert r.returncode == 1 and "already exists with different content" in r.stderr, r.stderr[-2000:]
    assert squatter.read_bytes() == b"not the same wheel"
    r, _ = build(eng, out, "--force", "--runner", "docker", "--python", "3.11")  # OUTDIR first
    assert r.returncode == 0, r.stderr[-2000:]
    assert squatter.read_bytes() != b"not the same wheel" and verify_wheel(squatter).ok


def test_failing_compile_in_container_leaves_no_wheel(eng, tmp_path):
    out = tmp_path / "out"
    r, _ = build(eng, out, "--runner", "docker", "--toolchain", "host", "--python", "3.11",
                 env=eng.env(OEQ_WHEELS_CONTAINER_CXX="g++ -include /nonexistent/forced-failure.h"))
    assert r.returncode != 0
    assert "forced-failure.h" in r.stderr and "no wheel written" in r.stderr
    assert not list(out.glob("*.whl")) and not list(out.glob(".incoming*"))


def last_line(r):
    return r.stderr.strip().splitlines()[-1]


def test_an_image_that_cannot_be_pulled_is_one_line_and_auto_falls_back(eng, tmp_path):
    missing = "quay.io/pypa/oeq-wheels-test-no-such-image:1"
    r, _ = build(eng, tmp_path / "out", "--runner", "docker", "--python", "3.11", env=eng.env(OEQ_WHEELS_IMAGE=missing))
    line = last_line(r)
    assert r.returncode == 2 and "compile  started" not in r.stderr, r.stderr  # it stopped before any build
    assert missing in line and "cannot be pulled (" in line and "--runner host" in line and "OEQ_WHEELS_IMAGE" in line
    assert "Traceback" not in r.stderr and "tar:" not in r.stderr and not (tmp_path / "out").exists()
    # auto: whatever works here, so the host runner, with a notice (its own output check then refuses OUTDIR).
    (tmp_path / "file").write_text("")
    r, _ = build(eng, tmp_path / "file" / "out", "--python", "3.11", env=eng.env(OEQ_WHEELS_IMAGE=missing))
    assert "cannot be pulled" in r.stderr and "building on this host instead (--runner host)" in r.stderr
    assert r.returncode == 2 and "cannot create output directory" in r.stderr


@pytest.mark.parametrize("volume", ["v", "-bad"])
def test_a_volume_name_the_engine_rejects_is_one_line(eng, tmp_path, volume):
    r, _ = build(eng, tmp_path / "out", "--runner", "docker", "--python", "3.11",
                 env=eng.env(OEQ_WHEELS_WORK_VOLUME=volume))
    assert r.returncode == 2 and "compile  started" not in r.stderr, r.stderr  # refused before any build
    assert f"volume name '{volume}' is not one a container engine accepts" in last_line(r)
    assert not (tmp_path / "out").exists() and not eng.ours()


def test_a_full_work_volume_is_one_line(eng, tmp_path):
    full = f"oeqt-full-{os.getpid()}"
    # A 48 MiB tmpfs volume (nr_blocks: podman 4.3 takes size= for a quota); the tool venv alone needs more.
    subprocess.run([eng.client, "volume", "create", "--opt", "type=tmpfs", "--opt", "device=tmpfs", "--opt",
                    "o=nr_blocks=12288", full], check=True, capture_output=True)
    try:
        out = tmp_path / "out"
        r, _ = build(eng, out, "--runner", "docker", "--python", "3.11", env=eng.env(OEQ_WHEELS_WORK_VOLUME=full))
        assert r.returncode != 0
        assert f"the disk behind volume {full} is full (No space left on device)" in last_line(r), r.stderr[-3000:]
        assert f"volume rm {full}" in last_line(r)
        assert not list(out.glob("*.whl")) and not list(out.glob(".incoming*")) and not eng.ours()
    finally:
        subprocess.run([eng.client, "volume", "rm", "-f", full], capture_output=True)


def test_a_daemon_that_dies_mid_build_is_one_line(cache, tmp_path):
    """A second private dockerd of this test's own, stopped while the container runs."""
    require_engine("docker")
    if REAL != "private":  # a runner's own Docker (OEQ_WHEELS_TEST_ENGINE=docker): the test command started none
        pytest.skip("a second dockerd of the test's own runs beside the test command's own engine (tools/ci/engine.sh)")
    sudo = debian.as_root()  # as root, or through password-free sudo as on GitHub's runner
    if sudo is None:
        unavailable("engines", "a second dockerd needs root or password-free sudo")
    run = Path(tempfile.mkdtemp(prefix="oeqt-dockerd-"))
    sock = f"unix://{run}/docker.sock"
    data = run / "data"  # removed with it: what the killed build had downloaded goes too
    d = subprocess.Popen([*sudo, "dockerd", "-H", sock, "--group", str(os.getgid()), "--data-root", str(data),
                          "--exec-root", str(run / "exec"), "--pidfile", str(run / "pid"), "--iptables=false",
                          "--ip6tables=false", "--bridge=none"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, DOCKER_HOST=sock)
    try:
        for _ in range(60):
            if subprocess.run(["docker", "info"], env=env, capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        image = build_image("docker", cache, env=env)
        env.update(DOCKER="docker", OEQ_WHEELS_IMAGE=image, OEQ_WHEELS_WORK_VOLUME="oeqt-dies",
                   OEQ_WHEELS_OUT_VOLUME="oeqt-dies-out")
        out = tmp_path / "out"
        p = subprocess.Popen([BUILD, str(out), "--runner", "docker", "--python", "3.11", *X86], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        for line in p.stderr:  # the container is running once the build inside speaks
            seen += line
            if "bootstrap:" in line or "oeq-wheels:" in line:
                break
        d.terminate()  # dockerd stops: as when the engine is quit or restarted under a running build
        d.wait(60)
        _, err = p.communicate(timeout=120)
        lines = (seen + err).strip().splitlines()
        assert p.returncode != 0
        assert "the container engine stopped answering during the build" in lines[-1], lines[-5:]
        assert not list(out.glob("*.whl")) and not list(out.glob(".incoming*"))
    finally:
        if d.poll() is None:
            d.terminate()
            d.wait(60)
        for m in sorted((l.split()[1] for l in Path("/proc/mounts").read_text().splitlines()
                         if l.split()[1].startswith(str(run))), reverse=True):
            subprocess.run([*sudo, "umount", "-l", m], capture_output=True)  # dockerd's netns mount outlives it
        subprocess.run([*sudo, "rm", "-rf", str(run)], capture_output=True)
