#!/usr/bin/env python3
"""GPU proof: OEq's host extension from our wheels against e3nn, through both paths.

Run on a machine with an NVIDIA GPU, torch (CUDA 13), e3nn, the binary
openequivariance wheel and the matching fastmace-oeq-ext wheel installed:

    python tools/gpu_check.py --wheel OEQ.whl --wheel EXT.whl --commit SHA --out records/runs/NAME.json

It writes a run record (oeq_wheels/checks/run_records.py: the commit, the machine, each --wheel's sha256
computed here, every result) and prints a markdown table of it.

Two paths are checked, each in fresh processes with g++, c++, ninja and nvcc
shadowed by failing sentinels and FASTMACE_OEQ_PREBUILT=1, so nothing can be
compiled on the host:
  stable    OEq loads its own precompiled stable-ABI extension (our binary OEq wheel);
  prebuilt  OEQ_JIT_EXTENSION=1 sends OEq down its JIT path, which fastmace_oeq_ext
            serves with the exact-match prebuilt libtorch_tp_jit.so.
TensorProduct forward, backward and double backward and TensorProductConv forward
and backward are compared with e3nn in float32 and float64 (max abs error against
OEq's tolerances); the two paths are also compared with each other on the same
inputs. Cold start: fresh process to first forward result for each path and for
OEq's own JIT build (empty cache, real compilers).
"""
from __future__ import annotations

import argparse
import json
import os
import re
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
    if spec.get("dump"):
        torch.save({"fwd": Z, "bwd": bw[0]}, spec["dump"])
res["status"] = fastmace_oeq_ext.status()
res["library"] = extlib.extension_module.__file__
res["precompiled"] = extlib.USE_PRECOMPILED_EXTENSION
print("RESULT " + json.dumps(res))
"""

COLD = r"""
import os, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "torch":
    import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()
else:
    if sys.argv[1] in ("prebuilt", "stable"):
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


# What each path expects from fastmace_oeq_ext.status() and OEq's extlib.
PATHS = {"stable": ("oeq-precompiled", True), "prebuilt": ("prebuilt", False)}


def sentinel_env(tmp: Path, log: Path, path: str) -> dict:
    d = tmp / "sentinels"
    d.mkdir(exist_ok=True)
    for tool in ("g++", "c++", "ninja", "nvcc"):
        (d / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\nexit 1\n')
        (d / tool).chmod(0o755)
    # CXX too: a machine may preset it to a compiler's absolute path (the GPU machine's /opt/gcc/bin/g++), which
    # torch's extension builder would take past the PATH sentinels.
    env = dict(os.environ, PATH=f"{d}{os.pathsep}{os.environ['PATH']}", FASTMACE_OEQ_PREBUILT="1",
               TORCH_EXTENSIONS_DIR=str(tmp / "ext"), CXX=str(d / "c++"))
    if path == "prebuilt":
        env["OEQ_JIT_EXTENSION"] = "1"  # OEq skips its stable extension; our hooks serve its JIT load
    return env


def run_child(code: str, arg: str, env: dict) -> tuple[str, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code, arg], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({arg[:80]}):\n{r.stderr[-3000:]}")
    return r.stdout, wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the run record to write (JSON)")
    ap.add_argument("--wheel", type=Path, action="append", default=[], required=True,
                    help="a wheel installed for this run (repeat): its sha256, computed here, goes in the record")
    ap.add_argument("--commit", default=os.environ.get("OEQ_WHEELS_COMMIT", ""),
                    help="the commit this checkout is (the GPU machine's copy has no .git)")
    ap.add_argument("--note", action="append", default=[], help="a sentence for the record's notes (repeat)")
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--paths", default="stable,prebuilt", help="comma-separated: stable, prebuilt")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help=f"comma-separated subset of {', '.join(PROBLEMS)}")
    args = ap.parse_args()
    if not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        ap.error("--commit (or OEQ_WHEELS_COMMIT) must be the 40-hex commit of this checkout")
    for w in args.wheel:
        if not w.is_file():
            ap.error(f"--wheel {w}: no such file")
    paths = [p for p in args.paths.split(",") if p]
    problems = {k: PROBLEMS[k] for k in args.problems.split(",") if k}
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
        for path in paths:
            env = sentinel_env(tmp, log, path)
            want_state, want_pre = PATHS[path]
            for name, (in1, in2, lmax) in problems.items():
                for kind in ("tp", "conv"):
                    for dtype in ("float32", "float64"):
                        spec = {"in1": in1, "in2": in2, "lmax": lmax, "kind": kind, "dtype": dtype,
                                "dump": str(tmp / f"{path}-{name}-{kind}-{dtype}.pt")}
                        try:
                            out, _ = run_child(CHILD, json.dumps(spec), env)
                        except RuntimeError as exc:  # record it and go on: one run should show everything
                            ok = False
                            rows.append({"path": path, "problem": name, "op": kind, "dtype": dtype, "check": "run",
                                         "max_abs_err": float("nan"), "tol": 0.0, "pass": False, "state": str(exc)})
                            print(exc, flush=True)
                            continue
                        res = json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][7:])
                        right_path = res["status"]["state"] == want_state and res["precompiled"] == want_pre
                        ok &= right_path
                        for check, e in res["errors"].items():
                            passed = e <= TOL[kind][check] and right_path
                            ok &= passed
                            rows.append({"path": path, "problem": name, "op": kind, "dtype": dtype, "check": check,
                                         "max_abs_err": e, "tol": TOL[kind][check], "pass": passed,
                                         "state": res["status"]["state"], "library": res["library"]})
                        print(f"{path:8s} {name:15s} {kind:4s} {dtype:7s} {res['status']['state']:15s} " + " ".join(
                            f"{c}={e:.2e}" for c, e in res["errors"].items()), flush=True)
        sentinel_calls = log.read_text() if log.exists() else ""
        ok &= not sentinel_calls
        # The two paths on the same inputs (same seeds): how far apart are their outputs?
        same = {}
        if len(paths) == 2:
            for f in sorted(tmp.glob(f"{paths[0]}-*.pt")):
                g = tmp / f.name.replace(f"{paths[0]}-", f"{paths[1]}-", 1)
                if g.exists():
                    a, b = torch.load(f), torch.load(g)
                    flat = lambda v: list(v) if isinstance(v, (list, tuple)) else [v]
                    same[f.stem.split("-", 1)[1]] = max(float((x - y).abs().max()) for k in a
                                                        for x, y in zip(flat(a[k]), flat(b[k])))
        cold = {"torch": [], **{p: [] for p in paths}, "jit": []}
        try:
            measure_cold(cold, {p: sentinel_env(tmp, log, p) for p in paths}, tmp, args.cold_runs)
        except RuntimeError as exc:
            ok = False
            print(exc, flush=True)
    result = {"info": info, "rows": rows, "cold_start_s": cold, "sentinel_calls": sentinel_calls,
              "paths_max_diff": same, "ok": ok}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: run_records is standard library
    from oeq_wheels.checks import run_records
    run_records.write(args.out, "tools/gpu_check.py " + " ".join(sys.argv[1:]), args.commit,
                      {"device": info["gpu"], "driver": info["driver"], "python": info["python"],
                       "torch": info["torch"], "cuda": info["cuda"]}, args.wheel, ok, result, args.note, info["date"])
    print(markdown(result))
    return 0 if ok else 1


def measure_cold(cold, envs, tmp, runs):
    for _ in range(runs):
        cold["torch"].append(float(run_child(COLD, "torch", dict(os.environ))[0].split()[-1]))
        for path, env in envs.items():
            cold[path].append(float(run_child(COLD, path, env)[0].split()[-1]))
    # OEq's own JIT build, cold cache (host toolchain, no prebuilt): once, it is slow.
    cold["jit"].append(float(run_child(COLD, "jit", jit_env(tmp))[0].split()[-1]))


def jit_env(tmp: Path) -> dict:
    """OEq's stock JIT path: real compilers, the prebuilt switched off, its own build cache."""
    return dict(os.environ, FASTMACE_OEQ_PREBUILT="0", OEQ_CUDA_FROM_WHEELS="0", OEQ_JIT_EXTENSION="1",
                TORCH_EXTENSIONS_DIR=str(tmp / "jit-ext"))


def markdown(r: dict) -> str:
    i = r["info"]
    lines = [f"GPU check {i['date']}: {i['gpu']}, driver {i['driver']}, torch {i['torch']} (CUDA {i['cuda']}), "
             f"Python {i['python']}; every run with FASTMACE_OEQ_PREBUILT=1 and failing g++/c++/ninja/nvcc "
             f"sentinels (calls: {len(r['sentinel_calls'].splitlines())}).", "",
             "| path | problem | op | dtype | check | max abs err vs e3nn | tolerance | pass |",
             "|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['path']} | {x['problem']} | {x['op']} | {x['dtype']} | {x['check']} | "
                     f"{x['max_abs_err']:.2e} | {x['tol']:.0e} | {'yes' if x['pass'] else 'NO'} |")
    if r["paths_max_diff"]:
        lines += ["", "| same inputs, stable vs prebuilt | max abs difference (fwd, bwd, double bwd) |", "|---|---|"]
        lines += [f"| {k} | {v:.2e} |" for k, v in sorted(r["paths_max_diff"].items())]
    c = r["cold_start_s"]
    if not all(c.values()):
        return "\n".join(lines + ["", f"cold start incomplete: {c}"])
    med = lambda v: sorted(v)[len(v) // 2]
    lines += ["", "| cold start, fresh process to first result (median) | seconds |", "|---|---|",
              f"| import torch + first CUDA op | {med(c['torch']):.2f} |"]
    labels = {"stable": "OEq's stable extension from our binary wheel", "prebuilt": "exact-match prebuilt (OEQ_JIT_EXTENSION=1)"}
    lines += [f"| {labels[p]}: activate + import openequivariance + first TensorProduct | {med(c[p]):.2f} |"
              for p in c if p in labels]
    lines += [f"| OEq JIT build, empty cache (same work) | {med(c['jit']):.2f} |"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
