"""CUDA-wheel flags: the one implementation lives in the runtime package (it ships in the
wheel for the toolkit-less fallback, which must not depend on this pipeline); this module
loads that file, so both use the same code."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_RUNTIME = Path(__file__).resolve().parent.parent / "runtime" / "fastmace_oeq_ext" / "__init__.py"
_spec = importlib.util.spec_from_file_location("_fastmace_oeq_ext_flags", _RUNTIME)
_mod = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _mod  # dataclasses look their module up there
_spec.loader.exec_module(_mod)

CudaWheelFlags = _mod.CudaWheelFlags
wheel_build_flags = _mod.wheel_build_flags
find_driver_dir = _mod.find_driver_dir
missing_cu13_parts = _mod.missing_cu13_parts
