"""Runs at once do not collide: container runs that share a volume take turns (a lock per volume in the cache; the
second waits, naming the first). A fake engine (a script) stands in for docker; host builds sharing a cache are
tests/integration/test_interrupts.py's."""
import os
import subprocess
import time

import pytest

from conftest import REPO

RUN_CONTAINER = REPO / "tools/release/oeq_wheels/run_container.sh"


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
