"""The test command lints: ruff, hash-locked in requirements/lock.txt, with pyproject.toml's rule set (the rules
that catch bugs: syntax errors, pyflakes' undefined and unused names, bugbear)."""
import subprocess
import sys

from support import REPO


def test_ruff_finds_nothing():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_reports_what_its_rules_catch(tmp_path):
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "F401" in r.stdout and "F821" in r.stdout, r.stdout + r.stderr
