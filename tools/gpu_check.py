#!/usr/bin/env python3
"""GPU proof for a fastmace-oeq-ext wheel: OEq with the prebuilt library against e3nn.

Run on a machine with an NVIDIA GPU, torch (CUDA 13), e3nn, the matching
fastmace-oeq-ext wheel and OpenEquivariance's Python package installed:

    python tools/gpu_check.py --out results.json      # prints a markdown table

Each check runs in a fresh process with g++, c++, ninja and nvcc shadowed by
failing sentinels and FASTMACE_OEQ_PREBUILT=1, so nothing can be compiled on
the host. TensorProduct forward, backward and double backward and
TensorProductConv forward and backward are compared with e3nn in float32 and
float64 (max abs error against OEq's tolerances). Cold start: fresh process to
first forward result with the prebuilt vs OEq's own JIT build (empty cache).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# OEq's own test tolerances (tests/batch_test.py and conv_test.py use them for float32 and float64).
TOL = {"tp": {"fwd": 1e-5, "bwd": 3e-4, "dbl": 3e-4}, "conv": {"fwd": 3e-4, "bwd": 3e-4}}

PROBLEMS = {
    # name: (irreps_in1, irreps_in2 (edge spherical harmonics), lmax of the output)
    "mace-128x-l3": ("128x0e+128x1o+128x2e", "1x0e+1x1o+1x2e+1x3o", 3),
    "mace-64x-l2": ("64x0e+64x1o+64x2e", "1x0e+1x1o+1x2e", 2),
    "nequip-32x-l2": ("32x0e+32x1o+32x2e", "1x0e+1x1o+1x2e", 2),
    "nequip-16x-l1": ("16x0e+16x1o", "1x0e+1x1o", 1),
}

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import fastmace_oeq_ext
fastmace_oeq_ext.activate()
import torch, numpy as np, e3nn.o3 as o3, openequivariance as oeq
from openequivariance._torch import extlib
assert extlib.BUILT_EXTENSION, extlib.BUILT_EXTENSION_ERROR
spec = json.loads(sys.argv[1])
dev = "cuda"
dt = {"float32": torch.float32, "float64": torch.float64}[spec["dtype"]]
npdt = {"float32": np.float32, "float64": np.float64}[spec["dtype"]]
X_ir, Y_ir = o3.Irreps(spec["in1"]), o3.Irreps(spec["in2"])
out, instr = [], []
for i, (mul, ir1) in enumerate(X_ir):
    for j, (_, ir2) in enumerate(Y_ir):
        for ir3 in ir1 * ir2:
            if ir3.l <= spec["lmax"]:
                instr.append((i, j, len(out), "uvu", True)); out.append((mul, ir3))
Z_ir = o3.Irreps(out)
ref = o3.TensorProduct(X_ir, Y_ir, Z_ir, instr, shared_weights=False, internal_weights=False).to(dev, dt)
prob = oeq.TPProblem(X_ir, Y_ir, Z_ir, instr, shared_weights=False, internal_weights=False,
                     irrep_dtype=npdt, weight_dtype=npdt)
g = torch.Generator(device=dev).manual_seed(0)
rnd = lambda *s: torch.randn(*s, device=dev, dtype=dt, generator=g)
res = {"first_result_s": None, "errors": {}}
err = lambda a, b: float((a - b).abs().max())

if spec["kind"] == "tp":
    tp = oeq.TensorProduct(prob, torch_op=True)
    n = 2000
    X, Y, W = rnd(n, X_ir.dim), rnd(n, Y_ir.dim), rnd(n, ref.weight_numel)
    Z = tp(X, Y, W); torch.cuda.synchronize()
    res["first_result_s"] = time.perf_counter() - t0
    res["errors"]["fwd"] = err(Z, ref(X, Y, W))
    G = rnd(n, Z_ir.dim)
    bw = []
    for f in (tp, ref):
        xs = [t.clone().requires_grad_(True) for t in (X, Y, W)]
        bw.append(torch.autograd.grad(f(*xs), xs, G))
    res["errors"]["bwd"] = max(err(a, b) for a, b in zip(*bw))
    g2 = torch.Generator(device=dev).manual_seed(1)
    D = [torch.randn(*t.shape, device=dev, dtype=dt, generator=g2) for t in (X, Y, W)]
    dbl = []
    for f in (tp, ref):
        xs = [t.clone().requires_grad_(True) for t in (X, Y, W)]
        gx = torch.autograd.grad(f(*xs), xs, G, create_graph=True)
        s = sum((a * d).sum() for a, d in zip(gx, D))
        dbl.append(torch.autograd.grad(s, xs))
    res["errors"]["dbl"] = max(err(a, b) for a, b in zip(*dbl))
    if spec.get("dump"):  # OEq's outputs, to compare the prebuilt with OEq's own JIT build
        torch.save({"fwd": Z, "bwd": bw[0], "dbl": dbl[0]}, spec["dump"])
else:
    conv = oeq.TensorProductConv(prob, torch_op=True, deterministic=False)
    nodes, edges = 500, 4000
    rows = torch.randint(0, nodes, (edges,), device=dev, generator=g)
    cols = torch.randint(0, nodes, (edges,), device=dev, generator=g)
    X, Y, W = rnd(nodes, X_ir.dim), rnd(edges, Y_ir.dim), rnd(edges, ref.weight_numel)
    def conv_ref(X, Y, W):
        msg = ref(X[cols], Y, W)
        return torch.zeros(nodes, Z_ir.dim, device=dev, dtype=dt).index_add(0, rows, msg)
    Z = conv(X, Y, W, rows, cols); torch.cuda.synchronize()
    res["first_result_s"] = time.perf_counter() - t0
    res["errors"]["fwd"] = err(Z, conv_ref(X, Y, W))
    G = rnd(nodes, Z_ir.dim)
    bw = []
    for f in (lambda *a: conv(*a, rows, cols), conv_ref):
        xs = [t.clone().requires_grad_(True) for t in (X, Y, W)]
        bw.append(torch.autograd.grad(f(*xs), xs, G))
    res["errors"]["bwd"] = max(err(a, b) for a, b in zip(*bw))
res["status"] = fastmace_oeq_ext.status()
res["library"] = extlib.extension_module.__file__
print("RESULT " + json.dumps(res))
"""

COLD = r"""
import os, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "torch":
    import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()
else:
    if sys.argv[1] == "prebuilt":
        import fastmace_oeq_ext; fastmace_oeq_ext.activate()
    import torch, openequivariance as oeq
    from openequivariance._torch import extlib
    assert extlib.BUILT_EXTENSION, extlib.BUILT_EXTENSION_ERROR
    p = oeq.TPProblem("32x0e+32x1o", "1x0e+1x1o", "32x0e+32x1o", [(0, 0, 0, "uvu", True), (1, 1, 0, "uvu", True)],
                      shared_weights=False, internal_weights=False)
    tp = oeq.TensorProduct(p, torch_op=True)
    X = torch.randn(10, 128, device="cuda"); Y = torch.randn(10, 4, device="cuda")
    W = torch.randn(10, p.weight_numel, device="cuda")
    tp(X, Y, W); torch.cuda.synchronize()
print("SECONDS", time.perf_counter() - t0)
"""


def sentinel_env(tmp: Path, log: Path) -> dict:
    d = tmp / "sentinels"
    d.mkdir(exist_ok=True)
    for tool in ("g++", "c++", "ninja", "nvcc"):
        (d / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\nexit 1\n')
        (d / tool).chmod(0o755)
    return dict(os.environ, PATH=f"{d}{os.pathsep}{os.environ['PATH']}", FASTMACE_OEQ_PREBUILT="1",
                TORCH_EXTENSIONS_DIR=str(tmp / "ext"))


def run_child(code: str, arg: str, env: dict) -> tuple[str, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code, arg], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({arg[:80]}):\n{r.stderr[-3000:]}")
    return r.stdout, wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    ap.add_argument("--cold-runs", type=int, default=3)
    args = ap.parse_args()
    import torch
    info = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip()
    except OSError:
        info["driver"] = "unknown"
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as t:
        tmp, log = Path(t), Path(t) / "sentinel.log"
        env = sentinel_env(tmp, log)
        for name, (in1, in2, lmax) in PROBLEMS.items():
            for kind in ("tp", "conv"):
                for dtype in ("float32", "float64"):
                    spec = {"in1": in1, "in2": in2, "lmax": lmax, "kind": kind, "dtype": dtype}
                    try:
                        out, _ = run_child(CHILD, json.dumps(spec), env)
                    except RuntimeError as exc:  # record it and go on: one run should show everything
                        ok = False
                        rows.append({"problem": name, "op": kind, "dtype": dtype, "check": "run",
                                     "max_abs_err": float("nan"), "tol": 0.0, "pass": False, "state": str(exc)})
                        print(exc, flush=True)
                        continue
                    res = json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][7:])
                    for check, e in res["errors"].items():
                        passed = e <= TOL[kind][check]
                        ok &= passed
                        rows.append({"problem": name, "op": kind, "dtype": dtype, "check": check,
                                     "max_abs_err": e, "tol": TOL[kind][check], "pass": passed,
                                     "state": res["status"]["state"]})
                    print(f"{name:15s} {kind:4s} {dtype:7s} " + " ".join(
                        f"{c}={e:.2e}" for c, e in res["errors"].items()), flush=True)
        sentinel_calls = log.read_text() if log.exists() else ""
        ok &= not sentinel_calls
        cold = {"torch": [], "prebuilt": [], "jit": []}
        try:
            measure_cold(cold, env, tmp, args.cold_runs)
        except RuntimeError as exc:
            ok = False
            print(exc, flush=True)
        # Same inputs through the prebuilt and through OEq's JIT-built library: identical results?
        same = {}
        for dtype in ("float32", "float64"):
            dumps = {}
            for label, e in (("prebuilt", env), ("jit", jit_env(tmp))):
                spec = {"in1": PROBLEMS["mace-64x-l2"][0], "in2": PROBLEMS["mace-64x-l2"][1], "lmax": 2,
                        "kind": "tp", "dtype": dtype, "dump": str(tmp / f"{label}-{dtype}.pt")}
                try:
                    run_child(CHILD, json.dumps(spec), e)
                    dumps[label] = torch.load(spec["dump"])
                except RuntimeError as exc:
                    print(exc, flush=True)
            if len(dumps) == 2:
                a, b = dumps["prebuilt"], dumps["jit"]
                diff = max(float((x - y).abs().max()) for k in a for x, y in zip(
                    a[k] if isinstance(a[k], (list, tuple)) else [a[k]], b[k] if isinstance(b[k], (list, tuple)) else [b[k]]))
                same[dtype] = diff
            ok &= same.get(dtype) == 0.0
    result = {"info": info, "rows": rows, "cold_start_s": cold, "sentinel_calls": sentinel_calls,
              "prebuilt_vs_jit_max_diff": same, "ok": ok}
    args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0 if ok else 1


def measure_cold(cold, env, tmp, runs):
    for _ in range(runs):
        cold["torch"].append(float(run_child(COLD, "torch", dict(os.environ))[0].split()[-1]))
        cold["prebuilt"].append(float(run_child(COLD, "prebuilt", env)[0].split()[-1]))
    # OEq's own JIT build, cold cache (host toolchain, no prebuilt): once, it is slow.
    cold["jit"].append(float(run_child(COLD, "jit", jit_env(tmp))[0].split()[-1]))


def jit_env(tmp: Path) -> dict:
    """OEq's stock JIT path: real compilers, the prebuilt switched off, its own build cache."""
    return dict(os.environ, FASTMACE_OEQ_PREBUILT="0", OEQ_CUDA_FROM_WHEELS="0",
                TORCH_EXTENSIONS_DIR=str(tmp / "jit-ext"))


def markdown(r: dict) -> str:
    i = r["info"]
    lines = [f"GPU check {i['date']}: {i['gpu']}, driver {i['driver']}, torch {i['torch']} (CUDA {i['cuda']}), "
             f"Python {i['python']}; every run with FASTMACE_OEQ_PREBUILT=1 and failing g++/c++/ninja/nvcc "
             f"sentinels (calls: {len(r['sentinel_calls'].splitlines())}).", "",
             "| problem | op | dtype | check | max abs err vs e3nn | tolerance | pass |",
             "|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['problem']} | {x['op']} | {x['dtype']} | {x['check']} | {x['max_abs_err']:.2e} | "
                     f"{x['tol']:.0e} | {'yes' if x['pass'] else 'NO'} |")
    c = r["cold_start_s"]
    if not all(c.values()):
        return "\n".join(lines + ["", f"cold start incomplete: {c}"])
    med = lambda v: sorted(v)[len(v) // 2]
    lines += ["", "| cold start, fresh process to first result | seconds |", "|---|---|",
              f"| import torch + first CUDA op | {med(c['torch']):.2f} |",
              f"| prebuilt (activate + import openequivariance + first TensorProduct) | {med(c['prebuilt']):.2f} |",
              f"| OEq JIT build, empty cache (same work) | {med(c['jit']):.2f} |",
              f"| JIT / prebuilt | {med(c['jit']) / med(c['prebuilt']):.1f}x |",
              "", "Prebuilt vs OEq's own JIT-built library, same inputs (mace-64x-l2 TensorProduct, fwd/bwd/double bwd), "
              f"max abs difference: {r.get('prebuilt_vs_jit_max_diff')}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
