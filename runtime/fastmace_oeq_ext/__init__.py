"""Prebuilt OpenEquivariance host extension (libtorch_tp_jit) for one torch/CUDA/CPython build.

check() decides, from manifest.json and the installed distributions alone (no
torch or OEq import), whether the shipped library matches this environment.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
ENV_PREBUILT = "FASTMACE_OEQ_PREBUILT"


@dataclass(frozen=True)
class Decision:
    usable: bool
    reason: str           # one line
    library: str | None   # path of the prebuilt library when usable

    def __bool__(self) -> bool:
        return self.usable


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch_build() -> dict | None:
    """torch's version.py, read as text from its distribution (importing torch costs seconds)."""
    try:
        files = metadata.distribution("torch").files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/") == "torch/version.py":
            text = Path(f.locate()).read_text()
            out = {}
            for line in text.splitlines():
                for key in ("__version__", "cuda", "git_version"):
                    if line.startswith(key) and "=" in line:
                        val = line.split("=", 1)[1].strip()
                        out[key] = val.strip("'\"") if val != "None" else None
            return out
    return None


def _torch_cxx11_abi() -> int | None:
    """The C++ ABI torch was built with: only known once torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))


def load_manifest(path: Path = MANIFEST) -> dict:
    return json.loads(path.read_text())


def check(manifest_path: Path | None = None, environment: dict | None = None) -> Decision:
    """Does the prebuilt library match this environment exactly? Returns the decision and why.

    environment (for tests and callers that already know): keys torch_version,
    torch_cuda, cxx11_abi, oeq_version, python_tag, system, machine.
    """
    path = manifest_path or MANIFEST
    try:
        m = load_manifest(path)
        want_torch, want_cuda = m["torch"]["version"], m["torch"]["cuda"]
        want_abi, want_oeq = int(m["torch"]["cxx11_abi"]), m["openequivariance"]["version"]
        want_py, lib = m["python"]["tag"], m["library"]
    except FileNotFoundError:
        return Decision(False, f"manifest missing: {path}", None)
    except (ValueError, KeyError, TypeError) as exc:
        return Decision(False, f"manifest unreadable ({path}): {type(exc).__name__}: {exc}", None)
    env = dict(environment or {})
    if "torch_version" not in env:
        build = _torch_build()
        if build is None:
            return Decision(False, "torch is not installed", None)
        env.setdefault("torch_version", build.get("__version__"))
        env.setdefault("torch_cuda", build.get("cuda"))
    env.setdefault("cxx11_abi", _torch_cxx11_abi())
    env.setdefault("oeq_version", _dist_version("openequivariance"))
    env.setdefault("python_tag", f"cp{sys.version_info[0]}{sys.version_info[1]}")
    env.setdefault("system", platform.system())
    env.setdefault("machine", platform.machine())

    tv = env["torch_version"] or ""
    release, _, local = tv.partition("+")
    if release != want_torch:
        return Decision(False, f"torch {tv} installed, library built for torch {want_torch}", None)
    # PyPI's CUDA 13.0 build says 2.14.1+cu130 in version.py while its distribution
    # version is plain 2.14.1: both are the same binary. The local tag must agree with cuda.
    if env["torch_cuda"] != want_cuda:
        return Decision(False, f"torch is built for CUDA {env['torch_cuda']}, library for CUDA {want_cuda}", None)
    if local and local != "cu" + want_cuda.replace(".", ""):
        return Decision(False, f"torch {tv} is a {local} build, library built for cu{want_cuda.replace('.', '')}", None)
    if env["cxx11_abi"] is not None and int(env["cxx11_abi"]) != want_abi:
        return Decision(False, f"torch uses C++11 ABI={env['cxx11_abi']}, library built with ABI={want_abi}", None)
    if env["oeq_version"] is None:
        return Decision(False, "openequivariance is not installed", None)
    if env["oeq_version"] != want_oeq:
        return Decision(False, f"openequivariance {env['oeq_version']} installed, library built for {want_oeq}", None)
    if env["python_tag"] != want_py:
        return Decision(False, f"Python {env['python_tag']} running, library built for {want_py}", None)
    if (env["system"], env["machine"]) != ("Linux", "x86_64"):
        return Decision(False, f"platform {env['system']} {env['machine']}, library built for Linux x86_64", None)
    so = path.parent / lib["file"]
    if not so.is_file():
        return Decision(False, f"library missing: {so}", None)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    if digest != lib["sha256"]:
        return Decision(False, f"library {so.name} sha256 {digest[:12]}... differs from the manifest's "
                               f"{lib['sha256'][:12]}... (damaged or replaced)", None)
    return Decision(True, f"matches torch {tv}, openequivariance {want_oeq}, {want_py}, Linux x86_64", str(so))


def library_path() -> str:
    return str(HERE / load_manifest()["library"]["file"])
