"""The clean-install check: a fresh venv, nothing to compile with, and OEq must work.

A new virtual environment gets torch (the pinned CUDA 13.0 build), OpenEquivariance
0.7.0's Python package (a pure wheel made from the pinned sdist: its own build
downloads LibTorch, which fails offline) and fastmace-oeq-ext from WHEEL_DIR only.
Then g++, c++, ninja and nvcc are shadowed by sentinels that log and fail (the C
compiler gcc stays: Triton needs it), FASTMACE_OEQ_PREBUILT=1, and the doctor and
a smoke run. Without a GPU a generated libcuda.so.1 stub stands in for the driver;
the smoke then goes as far as a CPU allows: OEq imports with the prebuilt library,
its operators are registered, a MACE-like TensorProduct problem is built, and
creating the kernel stops at the missing GPU, never at a compiler.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import pins as pins_mod, proc, pythons, sentinels, stub
from ..errors import OeqWheelsError, UsageError
from ..oeq import wheel as oeqpy
from ..verify import Verdict

SMOKE = r"""
import json, sys
import fastmace_oeq_ext
out = {"activate": fastmace_oeq_ext.activate()}
import torch, openequivariance as oeq
from openequivariance._torch import extlib
out["built"] = bool(extlib.BUILT_EXTENSION)
out["library"] = getattr(extlib.extension_module, "__file__", None)
out["ops"] = [n for n in ("jit_tp_forward", "jit_tp_backward", "jit_conv_forward")
              if hasattr(torch.ops.libtorch_tp_jit, n)]
X_ir, Y_ir = oeq.Irreps("128x0e+128x1o+128x2e"), oeq.Irreps("1x0e+1x1o+1x2e+1x3o")
instr, outs = [], []
for i, (mul, ir1) in enumerate(X_ir):
    for j, (_, ir2) in enumerate(Y_ir):
        for ir3 in ir1 * ir2:
            if ir3.l <= 3:
                instr.append((i, j, len(outs), "uvu", True)); outs.append((mul, ir3))
problem = oeq.TPProblem(X_ir, Y_ir, oeq.Irreps(outs), instr, shared_weights=False, internal_weights=False)
out["weight_numel"] = problem.weight_numel
out["cuda_available"] = torch.cuda.is_available()
if not out["cuda_available"]:  # OEq's kernel setup exits the process without a device
    out["stopped_at"] = "no CUDA device: TensorProduct kernels need a GPU (everything before them ran)"
    out["status"] = fastmace_oeq_ext.status()
    print("SMOKE " + json.dumps(out)); sys.exit(0)
try:
    tp = oeq.TensorProduct(problem, torch_op=True)
    X = torch.randn(4, X_ir.dim, device="cuda"); Y = torch.randn(4, Y_ir.dim, device="cuda")
    W = torch.randn(4, problem.weight_numel, device="cuda")
    out["forward_norm"] = float(tp(X, Y, W).norm())
    out["stopped_at"] = None
except Exception as exc:  # expected without a GPU
    out["stopped_at"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
out["status"] = fastmace_oeq_ext.status()
print("SMOKE " + json.dumps(out))
"""


def judge(doctor_rc: int, doctor_out: str, smoke: dict | None, sentinel_log: str, gpu: bool) -> Verdict:
    """Pass only with the prebuilt reported by the doctor, a working smoke and no compiler call."""
    reasons = []
    if doctor_rc != 0 or not doctor_out.startswith("host extension: prebuilt ("):
        reasons.append(f"doctor did not report the prebuilt (exit {doctor_rc}): {doctor_out.strip()[:300]}")
    if smoke is None:
        reasons.append("smoke run failed")
    else:
        if not smoke.get("built") or smoke.get("status", {}).get("state") != "prebuilt":
            reasons.append(f"OEq did not get the prebuilt library: {smoke.get('status')}")
        if len(smoke.get("ops", [])) != 3:
            reasons.append(f"operators missing under torch.ops.libtorch_tp_jit: {smoke.get('ops')}")
        if gpu and smoke.get("forward_norm") is None:
            reasons.append(f"TensorProduct failed on the GPU: {smoke.get('stopped_at')}")
    if sentinel_log.strip():
        reasons.append(f"a compiler or build tool was called: {sentinel_log.strip()[:300]}")
    return Verdict(Path("clean-install"), reasons)


def _python_for(arg: str | None) -> str:
    if arg and os.path.sep in arg:
        return arg
    return pythons.find(arg or "3.11").executable


def run(wheel_dir: Path, python: str | None, cache: Path, keep: bool = False) -> int:
    pins = pins_mod.load()
    wheel_dir = wheel_dir.resolve()
    if not any(wheel_dir.glob("fastmace_oeq_ext-*.whl")):
        raise UsageError(f"clean-install: no fastmace_oeq_ext wheel in {wheel_dir}; build one first (make wheels)")
    base = _python_for(python)
    work = Path(tempfile.mkdtemp(prefix="oeq-clean-install-"))
    log = work / "sentinel.log"
    venv, vpy = work / "venv", work / "venv" / "bin" / "python"
    say = lambda m: print(f"clean-install: {m}", flush=True)
    try:
        say(f"fresh venv in {venv} ({base})")
        proc.run([base, "-m", "venv", str(venv)], check=True)
        pip = [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        say(f"installing torch=={pins.matrix.torch_version} (CUDA {pins.matrix.cuda} build)")
        _pip(pip + [f"torch=={pins.matrix.torch_version}"])
        oeq_whl = oeqpy.build_pure(pins, work / "oeq", cache)
        say(f"installing {oeq_whl.name} (OEq's Python package from the pinned sdist) and its dependencies")
        _pip(pip + [str(oeq_whl)])
        # Our package from WHEEL_DIR only: no index, no configured find-links.
        env_only = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
        env_only["PIP_CONFIG_FILE"] = os.devnull
        _pip(pip + ["--no-index", "--find-links", str(wheel_dir), f"{pins.package_name}=={pins.version}"], env_only)
        # The venv's own package: no PYTHONPATH (a checkout's runtime/ must not stand in for it).
        site = Path(proc.run([str(vpy), "-c", "import fastmace_oeq_ext, os; print(os.path.dirname(fastmace_oeq_ext.__file__))"],
                                   capture_output=True, text=True, check=True, env=env_only).stdout.strip())
        env = _sentinel_env(work, log, venv)
        gpu = has_gpu()
        if not gpu:
            stub_dir = stub.stub_for_library(site / "libtorch_tp_jit.so", work / "libcuda-stub").parent
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(stub_dir), env.get("LD_LIBRARY_PATH")]))
            say("no GPU here: a stub libcuda.so.1 stands in for the driver")
        doc = proc.run([str(vpy), "-m", "fastmace_oeq_ext"], capture_output=True, text=True, env=env, cwd=work)
        say(f"doctor: {doc.stdout.strip()}")
        sm = proc.run([str(vpy), "-W", "ignore", "-c", SMOKE], capture_output=True, text=True, env=env, cwd=work)
        lines = [l for l in sm.stdout.splitlines() if l.startswith("SMOKE ")]
        smoke = json.loads(lines[-1][6:]) if lines else None
        if smoke:
            say(f"smoke: OEq extension {'prebuilt' if smoke['built'] else 'NOT loaded'} from {smoke['library']}; "
                f"ops {smoke['ops']}; MACE-like problem with {smoke['weight_numel']} weights; "
                + (f"forward |Z|={smoke['forward_norm']:.4g}" if smoke.get("forward_norm") is not None
                   else f"stopped at: {smoke['stopped_at']}"))
        else:
            say(f"smoke failed:\n{sm.stderr[-3000:]}")
        verdict = judge(doc.returncode, doc.stdout, smoke, log.read_text() if log.exists() else "", gpu)
        if verdict.ok:
            say("PASS: prebuilt host extension, no compiler or build tool called")
            return 0
        say("FAIL: " + "; ".join(verdict.problems))
        keep = True
        return 1
    finally:
        if keep:
            say(f"kept {work} (sentinel log: {log})")
        else:
            shutil.rmtree(work, ignore_errors=True)


def has_gpu() -> bool:
    """An NVIDIA GPU answers here (else a stub libcuda.so.1 stands in for the driver)."""
    return shutil.which("nvidia-smi") is not None and \
        proc.run(["nvidia-smi"], capture_output=True).returncode == 0


def _pip(cmd: list[str], env: dict | None = None) -> None:
    """Run pip quietly; show its output only when it fails."""
    r = proc.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise OeqWheelsError(f"pip failed: {' '.join(cmd[3:])}\n{(r.stdout + r.stderr)[-3000:]}")


def _sentinel_env(work: Path, log: Path, venv: Path) -> dict:
    d = sentinels.make(work / "sentinels", log)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    env.update(PATH=f"{d}{os.pathsep}{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", FASTMACE_OEQ_PREBUILT="1",
               TORCH_EXTENSIONS_DIR=str(work / "torch_extensions"))
    return env
