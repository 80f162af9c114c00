"""Prebuilt OpenEquivariance host extension (libtorch_tp_jit) for one torch/CUDA/CPython build.

    import fastmace_oeq_ext
    fastmace_oeq_ext.activate()      # before `import openequivariance`

check() says whether the shipped library matches this environment; resolve()
(shared by activate(), status() and the doctor) decides how OEq's host extension
is provided here. Importing this package imports neither torch nor OEq.
"""
from __future__ import annotations

import sys
import threading

from .manifest import Manifest, ManifestError
from .decision import (ENV_FROM_WHEELS, ENV_PREBUILT, Candidate, Decision, Resolution, check, load_manifest,
                      prebuilt_mode, resolve)

__all__ = ["activate", "activated", "deactivate", "check", "status", "resolve", "library_path", "Decision", "Candidate",
           "Resolution", "Manifest", "ManifestError", "PrebuiltUnavailable", "load_manifest",
           "ENV_PREBUILT", "ENV_FROM_WHEELS"]

# The files this package consists of in the wheel, beside the library and its manifest.
PYTHON_FILES = ("__init__.py", "__main__.py", "cudaflags.py", "decision.py", "doctor.py", "hooks.py", "manifest.py", "oeq_build.py")

_lock = threading.Lock()
_state = {"state": "inactive", "path": None, "reason": "activate() not called", "mode": None}
_hooks = None


class PrebuiltUnavailable(RuntimeError):
    """FASTMACE_OEQ_PREBUILT=1 and the prebuilt library cannot be used."""


def status() -> dict:
    """What happened in this process: state is prebuilt, built, reused, skipped, oeq-precompiled,
    fallback-armed or inactive; path and reason say more."""
    out = {k: _state[k] for k in ("state", "path", "reason")}
    if _hooks is not None and _hooks.last_state and out["state"] == "fallback-armed":
        out.update(state=_hooks.last_state, path=getattr(_hooks.module, "__file__", None))
    return out


def _set(state, reason, path=None, mode=None):
    _state.update(state=state, reason=reason, path=path, mode=mode)


def activate():
    """Hand OpenEquivariance the best way to its host extension; call before importing it.

    Returns status(). FASTMACE_OEQ_PREBUILT=1 raises PrebuiltUnavailable when the
    prebuilt cannot be used (and nothing is compiled); =0 never uses it. When the
    prebuilt is not used, OEQ_CUDA_FROM_WHEELS (auto: only when torch has no usable
    CUDA_HOME; 1: always; 0: never) lets OEq's own build use the NVIDIA wheels.
    Calling it again is harmless; a changed FASTMACE_OEQ_PREBUILT replaces the hooks.
    """
    global _hooks
    with _lock:
        mode = prebuilt_mode()
        if _state["mode"] == mode and _state["state"] != "inactive":
            return status()  # idempotent: nothing changed since the last call
        if "openequivariance._torch.extlib" in sys.modules and _state["state"] in ("inactive", "skipped"):
            reason = "openequivariance was imported before activate(); call activate() first"
            if mode == "require":
                raise PrebuiltUnavailable(reason)
            _set("skipped", reason, mode=mode)
            return status()
        import torch
        import torch.utils.cpp_extension as ce

        from . import decision as r, hooks
        env = r.environment()  # torch is imported now, so this includes its C++ ABI
        # torch's own answer, where the text guess could differ (e.g. CUDA_HOME set before import).
        home = getattr(ce, "CUDA_HOME", None)
        env.update(cuda_home=home, cuda_home_usable=bool(home) and r.has_cuda_headers(home))
        res = resolve(env)
        if _hooks is None:
            _hooks = hooks.Hooks(ce)
        _hooks.restore()  # a change of mode replaces the hooks
        _hooks.last_state = None
        if res.error:
            _set("skipped", res.error, mode=mode)
            if mode == "require" and res.candidates[-1].name == "prebuilt":
                raise PrebuiltUnavailable(res.error)
            raise RuntimeError(res.error)
        chosen = res.chosen
        if chosen is None:
            _set("skipped", f"nothing can provide the host extension: {res.refusals()}", mode=mode)
        elif chosen.name == "oeq-precompiled":
            _set("oeq-precompiled", "OpenEquivariance loads its own precompiled stable extension; nothing to do",
                 chosen.path, mode)
        elif chosen.name == "prebuilt":
            hooks.install_prebuilt(_hooks, chosen.path)
            _set("prebuilt", chosen.reason, chosen.path, mode)
        elif chosen.name == "nvidia-wheels":
            hooks.install_wheel_fallback(_hooks, torch, res.flags)
            _set("fallback-armed", f"prebuilt not used: {_prebuilt_reason(res)}; building from the NVIDIA wheels "
                                   f"({res.flags.layout})", mode=mode)
        else:
            _set("skipped", f"prebuilt not used: {_prebuilt_reason(res)}; OEq builds with torch's CUDA_HOME",
                 mode=mode)
        return status()


def library_path() -> str:
    """The shipped library's path (whether or not it matches this environment)."""
    from .decision import MANIFEST
    return str(MANIFEST.parent / load_manifest().library)


def _prebuilt_reason(res: Resolution) -> str:
    return res.reason("prebuilt") or "not considered"


def deactivate():
    """Undo activate()'s wrapping of torch.utils.cpp_extension."""
    with _lock:
        if _hooks is not None:
            _hooks.restore()
        _set("inactive", "deactivate() called")


class activated:
    """Context-manager form: `with fastmace_oeq_ext.activated(): import openequivariance`."""

    def __enter__(self):
        return activate()

    def __exit__(self, *exc):
        deactivate()
        return False


def doctor(argv=None, out=None) -> int:
    from .doctor import main
    return main(argv, out)
