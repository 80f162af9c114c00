"""The clean-install check: a fresh uv venv, FastMACE's own install steps with our wheels, nothing
to compile with, and FastMACE must use the prebuilt.

As the owner's seed describes it: a new uv virtual environment gets torch 2.14.1+cu130 (from
PyTorch's cu130 index, as FastMACE's README installs it; where that index cannot be reached, a
local stand-in serving PyPI's same binary under that version, checks.reversion),
cuequivariance-ops-torch-cu13 and `fastmace[oeq]` with our wheels (WHEEL_DIR and WHEEL_DIR-extra,
served as the one index of the site). g++, c++, ninja and nvcc are failing sentinels from before
the first install (C `gcc` stays: Triton builds its launcher with it), `CXX` is the g++ sentinel,
`FASTMACE_OEQ_PREBUILT=1`. Then `fastmace doctor` must say "host extension: prebuilt (...); no
compiler needed", and:
- on a GPU, tools/fastmace_smoke.py: a 20-step NVT of a 64-atom NaCl cell with a random-weight MACE
  model, which must run on the hybrid backend with the prebuilt host extension;
- without one, a stub libcuda.so.1 stands in for the driver and FastMACE's own calls run as far as a
  CPU allows: prebuilt_extension() usable, prepare_in_process(), then `import openequivariance`
  registers torch.ops.libtorch_tp_jit.
The sentinel log must stay empty throughout.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from fastmace_oeq_ext.cudaflags import DRIVER_SONAME

from .. import install_lines, pins as pins_mod, proc, driver_stub
from ..inputs import pythons
from . import sentinels, venvs
from ..errors import OeqWheelsError, UsageError
from ..files import keep_dir
from ..output import extra_dir
from ..gate_common import Verdict

REPO = Path(__file__).resolve().parents[2]
SMOKE_SCRIPT = REPO / "tools" / "fastmace_smoke.py"

# FastMACE's own calls, in the order a FastMACE run makes them; prints one JSON line (the tests use it too).
FASTMACE_PROBE = r"""
import json, os, sys, tempfile
from fastmace.kernels import _oeq_runtime as rt
from fastmace.cli import doctor
out = {}
pre = rt.prebuilt_extension()
out["usable"], out["reason"], out["extension_version"] = pre.usable, pre.reason, pre.manifest.get("extension_version")
item = doctor.check_oeq(doctor.Context(environ=os.environ, hash_models=False))
out["doctor_ok"], out["doctor"] = item.ok, item.detail
if pre.usable:
    cache = tempfile.TemporaryDirectory(prefix="fastmace-cache-")  # removed at exit, not left in /tmp
    plan, handles = rt.prepare_in_process(cache.name)
    out["extension"] = plan.extension
    import torch, openequivariance
    from openequivariance._torch import extlib
    out["ops"] = sorted(n for n in ("jit_tp_forward", "jit_tp_backward", "jit_conv_forward")
                        if hasattr(torch.ops.libtorch_tp_jit, n))
    out["module"] = getattr(extlib.extension_module, "__file__", None)
print("FASTMACE " + json.dumps(out))
"""
PREBUILT_LINE = "host extension: prebuilt ("


def judge(doctor_rc: int, doctor_out: str, run: dict | None, sentinel_log: str, gpu: bool) -> Verdict:
    """Pass only with the prebuilt reported by FastMACE's doctor, a working run and no compiler call."""
    reasons = []
    line = next((l.strip() for l in doctor_out.splitlines() if l.strip().startswith(PREBUILT_LINE)), None)
    if line is None or not line.endswith("no compiler needed"):
        reasons.append(f"fastmace doctor did not report the prebuilt (exit {doctor_rc}): "
                       + next((l.strip() for l in doctor_out.splitlines() if "host extension" in l), doctor_out[-300:]))
    if run is None:
        reasons.append("the FastMACE run failed")
    elif gpu:
        ext = run.get("oeq_extension") or {}
        if not run.get("ok") or run.get("backend") != "hybrid":
            reasons.append(f"the NVT smoke did not run on the hybrid backend: {run.get('error') or run.get('backend')}")
        if ext.get("source") != "prebuilt":
            reasons.append(f"FastMACE did not use the prebuilt host extension: {ext}")
    else:
        if not run.get("usable"):
            reasons.append(f"FastMACE refuses the prebuilt: {run.get('reason')}")
        elif (run.get("extension") or {}).get("source") != "prebuilt":
            reasons.append(f"FastMACE did not use the prebuilt: {run.get('extension')}")
        elif len(run.get("ops", [])) != 3:
            reasons.append(f"operators missing under torch.ops.libtorch_tp_jit: {run.get('ops')}")
    if sentinel_log.strip():
        reasons.append(f"a compiler or build tool was called: {sentinel_log.strip()[:300]}")
    return Verdict(Path("clean-install"), reasons)


def _python_for(arg: str | None) -> str:
    if arg and os.path.sep in arg:
        return arg
    return pythons.find(arg or "3.11").executable


def _reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=10).close()
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def run(wheel_dir: Path, python: str | None, cache: Path, keep: bool = False, torch_index: str | None = None) -> int:
    from ..release import site as site_mod
    from . import hosts
    pins = pins_mod.load()
    wheel_dir = wheel_dir.resolve()
    if not any(wheel_dir.glob("fastmace_oeq_ext-*.whl")):
        raise UsageError(f"clean-install: no fastmace_oeq_ext wheel in {wheel_dir}; build one first (make wheels)")
    base = _python_for(python)
    interp_tag = proc.run([base, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="oeq-clean-install-", dir=keep_dir()))  # a failed or --keep run stays
    log = work / "sentinel.log"
    venv, vpy = work / "venv", work / "venv" / "bin" / "python"
    say = lambda m: print(f"clean-install: {m}", flush=True)
    sbin = sentinels.make(work / "sentinels", log)
    # No configured indexes or caps: the steps are FastMACE's README's, with exactly the indexes named here.
    env = {k: v for k, v in venvs.pip_env().items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "CC", "CXX")
           and not k.startswith(("UV_INDEX", "UV_EXTRA_INDEX", "UV_FIND_LINKS", "UV_DEFAULT_INDEX"))}
    env.update(venvs.index_env())  # PyPI, as the tests reach it (their kept mirror of it, where they run one)
    env.update(PATH=f"{sbin}{os.pathsep}{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", CXX=str(sbin / "g++"),
               FASTMACE_OEQ_PREBUILT="1", FASTMACE_CACHE=str(work / "fastmace-cache"),
               TORCH_EXTENSIONS_DIR=str(work / "torch_extensions"))
    uv = [sys.executable, "-m", "uv"]
    install = uv + ["pip", "install", "-q", "--python", str(vpy)]
    try:
        say(f"fresh uv venv in {venv} ({base}); g++, c++, ninja and nvcc are sentinels from here on")
        _run(uv + ["venv", "-q", "--python", base, str(venv)], env)
        torch = f"torch=={pins.matrix.consumer_torch}"
        index = torch_index or pins.consumer.torch_index
        with _torch_index(index, pins, cache, interp_tag, work, say) as served:
            say(f"{install_lines.fastmace(pins)[0]}  (as {torch}, from {served})")
            # PyPI spelled as every test install spells it (venvs.pypi_index: the session's mirror, else uv's own
            # spelling): any other spelling is another index to uv's cache, which would then hold torch's NVIDIA
            # wheels a second time (~4 GB).
            _run(install + [torch, "--index-url", served, "--extra-index-url", venvs.pypi_index(),
                            "--index-strategy", "unsafe-best-match"], env)
        say(install_lines.fastmace(pins)[1])
        _run(install + [f"cuequivariance-ops-torch-cu{pins.matrix.cuda_major}"], env)
        wheels = [*wheel_dir.glob("*.whl"), *extra_dir(wheel_dir).glob("*.whl")]
        root = site_mod.write_site(work / "site", site_mod.from_outdir(extra_dir(wheel_dir), pins), pins)
        with hosts.pages(root, "oeq-wheels") as base_url:
            local = f"{base_url}{pins.oeq_binary.index_paths[0]}/"
            say(f"{install_lines.fastmace(pins)[2]}  (site served from {len(wheels)} local wheel(s))")
            _run(install + [f"{pins.consumer.wheel.name}[oeq]=={pins.consumer.wheel.version}",
                            "--extra-index-url", local], env)
        gpu = has_gpu()
        if gpu:
            env["OEQ_CUDA_DRIVER_LIBRARY"] = _driver_torch_loads(vpy, env)
        else:
            ext = Path(proc.run([str(vpy), "-c", "import importlib.util as u; print(u.find_spec('fastmace_oeq_ext')"
                                 ".submodule_search_locations[0])"], capture_output=True, text=True, check=True,
                                env=env).stdout.strip())
            stub_dir = driver_stub.stub_for_library(ext / "libtorch_tp_jit.so", work / "libcuda-stub").parent
            env.update(LD_LIBRARY_PATH=driver_stub.loader_path(stub_dir, env),
                       OEQ_CUDA_DRIVER_LIBRARY=str(stub_dir / DRIVER_SONAME))
            say("no GPU here: a stub libcuda.so.1 stands in for the driver")
        doc = proc.run([str(venv / "bin" / "fastmace"), "doctor", "--no-hash"], capture_output=True, text=True,
                       env=env, cwd=work)
        line = next((l.strip() for l in doc.stdout.splitlines() if "host extension" in l), doc.stdout.strip()[-300:])
        say(f"fastmace doctor: {line}")
        result = _smoke(vpy, env, work, say) if gpu else _probe(vpy, env, work, say)
        verdict = judge(doc.returncode, doc.stdout, result, log.read_text() if log.exists() else "", gpu)
        if verdict.ok:
            say("PASS: FastMACE uses the prebuilt host extension; no compiler or build tool was called")
            return 0
        say("FAIL: " + "; ".join(verdict.problems))
        keep = True
        return 1
    finally:
        if keep:
            say(f"kept {work} (sentinel log: {log})")
        else:
            shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _torch_index(index: str, pins: pins_mod.Pins, cache: Path, cp: str, work: Path, say):
    """PyTorch's cu130 index where it answers; else a local stand-in serving PyPI's same binary under that
    index's version (2.14.1+cu130). Yields the index URL."""
    from . import hosts, reversion
    if _reachable(index):
        yield index
        return
    standin = reversion.pytorch_standin(pins, cache, cp)
    say(f"{index} cannot be reached: a local stand-in serves PyPI's {pins.matrix.torch_wheel(cp).file} as "
        f"{pins.matrix.consumer_torch} (the same binary)")
    # Torch only (PyTorch's index has no fallback either; the rest comes from PyPI), at an address that stays
    # the same for this cache, so that uv keeps one copy of this wheel however many sessions install it.
    with hosts.pypiserver(standin, work / "torch-index.log", "--disable-fallback",
                          port=hosts.stable_port(str(standin.resolve()))) as root:
        yield root + "simple/"


def _run(cmd: list[str], env: dict) -> None:
    """Run an installer quietly; show its output only when it fails."""
    r = proc.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise OeqWheelsError(f"failed: {' '.join(map(str, cmd[2:]))}\n{(r.stdout + r.stderr)[-3000:]}")


def _probe(vpy: Path, env: dict, work: Path, say) -> dict | None:
    r = proc.run([str(vpy), "-W", "ignore", "-c", FASTMACE_PROBE], capture_output=True, text=True, env=env, cwd=work)
    lines = [l for l in r.stdout.splitlines() if l.startswith("FASTMACE ")]
    if not lines:
        say(f"FastMACE's calls failed:\n{r.stderr[-3000:]}")
        return None
    out = json.loads(lines[-1][len("FASTMACE "):])
    say(f"FastMACE: prebuilt usable={out['usable']} ({out.get('extension_version')}); host extension "
        f"{(out.get('extension') or {}).get('source')}; ops {out.get('ops')}; loaded {out.get('module')}")
    return out


def _smoke(vpy: Path, env: dict, work: Path, say) -> dict | None:
    record = work / "smoke.json"
    r = proc.run([str(vpy), str(SMOKE_SCRIPT), str(record)], capture_output=True, text=True, env=env, cwd=work)
    if not record.is_file():
        say(f"the NVT smoke wrote no record (exit {r.returncode}):\n{r.stderr[-3000:]}")
        return None
    out = json.loads(record.read_text())
    ext = out.get("oeq_extension") or {}
    say(f"NVT smoke: backend {out.get('backend')}, host extension {ext.get('source')} "
        f"({ext.get('extension_version')}), {out.get('steps')} steps, exit {r.returncode}")
    return out


def _driver_torch_loads(vpy: Path, env: dict) -> str:
    """The libcuda.so.1 torch maps: FastMACE searches a fixed list of folders, which may miss it."""
    code = ("import torch; torch.cuda.init()\n"
            "print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcuda.so' in l))")
    return proc.run([str(vpy), "-c", code], capture_output=True, text=True, check=True, env=env).stdout.strip()


def has_gpu() -> bool:
    """An NVIDIA GPU answers here (else a stub libcuda.so.1 stands in for the driver)."""
    return shutil.which("nvidia-smi") is not None and \
        proc.run(["nvidia-smi"], capture_output=True).returncode == 0
