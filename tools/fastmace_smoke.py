#!/usr/bin/env python3
"""Smoke test: FastMACE 1.0.0 runs NVT MD on its hybrid cuEquivariance + OpenEquivariance backend.

    python3 tools/fastmace_smoke.py OUT.json [--model PATH] [--steps 20] [--precision float64]
    python3 tools/fastmace_smoke.py --compare A.json B.json

The MACE model is built here with mace-torch 0.3.16 and **random weights**: a small ScaleShiftMACE
for Na and Cl with MACE-MP-0's interaction class (RealAgnosticResidualInteractionBlock), 32x0e+32x1o
hidden features, two interactions, max_ell 3, correlation 3, r_max 5 A, and the interaction energy
scaled by 20 so that the forces are of order 0.1-1 eV/A. It is physically meaningless and only
exercises the code paths; no weights are downloaded. The seed fixes the weights, not the file's bytes
(torch.save writes a random serialization id), so runs that are compared share one file (--model, or
--make-model PATH first). It is written with ``torch.save`` (a whole pickled model, the format MACE's
calculator and ``fm.load`` read) in a child process, because FastMACE must prepare OpenEquivariance's
host extension before MACE is first imported in a process (otherwise it refuses the hybrid backend).

The run goes through FastMACE's public API only: ``fm.load(path, sha256=...)``,
``fm.ForceField(model, atoms, precision=...)``, ``fm.integrators.Langevin``, ``fm.Simulation`` with
``engine=EngineConfig(backend="hybrid")`` and ``fallback=FallbackConfig(fallback="refuse")`` (a plan
or build that cannot be hybrid raises instead of falling back to plain cuEq), ``Simulation.add_sink``,
``run``, ``committed`` and ``close``. The structure is a 64-atom NaCl rock-salt cell (2x2x2
conventional cells, a = 5.64 A) from ASE, rattled by 0.05 A and given Maxwell-Boltzmann velocities
at 300 K, both seeded. The JSON records FastMACE's version, the backend the plan chose, the OEq
host-extension record (FastMACE's ``RuntimePlan.extension`` from ``prepare_in_process``: source
"prebuilt", "built", "reused", ...; path; extension_version), the energy of every step, the final
forces and positions, and timings. Anything that fails is written to the JSON ("ok": false, "error")
and the exit code is 1; a backend other than the one required is exit code 3.

``--compare`` prints the largest energy difference (per atom, over all steps) and the largest force
component difference of the final step, and exits 0 only when both are within FastMACE's own gate
floors (``fastmace.planner.selfcheck.FLOORS``, see ``FLOORS`` below).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

# FastMACE's own tolerance for calling a production path equal to its reference: the absolute floors of
# SPEC §12.3, defined in fastmace/planner/selfcheck.py (FLOORS, next to RATIO = 2.0 of the gate's ratio
# rule): 0.01 meV/atom for the energy, 1e-5 eV/A for the largest force component, 1e-7 eV/A^3 for stress.
# The gate passes a quantity when the production error is at most max(2 x the float32 yardstick's error,
# floor); two runs of one plan on one GPU have no yardstick between them, so the floors alone apply here.
# (The per-module rewrite self-check of SPEC §6.4 is fastmace/rewrites/registry.py THRESHOLDS: relative
# 1e-10 in float64, 1e-4 in float32.) --compare reads FLOORS from the installed FastMACE when it imports,
# else uses these copies.
FLOORS = {"energy_meV_per_atom": 0.01, "force_eV_per_A": 1e-5, "stress_eV_per_A3": 1e-7}

ELEMENTS = (11, 17)  # Na, Cl
LATTICE_A = 5.64
REPEAT = (2, 2, 2)
RATTLE_A = 0.05
MODEL_TAG = "v1"  # in the model file's name: change it with build_model's settings
TEMPERATURE_K = 300.0
TIMESTEP_FS = 0.5
FRICTION_PER_FS = 0.01


# --------------------------------------------------------------------------- the random-weight model


def build_model(path: str, seed: int) -> None:
    """Write a random-weight ScaleShiftMACE for Na and Cl to ``path`` (run in a child process)."""
    sys.modules["openequivariance"] = None  # MACE only probes it; nothing here needs OEq's extension
    import numpy as np
    import torch
    from mace import modules  # first: mace sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which e3nn 0.4.4 needs
    from e3nn import o3

    torch.set_default_dtype(torch.float64)
    torch.manual_seed(seed)
    np.random.seed(seed)
    interaction = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    model = modules.ScaleShiftMACE(
        r_max=5.0, num_bessel=8, num_polynomial_cutoff=5, max_ell=3,
        interaction_cls=interaction, interaction_cls_first=interaction, num_interactions=2,
        num_elements=len(ELEMENTS), hidden_irreps=o3.Irreps("32x0e+32x1o"), MLP_irreps=o3.Irreps("16x0e"),
        atomic_energies=np.array([-1.30, -1.85]), avg_num_neighbors=20.0, atomic_numbers=list(ELEMENTS),
        correlation=3, gate=torch.nn.functional.silu, radial_MLP=[32, 32, 32],
        atomic_inter_scale=20.0, atomic_inter_shift=0.0)
    model = model.to(torch.float64).eval()
    temporary = f"{path}.{os.getpid()}.part"
    torch.save(model, temporary)
    os.replace(temporary, path)


def ensure_model(path: str, seed: int) -> dict:
    """Build the model file in a child interpreter unless it exists; returns its record."""
    started = time.perf_counter()
    built = False
    if not os.path.isfile(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, os.path.abspath(__file__), "--make-model", path, "--seed", str(seed)],
                       check=True)
        built = True
    return {"path": os.path.abspath(path), "sha256": sha256_of(path), "built_now": built,
            "seconds": round(time.perf_counter() - started, 3),
            "seed": seed if built else "built before (--make-model)",
            "weights": "random (seeded)",
            "architecture": "ScaleShiftMACE, RealAgnosticResidualInteractionBlock x2, 32x0e+32x1o, max_ell 3, "
                            "correlation 3, r_max 5.0, elements Na Cl"}


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- helpers


def structure(seed: int):
    """64-atom NaCl rock salt (2x2x2 conventional cells), rattled, Maxwell-Boltzmann velocities; seeded."""
    import numpy as np
    from ase.build import bulk
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution, Stationary

    atoms = bulk("NaCl", "rocksalt", a=LATTICE_A, cubic=True).repeat(REPEAT)
    atoms.rattle(stdev=RATTLE_A, seed=seed)
    MaxwellBoltzmannDistribution(atoms, temperature_K=TEMPERATURE_K, rng=np.random.default_rng(seed))
    Stationary(atoms)
    return atoms


def versions() -> dict:
    from importlib import metadata
    names = ("fastmace", "torch", "mace-torch", "e3nn", "ase", "cuequivariance", "cuequivariance-torch",
             "cuequivariance-ops-torch-cu13", "cuequivariance-ops-cu13", "openequivariance", "fastmace-oeq-ext",
             "triton", "numpy", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-crt", "nvidia-cuda-cccl")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def mapped_libraries(*needles: str) -> list:
    """Shared objects mapped into this process whose path contains one of ``needles``."""
    paths = []
    try:
        with open("/proc/self/maps") as handle:
            for line in handle:
                parts = line.split(None, 5)
                if len(parts) == 6 and any(n in parts[5] for n in needles):
                    path = parts[5].strip()
                    if path not in paths:
                        paths.append(path)
    except OSError:
        pass
    return paths


def jsonable(value):
    """A JSON-safe copy (paths, tuples, numpy scalars and arrays, anything else as str)."""
    import numpy as np
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def write(path: str, record: dict) -> None:
    temporary = f"{path}.part"
    with open(temporary, "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=False)
        handle.write("\n")
    os.replace(temporary, path)


# --------------------------------------------------------------------------- the run


def _terminated(signum, frame):
    raise TimeoutError(f"terminated by signal {signum} (the caller's timeout?)")


def run(args) -> int:
    t_start = time.perf_counter()
    signal.signal(signal.SIGTERM, _terminated)  # a timeout still leaves the record
    record = {"ok": False, "error": None, "required_backend": args.backend, "argv": sys.argv[1:],
              "python": platform.python_version(), "seed": args.seed, "steps": args.steps,
              "precision_requested": args.precision, "device": args.device, "timings_s": {},
              "environment": {name: os.environ.get(name) for name in (
                  "FASTMACE_OEQ_PREBUILT", "FASTMACE_CACHE", "OEQ_CUDA_DRIVER_LIBRARY", "CC", "CXX", "CPATH",
                  "OEQ_JIT_EXTENSION", "PYTHONPATH")}}
    timings = record["timings_s"]
    code = 1
    try:
        record["model"] = ensure_model(args.model, args.seed)
        timings["model_file"] = record["model"]["seconds"]

        started = time.perf_counter()
        import fastmace as fm  # first: before torch (FastMACE's file-lock switch) and before MACE
        from fastmace.kernels import _oeq_runtime
        record["fastmace_version"] = fm.__version__

        # Observe, not change: keep the RuntimePlan that FastMACE's prepare_in_process returns, whose
        # ``extension`` dict says where OEq's host extension came from.
        prepared = {}
        original = _oeq_runtime.prepare_in_process

        def observed(*a, **k):
            runtime_plan, handles = original(*a, **k)
            prepared["extension"] = dict(runtime_plan.extension)
            prepared["root"] = str(runtime_plan.root)
            prepared["environment"] = dict(runtime_plan.environment)
            return runtime_plan, handles

        _oeq_runtime.prepare_in_process = observed
        prebuilt = _oeq_runtime.prebuilt_extension()
        record["prebuilt_check"] = {"usable": prebuilt.usable, "reason": prebuilt.reason,
                                    "library": str(prebuilt.library) if prebuilt.library else None,
                                    "manifest": prebuilt.manifest}

        import numpy as np
        import torch
        from fastmace.config import EngineConfig, FallbackConfig

        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        record["cuda"] = {"available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda,
                          "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
        atoms = structure(args.seed)
        record["structure"] = {"formula": atoms.get_chemical_formula(), "natoms": len(atoms),
                               "cell_A": atoms.cell.lengths().tolist(), "a_A": LATTICE_A, "repeat": list(REPEAT),
                               "rattle_A": RATTLE_A}
        timings["import"] = round(time.perf_counter() - started, 3)

        started = time.perf_counter()
        model = fm.load(record["model"]["path"], sha256=record["model"]["sha256"])
        timings["fm_load"] = round(time.perf_counter() - started, 3)
        record["oeq_runtime"] = {"fm_load": model.oeq_runtime}  # "prepared", "skipped: ...", "failed: ..."
        patch = __import__("fastmace._patches", fromlist=["record_of"]).record_of("oeq_runtime")
        record["oeq_runtime"]["patch_record"] = None if patch is None else {
            "value": patch.value, "detail": patch.detail, "targets": list(patch.targets)}
        extension = prepared.get("extension")
        record["oeq_extension"] = None if extension is None else dict(
            extension, extension_version=extension.get("version"))
        record["oeq_runtime"]["stand_in_cuda_home"] = prepared.get("root")

        started = time.perf_counter()
        force_field = fm.ForceField(model, atoms, precision=args.precision)
        integrator = fm.integrators.Langevin(timestep_fs=TIMESTEP_FS, temperature_K=TEMPERATURE_K,
                                             friction_per_fs=FRICTION_PER_FS)
        engine = EngineConfig(backend=args.backend, device=args.device,
                              **({"compile_mode": args.compile_mode} if args.compile_mode else {}))
        output_dir = args.output or (os.path.splitext(args.out)[0] + ".fastmace")
        if os.path.isdir(output_dir):  # this script's own output of an earlier run: FastMACE refuses to mix
            shutil.rmtree(output_dir)
        output = fm.Output(output_dir, trajectory_every=None, thermo_every=1, restart_every=None)
        sim = fm.Simulation(atoms, force_field, integrator=integrator, seed=args.seed, output=output,
                            engine=engine, fallback=FallbackConfig(fallback="refuse"), check=args.check,
                            mode=args.mode)
        timings["simulation_setup"] = round(time.perf_counter() - started, 3)
        plan = sim.plan
        record["plan"] = {"backend": plan.engine.backend, "tier": plan.tier, "device": plan.engine.device,
                          "force_precision": plan.decision("force_precision")[1],
                          "precision_dtype": plan.precision.dtype, "runner": plan.runner,
                          "revision": plan.revision, "fallbacks": len(plan.fallbacks),
                          "decisions": [[k, c, str(r)] for k, c, r in plan.decisions]}
        record["backend"] = plan.engine.backend
        record["gate"] = jsonable(getattr(sim.gate, "status", None))
        if plan.engine.backend != args.backend or plan.fallbacks or plan.runner != "in-process":
            record["error"] = (f"FastMACE planned backend {plan.engine.backend!r} (runner {plan.runner}, "
                               f"{len(plan.fallbacks)} fallbacks), not the required {args.backend!r}")
            code = 3
            raise SystemExit(code)

        energies = {}

        def sink(step, values):
            energies[int(step)] = float(np.asarray(values["energy"]).reshape(-1)[0])

        sim.add_sink(sink, 1)
        sim.submit_frame(sink)  # step 0
        started = time.perf_counter()
        sim.run(steps=args.steps)
        sim.flush_output()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        timings["run"] = round(time.perf_counter() - started, 3)
        timings["per_step_ms"] = round(1000 * timings["run"] / args.steps, 3)
        committed = sim.committed()
        metadata = sim.metadata()
        sim.close()

        record["energies_eV"] = [[step, energies[step]] for step in sorted(energies)]
        record["final"] = {"step": committed.step, "energy_eV": committed.energy,
                           "forces_eV_per_A": np.asarray(committed.forces, dtype=np.float64).tolist(),
                           "positions_A": np.asarray(committed.positions, dtype=np.float64).tolist()}
        excerpt = ("model", "software", "plan", "timing", "hardware", "runtime", "counters")
        record["metadata_excerpt"] = jsonable({key: metadata[key] for key in excerpt if key in metadata})
        if "openequivariance" in sys.modules and sys.modules["openequivariance"] is not None:
            oeq = sys.modules["openequivariance"]
            try:
                so_path = oeq.torch_ext_so_path()
            except Exception as error:  # noqa: BLE001 (no extension loaded, e.g. on a CPU)
                so_path = f"unavailable ({type(error).__name__}: {error})"
            record["openequivariance_loaded"] = {"BUILT_EXTENSION": getattr(oeq, "BUILT_EXTENSION", None),
                                                 "torch_ext_so_path": so_path}
        record["mapped_libraries"] = mapped_libraries("tp_jit", "oeq_stable", "libcuda.so", "libcue_ops",
                                                      "cuequivariance_ops_torch_ext")
        nvcc_log = (prepared.get("environment") or {}).get("OEQ_NVCC_ATTEMPTS")
        record["nvcc_attempts"] = (Path(nvcc_log).read_text().splitlines()
                                   if nvcc_log and os.path.isfile(nvcc_log) else [])
        finite = all(np.isfinite(e) for _, e in record["energies_eV"])
        if len(record["energies_eV"]) != args.steps + 1 or not finite:
            record["error"] = f"{len(record['energies_eV'])} energies (expected {args.steps + 1}), finite={finite}"
        else:
            record["ok"] = True
            code = 0
    except SystemExit:
        pass
    except BaseException as error:  # noqa: BLE001 (every failure goes into the record)
        record["error"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-8000:]
        code = 1
    finally:
        timings["total"] = round(time.perf_counter() - t_start, 3)
        record["versions"] = versions()
        write(args.out, jsonable(record))
    ext = record.get("oeq_extension") or {}
    print(f"fastmace_smoke: ok={record['ok']} backend={record.get('backend')} "
          f"oeq_extension.source={ext.get('source')} version={ext.get('extension_version')} "
          f"steps={args.steps} total={timings.get('total')}s"
          + (f" error={record['error']}" if record["error"] else ""))
    return code


# --------------------------------------------------------------------------- --compare


def compare(a_path: str, b_path: str) -> int:
    import numpy as np
    try:
        from fastmace.planner.selfcheck import FLOORS as installed
        floors, source = dict(installed), "fastmace.planner.selfcheck.FLOORS"
    except Exception:  # noqa: BLE001 (FastMACE not importable here: the copies above)
        floors, source = dict(FLOORS), "copy in tools/fastmace_smoke.py"
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    problems = [f"{p}: not ok ({r.get('error')})" for p, r in ((a_path, a), (b_path, b)) if not r.get("ok")]
    if problems:
        print("compare: " + "; ".join(problems))
        return 1
    for key in ("seed", "steps"):
        if a.get(key) != b.get(key):
            problems.append(f"{key} differs: {a.get(key)} vs {b.get(key)}")
    if a["model"]["sha256"] != b["model"]["sha256"]:
        problems.append("the model files differ")
    if a.get("backend") != b.get("backend"):
        problems.append(f"backends differ: {a.get('backend')} vs {b.get('backend')}")
    natoms = a["structure"]["natoms"]
    ea, eb = dict((s, e) for s, e in a["energies_eV"]), dict((s, e) for s, e in b["energies_eV"])
    steps = sorted(set(ea) & set(eb))
    if steps != sorted(ea) or steps != sorted(eb):
        problems.append("the runs recorded different steps")
    de = max(abs(ea[s] - eb[s]) for s in steps)
    fa, fb = (np.asarray(r["final"]["forces_eV_per_A"]) for r in (a, b))
    pa, pb = (np.asarray(r["final"]["positions_A"]) for r in (a, b))
    df = float(np.abs(fa - fb).max())
    dx = float(np.abs(pa - pb).max())
    de_mev = 1000.0 * de / natoms
    e_ok = de_mev <= floors["energy_meV_per_atom"]
    f_ok = df <= floors["force_eV_per_A"]
    print(f"compare {a_path} ({(a.get('oeq_extension') or {}).get('source')}) vs {b_path} "
          f"({(b.get('oeq_extension') or {}).get('source')}), {len(steps)} steps, {natoms} atoms, floors from {source}")
    print(f"  max |dE| = {de:.3e} eV = {de_mev:.3e} meV/atom (floor {floors['energy_meV_per_atom']:g} meV/atom): "
          f"{'ok' if e_ok else 'FAIL'}")
    print(f"  max |dF| = {df:.3e} eV/A (floor {floors['force_eV_per_A']:g} eV/A): {'ok' if f_ok else 'FAIL'}")
    print(f"  max |dx| = {dx:.3e} A (final positions; not judged)")
    for problem in problems:
        print(f"  problem: {problem}")
    return 0 if e_ok and f_ok and not problems else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="the JSON record to write")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two records and exit")
    parser.add_argument("--make-model", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help="the random-weight model file (built if missing; default: "
                                                      "next to OUT)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--precision", choices=("float64", "float32"), default="float64",
                        help="the ForceField's force precision (FastMACE offers both; default float64)")
    parser.add_argument("--backend", choices=("hybrid", "cueq"), default="hybrid",
                        help="the backend required of FastMACE's plan (cueq: for a CPU plumbing check only)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--compile-mode", choices=("default", "none"), default=None)
    parser.add_argument("--mode", choices=("graph", "compiled", "eager", "reference"), default=None,
                        help="FastMACE's execution mode (default: the planner's choice)")
    parser.add_argument("--check", choices=("skip", "gate", "allow_unavailable"), default="skip")
    parser.add_argument("--output", default=None, help="FastMACE's output directory (default: next to OUT)")
    args = parser.parse_args(argv)
    if args.make_model:
        build_model(args.make_model, args.seed)
        return 0
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        parser.error("OUT.json is required (or --compare A B)")
    if args.model is None:
        args.model = os.path.join(os.path.dirname(os.path.abspath(args.out)),
                                  f"mace-nacl-random-{MODEL_TAG}-{args.seed}.model")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
