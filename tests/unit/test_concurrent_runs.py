"""Runs at once do not collide: container runs that share a volume take turns (a lock per volume in the cache; the
second waits, naming the first), a build image's root file system is made by one run per key while the others wait,
and only other keys' file systems that no run holds are removed, never a live run's .part. A fake engine (a script)
stands in for docker; host builds sharing a cache are tests/integration/test_interrupts.py's."""
import os
import subprocess
import threading
import time

import pytest

from support import REPO
from oeq_wheels import buildimage, pins as P
from oeq_wheels.files import locked

RUN_CONTAINER = REPO / "tools/release/oeq_wheels/run_container.sh"


def test_only_other_keys_root_file_systems_that_no_run_holds_are_removed(tmp_path):
    d = tmp_path / "build-image"
    d.mkdir()
    keep, stale, live = (d / f"rootfs-{k}.tar.gz" for k in ("keep", "stale", "live"))
    for f in (keep, stale, d / "rootfs-stale.tar.gz.111.part", live, d / "rootfs-live.tar.gz.222.part"):
        f.write_bytes(b"tar")
    with locked(live):  # another run making (its .part) or importing (its tar) the live key
        buildimage.remove_stale(keep)
    assert sorted(p.name for p in d.iterdir()) == ["rootfs-keep.tar.gz", "rootfs-live.tar.gz",
                                                   "rootfs-live.tar.gz.222.part", "rootfs-live.tar.gz.lock",
                                                   "rootfs-stale.tar.gz.lock"]
    buildimage.remove_stale(keep)  # once no run holds it, it goes; lock files stay
    assert sorted(p.name for p in d.iterdir()) == ["rootfs-keep.tar.gz", "rootfs-live.tar.gz.lock",
                                                   "rootfs-stale.tar.gz.lock"]


def test_a_second_run_waits_for_the_first_to_make_the_image_naming_it(tmp_path, monkeypatch):
    """Two runs of one key: the second says it waits and for whom, then finds the image made, and makes nothing."""
    pins = P.load()
    monkeypatch.setattr(buildimage, "interpreters", lambda pins: [])
    imported, made, said = [], [], []

    def engine(cmd, **kw):
        if cmd[1:3] == ["image", "inspect"]:
            return subprocess.CompletedProcess(cmd, 0 if imported else 1)
        imported.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(buildimage.proc, "run", engine)
    monkeypatch.setattr(buildimage, "say", said.append)

    def rootfs(pins, cache, interps):
        made.append(1)
        out = buildimage._tar(cache, buildimage.key(pins, interps))
        out.write_bytes(b"tar")
        return out
    monkeypatch.setattr(buildimage, "rootfs", rootfs)
    tar = buildimage._tar(tmp_path, buildimage.key(pins, []))
    with locked(tar, holder="pid 4242, making or importing the first"):
        second = threading.Thread(target=buildimage.ensure, args=("docker", pins, tmp_path))
        second.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.02)
        assert said == [f"oeq-wheels: another run is making the build image {buildimage.tag(pins, [])} (pid 4242, "
                        "making or importing the first); waiting for it"]
        assert second.is_alive() and not made
        imported.append("the first run's import")
    second.join(30)
    assert not second.is_alive() and not made and imported == ["the first run's import"]


FAKE_ENGINE = r"""#!/usr/bin/env bash
# A container engine's client, enough for run_container.sh: every command logged; the build waits for the gate.
for fd in 8 9; do [ -e "/proc/$$/fd/$fd" ] && echo "lock fd $fd open in the engine" >>"$FAKE_LOG"; done
case "$1 $2" in
  "info "*|"image inspect"|"volume inspect"|"kill "*) exit 0 ;;
esac
if [ "$1" = run ] && [ "$3" = -i ]; then
  name="$5"; cat >/dev/null
  echo "build $name starts" >>"$FAKE_LOG"
  for _ in $(seq 600); do [ -e "$FAKE_GATE" ] && break; sleep 0.05; done
  echo "build $name ends" >>"$FAKE_LOG"
  exit 0
fi
if [ "$1" = run ]; then  # the wheels out of the out volume
  d="$(mktemp -d)"; mkdir -p "$d/dist" "$d/dist-extra"; echo ok >"$d/RESULT"; echo whl >"$d/dist/fake-1-py3-none-any.whl"
  echo "copy-out" >>"$FAKE_LOG"
  tar -C "$d" -cf - .; rm -rf "$d"; exit 0
fi
echo "fake engine: unexpected $*" >&2; exit 3
"""


def test_container_runs_sharing_a_volume_take_turns_the_second_naming_the_first(tmp_path):
    engine = tmp_path / "engine"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    log, gate = tmp_path / "log", tmp_path / "gate"
    env = dict(os.environ, DOCKER=str(engine), OEQ_WHEELS_IMAGE="oeq-wheels/build-root:test", FAKE_LOG=str(log),
               FAKE_GATE=str(gate), OEQ_WHEELS_CACHE=str(tmp_path / "cache"), OEQ_WHEELS_WORK_VOLUME="test-work",
               OEQ_WHEELS_OUT_VOLUME="test-out")
    start = lambda out: subprocess.Popen([str(RUN_CONTAINER), str(tmp_path / out), "--python", "3.11"],  # noqa: E731
                                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = start("a")
    deadline = time.monotonic() + 60
    while "starts" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    second = start("b")
    waiting = ""
    while "waiting for it to end" not in waiting and time.monotonic() < deadline:
        waiting += second.stderr.readline()
    assert f"build.sh: volume test-out is in use by another container build (pid {first.pid}, OUTDIR {tmp_path / 'a'}, " \
           "since " in waiting, waiting
    assert log.read_text().count("starts") == 1  # the second has not emptied the volumes under the first
    gate.touch()
    for p in (first, second):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    lines = log.read_text().splitlines()
    assert [l.split()[-1] for l in lines] == ["starts", "ends", "copy-out", "starts", "ends", "copy-out"], lines
    assert lines[0].startswith(f"build oeq-wheels-{first.pid}-") and lines[3].startswith(f"build oeq-wheels-{second.pid}-")
    assert (tmp_path / "a" / "fake-1-py3-none-any.whl").is_file() and (tmp_path / "b" / "fake-1-py3-none-any.whl").is_file()


@pytest.mark.parametrize("volumes", [("test-x", "test-x"), ("test-z", "test-a")], ids=["one-volume", "two"])
def test_a_run_locks_each_volume_once_and_the_engine_inherits_no_lock(tmp_path, volumes):
    """A volume named for both is locked once (a run never waits on itself); no engine command holds a lock (a
    process of the engine's that outlived the run would keep it)."""
    engine = tmp_path / "engine"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    (tmp_path / "gate").touch()
    env = dict(os.environ, DOCKER=str(engine), OEQ_WHEELS_IMAGE="img", FAKE_LOG=str(tmp_path / "log"),
               FAKE_GATE=str(tmp_path / "gate"), OEQ_WHEELS_CACHE=str(tmp_path / "cache"),
               OEQ_WHEELS_WORK_VOLUME=volumes[0], OEQ_WHEELS_OUT_VOLUME=volumes[1])
    r = subprocess.run([str(RUN_CONTAINER), str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "waiting" not in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / "cache" / "container-volumes").iterdir()) == \
        sorted({f"{v}.lock" for v in volumes})
    assert "lock fd" not in (tmp_path / "log").read_text()  # the engine inherits no lock
