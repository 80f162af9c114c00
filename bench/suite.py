"""The test suite's cost as a new user pays it: a fresh clone of HEAD, empty caches (XDG_CACHE_HOME: ours, uv's
and pip's), README's two commands (`make wheels`, then `make test`), optionally `make test` again in the same clone
(--second), or only the quick loop (`make test-unit`, --unit); the time of each, the bytes the machine received
during it (its network interfaces' counters, as a user's machine would count them) and the peak disk used above
the start (the file system's, sampled every 2 s: run it on a quiet machine). `bench/run.py --suite [--second]`
(or `python3 bench/suite.py [--second|--unit]`) runs it; README and docs/benchmarks.md state its figures."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class PeakDisk(threading.Thread):
    def __init__(self, where: Path):
        super().__init__(daemon=True)
        self.where, self.start_used, self.peak, self.stop = where, shutil.disk_usage(where).used, 0, threading.Event()

    def used(self) -> int:
        return shutil.disk_usage(self.where).used - self.start_used

    def run(self):
        while not self.stop.wait(2):
            self.peak = max(self.peak, shutil.disk_usage(self.where).used - self.start_used)


def downloaded(cache: Path) -> int:
    """Bytes the build downloaded into an empty cache: whole files in downloads/, and what members/fetched.jsonl
    says each range fetch took (standard library only, as the rest of this file)."""
    import json
    total = sum(p.stat().st_size for p in (cache / "downloads").glob("*") if p.is_file() and
                not p.name.endswith(".verified"))
    ledger = cache / "members" / "fetched.jsonl"
    if ledger.exists():
        total += sum(json.loads(line)["bytes"] for line in ledger.read_text().splitlines())
    return total


def received() -> int:
    """Bytes this machine has received on its network interfaces since boot (/proc/net/dev; loopback, which the
    suite's own servers use, left out)."""
    total = 0
    for line in open("/proc/net/dev").read().splitlines()[2:]:
        name, data = line.split(":", 1)
        if name.strip() != "lo":
            total += int(data.split()[0])
    return total


def busy_seconds() -> float:
    """CPU time the whole machine has spent busy since boot (/proc/stat: user, nice, system, irq, softirq), in
    seconds: with the machine otherwise quiet, the difference over a command is that command's CPU time,
    daemons' included (dockerd, podman's containers)."""
    fields = open("/proc/stat").readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def by_file(per_test: Path, top: int = 15) -> str:
    """bench/cpu_per_test.py's lines summed per test file: wall time (tests on different workers overlap) and CPU."""
    import json
    files: dict[str, list[float]] = {}
    for line in per_test.read_text().splitlines():
        t = json.loads(line)
        f = files.setdefault(t["test"].split("::")[0], [0.0, 0.0, 0])
        f[0], f[1], f[2] = f[0] + t["wall"], f[1] + t["cpu"], f[2] + 1
    rows = sorted(files.items(), key=lambda kv: -kv[1][1])
    total = [sum(v[i] for v in files.values()) for i in (0, 1, 2)]
    return ("| test file | tests | wall (s) | CPU of it and its children (s) |\n|---|---|---|---|\n" +
            "".join(f"| {name} | {n} | {wall:.0f} | {cpu:.0f} |\n" for name, (wall, cpu, n) in rows[:top]) +
            f"| all {len(files)} files | {total[2]} | {total[0]:.0f} | {total[1]:.0f} |\n")


def proof_table(test_log: str) -> str:
    """The test command's proof table (tests/claims.toml's claims, each PASS / FAIL / SKIPPED) and pytest's last
    line, out of its output."""
    lines = test_log.splitlines()
    start = next((i for i, l in enumerate(lines) if "proof table" in l and l.startswith("=")), None)
    if start is None:
        return "no proof table in the test command's output\n" + "\n".join(lines[-5:])
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    last = next((l for l in reversed(lines) if l.startswith("=") and (" passed" in l or " failed" in l)), "")
    return "\n".join(lines[start:end] + [last])


def measure(second: bool = False, log=print, unit: bool = False) -> list[tuple[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="oeq-suite-") as t:
        root = Path(t)
        clone = root / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        # A new user's shell: none of our cache settings, and Python writes its bytecode (make wheels does; the test
        # command says PYTHONDONTWRITEBYTECODE itself).
        env = {k: v for k, v in os.environ.items() if k not in ("OEQ_WHEELS_CACHE", "UV_CACHE_DIR", "PIP_CACHE_DIR",
                                                                 "PYTHONDONTWRITEBYTECODE")}
        env["XDG_CACHE_HOME"] = str(root / "cache")  # ours, uv's and pip's, all empty
        disk = PeakDisk(root)
        disk.start()
        cores = os.cpu_count() or 1
        commands = ["test-unit"] if unit else ["wheels", "test"] + (["test"] if second else [])
        for n, what in enumerate(commands):
            per_test = root / f"cpu-{n}.jsonl"
            run_env = dict(env, OEQ_WHEELS_BENCH_CPU=str(per_test),
                           PYTEST_ADDOPTS=f"{env.get('PYTEST_ADDOPTS', '')} -p bench.cpu_per_test".strip())
            t0, cpu0, rx0 = time.monotonic(), busy_seconds(), received()
            with open(root / f"make-{what}-{n}.log", "w") as out:
                rc = subprocess.run(["make", what], cwd=clone, env=run_env, stdout=out,
                                    stderr=subprocess.STDOUT).returncode
            took, cpu, rx = time.monotonic() - t0, busy_seconds() - cpu0, received() - rx0
            label = f"make {what}" + (" (second, same clone and cache)" if what == "test" and
                                     any(r[0].startswith("make test") for r in rows) else "")
            rows.append((label, f"{took / 60:.1f} min, exit {rc}; received {rx / 1e9:.2f} GB; the whole machine's CPU "
                                f"time (/proc/stat) {cpu:.0f} s "
                                f"on {cores} cores: no schedule of this work ends before {cpu / cores:.0f} s"))
            if per_test.exists():
                log(by_file(per_test))
            log(f"suite: {label}: {took:.0f} s, exit {rc}")
            text = (root / f"make-{what}-{n}.log").read_text()
            if rc != 0:  # a failure's cause
                log(text[-4000:])
            elif what.startswith("test"):  # the proof table and pytest's summary (--durations may come between them)
                log(proof_table(text))
            if what == "wheels":
                rows.append(("downloaded by make wheels (whole files + members by range)",
                             f"{downloaded(root / 'cache' / 'oeq-wheels') / 2**20:.0f} MiB"))
                rows.append(("disk used after make wheels (caches, clone)", f"{disk.used() / 2**30:.1f} GiB"))
            if rc != 0:
                break
        disk.stop.set()
        disk.join()
        rows.append(("peak disk above the start (caches, clone, temporary)", f"{disk.peak / 2**30:.1f} GiB"))
    return rows


def main(second: bool, unit: bool = False) -> int:
    """Measure, print the table, and exit non-zero if a command failed."""
    rows = measure(second, unit=unit)
    print("| what | measured |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows))
    return 0 if all("exit 0" in b for a, b in rows if a.startswith("make")) else 1


if __name__ == "__main__":  # standard library only: runs before any of the project's set-up exists
    import sys
    sys.exit(main("--second" in sys.argv[1:], "--unit" in sys.argv[1:]))
