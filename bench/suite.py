"""The test suite's cost as a new user pays it: a fresh clone of HEAD, empty caches (XDG_CACHE_HOME: ours, uv's
and pip's), README's two commands (`make wheels`, then `make test`), optionally `make test` again in the same clone;
the time of each and the peak disk used above the start (the file system's, sampled every 2 s: run it on a quiet
machine). `bench/run.py --suite [--second]` (or `python3 bench/suite.py`) runs it; README and docs/benchmarks.md state its figures."""
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


def measure(second: bool = False, log=print) -> list[tuple[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="oeq-suite-") as t:
        root = Path(t)
        clone = root / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("OEQ_WHEELS_CACHE", "UV_CACHE_DIR", "PIP_CACHE_DIR")}
        env["XDG_CACHE_HOME"] = str(root / "cache")  # ours, uv's and pip's, all empty
        disk = PeakDisk(root)
        disk.start()
        for what in ["wheels", "test"] + (["test"] if second else []):
            t0 = time.monotonic()
            with open(root / f"make-{what}.log", "a") as out:
                rc = subprocess.run(["make", what], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            took = time.monotonic() - t0
            label = f"make {what}" + (" (second, same clone and cache)" if what == "test" and
                                     any(r[0].startswith("make test") for r in rows) else "")
            rows.append((label, f"{took / 60:.1f} min, exit {rc}"))
            log(f"suite: {label}: {took:.0f} s, exit {rc}")
            if rc != 0 or what == "test":  # a failure's cause, or the proof table and pytest's summary
                log((root / f"make-{what}.log").read_text()[-4000:])
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


def main(second: bool) -> int:
    """Measure, print the table, and exit non-zero if a command failed."""
    rows = measure(second)
    print("| what | measured |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows))
    return 0 if all("exit 0" in b for a, b in rows if a.startswith("make")) else 1


if __name__ == "__main__":  # standard library only: runs before any of the project's set-up exists
    import sys
    sys.exit(main("--second" in sys.argv[1:]))
