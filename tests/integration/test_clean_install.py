"""The clean-install check (tools/release/clean_install.sh) with a built wheel: FastMACE's own install steps in a
fresh venv, every compiler a sentinel, and FastMACE uses the prebuilt."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO
from oeq_wheels import pins as P

pytestmark = pytest.mark.big_disk  # multi-GB trees for a while: one unit with the others like it (tests/support/plugin.py)


def _nvidia_indexes(uv_cache: Path) -> set[Path]:
    """The folders of uv's cache (one per index URL) that hold NVIDIA wheels."""
    return {p.parent for p in uv_cache.glob("wheels-v*/index/*/nvidia-*")}


def _pypi_entry(uv_cache: Path, fastmace_base: Path, tmp_path: Path) -> set[Path]:
    """uv's cache entry for PyPI as the test venvs spell it, found by its NVIDIA wheels. Where uv's cache was emptied
    after the kept venvs were made (`uv cache clean`), one small NVIDIA wheel of their torch stack is installed again
    through the same index, so that the entry exists before the clean install adds to it."""
    from oeq_wheels.checks import venvs
    if not _nvidia_indexes(uv_cache):
        (nvtx,) = venvs.site_packages(fastmace_base).glob("nvidia_nvtx-*.dist-info")
        venv, env = tmp_path / "prime", venvs.uv_env()
        uv = [sys.executable, "-m", "uv"]
        subprocess.run(uv + ["venv", "-q", "--python", str(fastmace_base / "bin" / "python"), str(venv)],
                       check=True, env=env)
        subprocess.run(uv + ["pip", "install", "-q", "--no-deps", "--python", str(venv / "bin" / "python"),
                             "nvidia-nvtx==" + nvtx.name.removesuffix(".dist-info").split("-")[1]],
                       check=True, env=env)
    return _nvidia_indexes(uv_cache)


def test_clean_install_passes_with_compilers_removed(cp311_wheel, fastmace_base, tmp_path):
    # fastmace_base: the test venvs' torch stack, in uv's cache before the clean install asks for the same wheels
    uv_cache = Path(subprocess.run([sys.executable, "-m", "uv", "cache", "dir"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    before = _pypi_entry(uv_cache, fastmace_base, tmp_path)
    assert before, f"no NVIDIA wheel in uv's cache ({uv_cache}) after the test venvs were made"
    started = time.time()
    r = subprocess.run([str(REPO / "tools/release/clean_install.sh"), str(cp311_wheel.parent), "3.11"],
                       capture_output=True, text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    cu = P.load().for_variant(P.load().oeq_binary.name)
    assert f"fastmace doctor: host extension: prebuilt (fastmace-oeq-ext {cu.version}, " in out
    assert "FastMACE: prebuilt usable=True" in out and "ops ['jit_conv_forward'" in out
    assert "PASS: FastMACE uses the prebuilt host extension; no compiler or build tool was called" in out
    # uv stores a wheel once per index URL: the NVIDIA wheels torch brings must land under PyPI's own entry (which
    # the test venvs share), never under a second spelling of PyPI or under the torch stand-in's address. (Wheels
    # the venvs lack, such as FastMACE's nvidia-ml-py, may be added to that entry.)
    twice = [p for p in uv_cache.glob("wheels-v*/index/*/nvidia-*") if p.stat().st_mtime >= started and
             p.parent not in before]
    assert not twice, f"NVIDIA wheels stored under another index than PyPI's: {twice[:3]}"
