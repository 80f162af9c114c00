"""Failing stand-ins for build tools: put first on PATH, they log their call and exit 1.

They prove that nothing was compiled: an empty log means no compiler or build
tool was even started. (C `gcc` is left alone: Triton needs it for its launcher.)
"""
from __future__ import annotations

from pathlib import Path

BUILD_TOOLS = ("g++", "c++", "ninja", "nvcc")


def make(bin_dir: Path, log: Path, tools: tuple[str, ...] = BUILD_TOOLS) -> Path:
    """Write one failing script per tool into bin_dir; return bin_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n'
                          f'echo "sentinel: {tool} must not run" >&2\nexit 1\n')
        script.chmod(0o755)
    return bin_dir
