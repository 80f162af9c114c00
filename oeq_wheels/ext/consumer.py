"""The consumer's own verdict: FastMACE's prebuilt_extension() on a fastmace-oeq-ext wheel.

FastMACE, not this project, decides whether its users get the prebuilt: it reads
fastmace_oeq_ext/manifest.json and compares it with the installed torch and
OpenEquivariance. So the gate runs FastMACE's pinned code itself (nothing is
re-implemented) on the wheel's unpacked package directory, for the install the wheel
is for: torch as pins.toml's consumer_torch, OEq as the variant's exact version, under
the CPython of the wheel's tag (FastMACE takes that from sys.version_info).
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

from .. import proc
from ..inputs import fetch, unpack, pythons
from ..files import default_cache
from ..pins import ExtVariant, Pins

# Runs under the wheel's CPython with only the consumer's package on the path; reads files only.
PROBE = r"""
import json, sys
from pathlib import Path
from fastmace.kernels import _oeq_runtime as rt
directory, torch, oeq, machine = sys.argv[1:5]
res = rt.prebuilt_extension(environ={}, versions={"torch": torch, "openequivariance": oeq},
                            package_directory=lambda: Path(directory), platform=lambda: ("linux", machine))
print(json.dumps({"usable": res.usable, "reason": res.reason, "extension_version": res.manifest.get("extension_version")}))
"""


def consumer_root(p: Pins, cache: Path | None = None) -> Path:
    """The pinned consumer's package, downloaded by sha256 and unpacked once into the cache."""
    cache = cache or default_cache()
    files = fetch.ensure(list(p.consumer.wheels), cache)
    return unpack.consumer_tree([(w, files[w.file]) for w in p.consumer.wheels], cache)


def ask(files: dict[str, bytes], python: str, ev: ExtVariant, *, torch: str | None = None, oeq: str | None = None,
        machine: str = "x86_64", cache: Path | None = None) -> dict:
    """FastMACE's answer for a wheel's package files (arcname -> bytes) in the install it is for.

    torch and oeq default to that install (consumer_torch, the variant's exact OEq); tests pass others.
    Returns {"usable", "reason", "extension_version"}; a probe that cannot run is a reason too.
    """
    p = ev.pins
    root = consumer_root(p, cache)
    try:
        interp = pythons.find(python)
    except pythons.PythonNotFound as exc:
        return {"usable": False, "reason": f"cannot ask {p.consumer.label}: {exc}", "extension_version": None}
    with tempfile.TemporaryDirectory(prefix="oeq-wheels-consumer-") as tmp:
        pkg = Path(tmp) / p.import_name
        for name, data in files.items():
            if name.startswith(p.import_name + "/") and name.count("/") == 1:
                pkg.mkdir(exist_ok=True)
                (pkg / name.split("/", 1)[1]).write_bytes(data)
        env = {"PYTHONPATH": str(root), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"}
        # A shared CPython may find its libpython only there (setup-python's, on GitHub's runner: make rehearse-ci).
        if os.environ.get("LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        res = proc.run([interp.executable, "-c", PROBE, str(pkg), torch or p.matrix.consumer_torch,
                        oeq or ev.oeq_exact, machine], capture_output=True, text=True, env=env, timeout=120)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        return {"usable": False, "reason": f"{p.consumer.label}'s check failed to run: {last}", "extension_version": None}
    return json.loads(res.stdout.strip().splitlines()[-1])


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def problems(files: dict[str, bytes], python: str, ev: ExtVariant, cache: Path | None = None) -> list[str]:
    """One line when FastMACE would refuse the wheel in the install it is for; [] when it accepts it."""
    answer = ask(files, python, ev, cache=cache)
    if answer["usable"] and answer["extension_version"] == ev.version:
        return []
    why = answer["reason"] or f"it reports extension_version {answer['extension_version']!r}, not {ev.version}"
    return [f"{ev.pins.consumer.label} would not use this wheel with torch {ev.pins.matrix.consumer_torch} and "
            f"openequivariance {ev.oeq_exact}: {why}"]
