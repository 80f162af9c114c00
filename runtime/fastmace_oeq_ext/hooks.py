"""Wrappers around torch.utils.cpp_extension that serve OEq's extension name only.

OEq 0.7.0's JIT path calls load("libtorch_tp_jit", ...). The prebuilt hooks answer
it with the shipped library (nothing compiled); the NVIDIA-wheel hooks let torch
build it against the pip CUDA wheels instead of a toolkit.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

EXTENSION = "libtorch_tp_jit"
HERE = Path(__file__).resolve().parent


class Hooks:
    """Wraps attributes of torch.utils.cpp_extension; restore() puts the originals back."""

    def __init__(self, cpp_extension):
        self.ce = cpp_extension
        self.saved: dict = {}
        self.module = None          # the imported prebuilt module, once loaded
        self.last_state: str | None = None  # set by the fallback's load(): built or reused

    def patch(self, name, make):
        if name not in self.saved:
            self.saved[name] = getattr(self.ce, name)
        setattr(self.ce, name, make(self.saved[name]))

    def restore(self):
        for name, fn in self.saved.items():
            setattr(self.ce, name, fn)
        self.saved.clear()


def _import_prebuilt(hooks: Hooks, path: str):
    if hooks.module is None:
        spec = importlib.util.spec_from_file_location(EXTENSION, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        hooks.module = mod
    return hooks.module


def install_prebuilt(hooks: Hooks, path: str) -> None:
    def load(orig):
        def wrapped(name, *args, **kwargs):
            if name != EXTENSION:
                return orig(name, *args, **kwargs)
            return _import_prebuilt(hooks, path)  # nothing compiled, no build directory, no lock
        return wrapped

    hooks.patch("load", load)
    # load() above never reaches torch, so every build-directory question is OEq's lock check.
    hooks.patch("_get_build_directory", _lock_free_build_dir(threading.local()))


def _lock_free_build_dir(inside_load):
    """Wrap torch's _get_build_directory for OEq's extension name.

    torch serialises builds with an advisory lock on <build dir>/lock and leaves the
    file behind (a killed build does too); OEq 0.7.0 waits while that file merely
    exists (5 minutes, then an error). Outside torch's own load() (inside_load.active
    unset) we answer with a directory that holds no lock file, which also keeps torch
    from creating a build directory that the prebuilt never uses.
    """
    def make(orig):
        def wrapped(name, verbose=False, *args, **kwargs):
            if name == EXTENSION and not getattr(inside_load, "active", False):
                return str(HERE)
            return orig(name, verbose, *args, **kwargs)
        return wrapped
    return make


def install_wheel_fallback(hooks: Hooks, torch, flags) -> None:
    """Make OEq's JIT build use the NVIDIA wheels (include_paths('cpu') plus the wheel's)."""
    cuda_libs = {"-lcuda", "-lcudart", "-lnvrtc", "-lcublas"}
    ce = hooks.ce

    def include_paths(orig):
        def wrapped(device_type="cpu", *args, **kwargs):
            if device_type == "cuda" and not torch.version.hip:
                return orig("cpu", *args, **kwargs) + list(flags.include_dirs)
            return orig(device_type, *args, **kwargs)
        return wrapped

    def library_paths(orig):
        def wrapped(device_type="cpu", *args, **kwargs):
            if device_type == "cuda" and not torch.version.hip:
                return orig("cpu", *args, **kwargs)[:1] + flags.runtime_dirs[:1]
            return orig(device_type, *args, **kwargs)
        return wrapped

    inside_load = threading.local()
    orig_build_dir = hooks.saved.get("_get_build_directory", ce._get_build_directory)

    def load(orig):
        def wrapped(name, *args, **kwargs):
            if name != EXTENSION:
                return orig(name, *args, **kwargs)
            ld = [a for a in kwargs.get("extra_ldflags") or [] if a not in cuda_libs]
            ld += flags.link_args() + [f"-Wl,-rpath,{d}" for d in flags.runtime_dirs]
            kwargs["extra_ldflags"] = ld
            before = _built_mtime(orig_build_dir, name)
            inside_load.active = True
            try:
                mod = orig(name, *args, **kwargs)
            finally:
                inside_load.active = False
            after = _built_mtime(orig_build_dir, name)
            hooks.last_state = "reused" if before is not None and before == after else "built"
            hooks.module = mod
            return mod
        return wrapped

    hooks.patch("include_paths", include_paths)
    hooks.patch("library_paths", library_paths)
    hooks.patch("load", load)
    hooks.patch("_get_build_directory", _lock_free_build_dir(inside_load))


def _built_mtime(build_dir, name):
    try:
        return os.stat(os.path.join(build_dir(name, False), f"{name}.so")).st_mtime_ns
    except OSError:
        return None
