"""`oeq-wheels` as a user runs it: `python -m oeq_wheels` in a process of its own, the pipeline from the checkout."""
import os
import subprocess
import sys
from pathlib import Path

from support import REPO, RUNTIME


def _env(**extra) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(RUNTIME)]), **extra)


def run_cli(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    """The command run to its end, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "oeq_wheels", *args], capture_output=True, text=True,
                          env={**_env(), **(env or {})}, cwd=cwd or REPO)


def start_cli(args, cache: Path, tmpdir: Path, **env) -> subprocess.Popen:
    """The command started and left running (to be watched, interrupted), with its own cache and TMPDIR."""
    tmpdir.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "oeq_wheels", *map(str, args)],
                            env=_env(OEQ_WHEELS_CACHE=str(cache), TMPDIR=str(tmpdir), **env), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
