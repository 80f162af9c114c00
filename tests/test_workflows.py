"""The CI workflows pass actionlint and zizmor (both from PyPI); the checks do catch bad workflows."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def tool(name):
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in the test venv (requirements/test.txt)")
    return str(path)


def test_both_workflows_exist():
    assert {p.name for p in WORKFLOWS} == {"release.yml", "test.yml"}


def test_actionlint_clean():
    r = subprocess.run([tool("actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_zizmor_clean():
    r = subprocess.run([tool("zizmor"), "--offline", str(REPO / ".github" / "workflows")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_third_party_action_is_pinned_by_sha():
    import re
    for wf in WORKFLOWS:
        for ref in re.findall(r"uses:\s*([^\s#]+)", wf.read_text()):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{wf.name}: {ref}"


BAD = """name: bad
on: [push]
permissions: write-all
jobs:
  x:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
"""


def test_the_linters_catch_a_bad_workflow(tmp_path):
    d = tmp_path / ".github" / "workflows"
    d.mkdir(parents=True)
    (d / "bad.yml").write_text(BAD)
    z = subprocess.run([tool("zizmor"), "--offline", str(d)], capture_output=True, text=True)
    assert z.returncode != 0 and ("unpinned" in z.stdout + z.stderr or "excessive" in z.stdout + z.stderr)
    (d / "broken.yml").write_text("on: push\njobs:\n  x:\n    steps: []\n")
    a = subprocess.run([tool("actionlint"), str(d / "broken.yml")], capture_output=True, text=True)
    assert a.returncode != 0 and "runs-on" in a.stdout


def test_release_uploads_only_fastmace_to_pypi_and_attaches_the_oeq_wheels_and_index():
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    build, rest = text.split("\n  publish-pypi:", 1)
    pypi, gh = rest.split("\n  github-release:", 1)
    # PyPI gets the `wheels` artifact, which holds dist/*.whl (fastmace-oeq-ext) only.
    assert "name: wheels\n          path: dist/*.whl" in build and "name: wheels" in pypi
    assert "oeq-wheels" not in pypi and "dist-extra" not in pypi
    # The binary OEq wheels, SHA256SUMS and the index are built, kept and attached to the release.
    assert "path: dist-extra/*.whl" in build and "make index" in build and "simple-index.tar.gz" in build
    assert "make install-matrix" in build  # plain pip and uv installs before anything is published
    assert "merge-multiple: true" in gh and "out/*.whl" in gh and "out/simple-index.tar.gz" in gh
