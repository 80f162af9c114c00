"""What both tiers share: the checkout and runtime/ on sys.path, Hypothesis's caches out of the checkout, kept work
under the session's base folder, and the run's hooks (support/plugin.py). The helpers are tests/support's modules;
the integration fixtures are tests/integration/conftest.py's, the unit tier's offline guard tests/unit/conftest.py's."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "runtime"  # the fastmace_oeq_ext package, kept out of the repository root so that
sys.path[:0] = [str(REPO), str(RUNTIME)]  # a process started there never imports it instead of a wheel's

from oeq_wheels import settings  # noqa: E402
from oeq_wheels.files import default_cache  # noqa: E402

# Hypothesis keeps caches (source constants, Unicode tables) in ./.hypothesis, database or not: in the pipeline's
# cache instead, so that a run writes nothing into the checkout. Read when its plugin first collects, after this.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(default_cache() / "hypothesis"))

# The workers' units of work, the disk check, the PyPI mirror and the proof table. (tests/ is on sys.path here:
# pytest puts a rootdir conftest's own folder there before importing it.)
pytest_plugins = ["support.plugin"]


@pytest.fixture(scope="session", autouse=True)
def _kept_work_in_basetemp(tmp_path_factory):
    """What a check keeps on purpose (a failed install's venv, ~5 GB) goes under this session's base folder, which
    the next session removes (pyproject.toml: tmp_path_retention_count), rather than into /tmp for good."""
    kept = tmp_path_factory.getbasetemp() / "kept"
    kept.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:  # the session-wide monkeypatch: restored as it was at the end
        mp.setenv(settings.KEEP_DIR, str(kept))
        yield
