"""The suite's helpers, each module named for what it holds; tests import them as `from support.x import y`
(tests/conftest.py puts the checkout and runtime/ on sys.path; pytest puts tests/ there, as the root conftest's folder).

- cli: `oeq-wheels` run as a user runs it, in a process of its own (run_cli, start_cli)
- builds: what a build run leaves and how it is watched (its processes, its wheels, a private object cache)
- artifacts: files as something else than our build left them (a disk error, a hostile uploader, an older schema)
- capabilities: engines, emulation and act: skipped by name, or failed where OEQ_WHEELS_TEST_REQUIRE names them
- uploads: the loopback pypiserver that takes uploads
- fake_registry: a package registry on loopback (PEP 691, ranges) that counts what it sends
- pypi_mirror: the kept mirror of PyPI the suite's installs go through, and its stand-in index
- venvs: the suite's own venvs (hard-link overlays, torch from PyPI, the consumer's, the emulated ones)
- oeq_operators: the operators OEq's sources register, for the load checks
- claims: the proof table (tests/claims.toml)
- plugin: the run's hooks: the workers' units of work, the disk check, the mirror, the proof table
"""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"  # the fastmace_oeq_ext package, kept out of the repository root (tests/conftest.py)
