#!/usr/bin/env bash
# OpenEquivariance's own upstream test suite (its tests/: batch_test.py, conv_test.py, ...) against our binary
# openequivariance wheels on a GPU, with no compiler: a proof that the shipped modules and their CUDA dispatch library
# (liboeq_cuda_dispatch.so, bound at import to the CUDA runtime, NVRTC and cuBLAS of the major torch loaded) run
# OEq's own correctness tests, OEq compiling nothing.
#
#   tools/gpu_upstream.sh WHEELDIR TESTSDIR [STAGE ...]
#
# Runs on the GPU machine (python3 with torch, no internet), from anywhere. WHEELDIR holds the
# openequivariance-*+oeqwheels.<LINE>-cp312-*.whl wheels; TESTSDIR is upstream's tests/ (a checkout's, or
# `git archive <commit> tests`). The carry ($UPSTREAM_CARRY, default <repo>/.gpu/carry) holds, as wheels, what the
# tests import and the machine lacks (pytest-check); the script says which of the rest is missing.
#
# A STAGE is one or more jobs separated by commas, run at the same time; the stages run one after the other. A job is
#   LINE[/jit]:SUITE[:WORKERS[:KEXPR]]
# LINE picks the wheel (cu12.8.2 -> openequivariance-*+oeqwheels.cu12.8.2-*.whl); SUITE is batch (batch_test.py),
# conv (conv_test.py), extras (import_test.py, input_validation_test.py, symmetric_contraction_test.py) or
# ids=FILE (the node ids in FILE, one a line); WORKERS is pytest-xdist's -n (default 4; 0: no xdist); KEXPR is
# pytest's -k. /jit runs the job as OEq's own JIT build would (OEQ_JIT_EXTENSION=1, the machine's compilers and
# CUDA toolkit, no sentinels), to tell whether a failure is ours. Default stages:
#   "cu12.8.2:batch:4,cu13.3:batch:4" "cu12.8.2:conv:4:F32"
# GPU memory: the batch suites may share the GPU (two jobs of 4 workers ran side by side on an H100 80 GB), but a
# conv job needs it alone: three conv jobs at once (10 workers) ran it out of memory. On an H100 one conv -k F32 job
# (2446 tests) takes about 6 minutes with 4 workers (-k F64 not timed alone); the batch suite (3418 tests) about 4.
#
# What it does:
#   1. installs the carry into $WORK/site-common and each wheel a job names into $WORK/oeq-<LINE> (pip --no-index
#      --no-deps --target; PYTHONPATH, so the machine's torch is the one used) and hashes each wheel (sha256);
#   2. puts sentinels first on PATH: g++, c++, ninja, nvcc, cmake, clang, clang++ log their argv to sentinel.log
#      and exit 97; CXX is the c++ sentinel; cc and gcc (and CC) pass through to the real gcc, logging each call
#      ("allowed cc": Triton builds its launchers with a C compiler; OEq itself needs none);
#      TORCH_EXTENSIONS_DIR is fresh and must stay empty;
#   3. preflight, per wheel, in a fresh python: import torch and openequivariance, assert extlib.BUILT_EXTENSION,
#      DeviceProp(0).name (must be torch's device name), a small TensorProduct forward, the /proc/self/maps paths of
#      libcudart, libnvrtc, libcublas, libcuda and OEq's libraries, and through ctypes the dispatch library's
#      oeq_cuda_dispatch_major() and oeq_cuda_dispatch_path(0..2);
#   4. the conv tests' graph fixture downloads 1drf_radius3.5.pickle from NERSC; with no internet a plugin
#      (-p oeq_offline_graphs) serves it from $UPSTREAM_GRAPHS if that holds the file, else from a synthetic graph
#      of the same format made here (seeded: 2000 random points at 0.1 per cubic angstrom, edges within 3.5 A);
#      the test files run unchanged;
#   5. the stages: pytest -v -rfEs --junitxml, pytest-timeout per test, each job capped by the time left;
#   6. summary.json: per job the counts (passed, failed, skipped, errors, not run), failing ids, exit code and
#      seconds; the machine; each wheel's sha256; the sentinel calls; the leftover files in TORCH_EXTENSIONS_DIR.
#
# $OUT/ gets (flat): summary.json, preflight.json, sentinel.log, logs.tar.gz (each job's pytest output),
# junit.tar.gz (each job's junit xml). Stays within UPSTREAM_BUDGET_S (default 540 s). Rerunnable: $WORK is rebuilt.
set -u -o pipefail

WHEELDIR=$(cd "${1:?usage: tools/gpu_upstream.sh WHEELDIR TESTSDIR [STAGE ...]}" && pwd)
TESTSDIR=$(cd "${2:?usage: tools/gpu_upstream.sh WHEELDIR TESTSDIR [STAGE ...]}" && pwd)
shift 2
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=("cu12.8.2:batch:4,cu13.3:batch:4" "cu12.8.2:conv:4:F32")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=${UPSTREAM_CARRY:-$ROOT/.gpu/carry}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d /tmp/upstream-out.XXXXXX)}
WORK=${UPSTREAM_WORK:-/tmp/gpu-upstream}
TEST_TIMEOUT=${UPSTREAM_TEST_TIMEOUT:-240}
T0=$(date +%s)
DEADLINE=$((T0 + ${UPSTREAM_BUDGET_S:-540}))
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

mkdir -p "$OUT"
SENT=$OUT/sentinel.log
: > "$SENT"
since() { echo "$(( $(date +%s) - T0 ))s"; }
die() { echo "FAILED: $*" >&2; exit 1; }
left() { echo $((DEADLINE - $(date +%s))); }

rm -rf "$WORK"
mkdir -p "$WORK"/{bin,plugins,graphs,logs,junit,torch_ext,triton,jobs}
PIP=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir)

# ------------------------------------------------------------------------------------------------ 1. install
echo "== install ($(since))"
"$PY" - <<'EOF'
import importlib.metadata as md
for name in ["torch", "numpy", "jinja2", "packaging", "e3nn", "opt_einsum", "opt_einsum_fx", "sympy", "scipy",
             "pytest", "pytest-xdist", "pytest-timeout", "pytest-check", "torch_geometric", "pybind11", "triton"]:
    try:
        print(f"  have {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  MISSING {name}")
EOF
shopt -s nullglob
carried=("$CARRY"/*.whl)
shopt -u nullglob
if [ ${#carried[@]} -gt 0 ]; then
    "${PIP[@]}" --target "$WORK/site-common" "${carried[@]}" || die "pip install of the carry"
fi
LINES=()
for stage in "${STAGES[@]}"; do
    IFS=, read -r -a jobs <<< "$stage"
    for job in "${jobs[@]}"; do
        line=${job%%:*}; line=${line%/jit}
        [[ " ${LINES[*]-} " == *" $line "* ]] || LINES+=("$line")
    done
done
declare -A WHEEL
for line in "${LINES[@]}"; do
    shopt -s nullglob
    found=("$WHEELDIR"/openequivariance-*+oeqwheels."$line"-cp312-*.whl)
    shopt -u nullglob
    [ ${#found[@]} -eq 1 ] || die "need exactly one openequivariance-*+oeqwheels.$line-cp312-*.whl in $WHEELDIR"
    WHEEL[$line]=${found[0]}
    "${PIP[@]}" --target "$WORK/oeq-$line" "${found[0]}" || die "pip install of ${found[0]}"
    echo "  $line: $(basename "${found[0]}") $(sha256sum "${found[0]}" | cut -d' ' -f1)"
done

# ------------------------------------------------------------------------------------------------ 2. sentinels
BIN=$WORK/bin
for tool in g++ c++ ninja nvcc cmake clang clang++; do
    cat > "$BIN/$tool" <<EOF
#!/bin/sh
printf 'BLOCKED %s %s\n' "$tool" "\$*" >> "$SENT"
echo "$tool: blocked by gpu_upstream.sh (nothing may be compiled)" >&2
exit 97
EOF
    chmod +x "$BIN/$tool"
done
REAL_CC=$(command -v gcc || command -v cc || true)
for tool in cc gcc; do
    cat > "$BIN/$tool" <<EOF
#!/bin/sh
printf 'allowed $tool %s\n' "\$*" >> "$SENT"
exec "${REAL_CC:-/usr/bin/gcc}" "\$@"
EOF
    chmod +x "$BIN/$tool"
done
echo "  sentinels in $BIN; cc/gcc pass through to ${REAL_CC:-<none>}"

# ------------------------------------------------------------------------------------------------ 4. graph, plugin
GRAPHS=${UPSTREAM_GRAPHS:-$WORK/graphs}
if [ ! -f "$GRAPHS/1drf_radius3.5.pickle" ]; then
    GRAPHS=$WORK/graphs
    "$PY" - "$GRAPHS/1drf_radius3.5.pickle" <<'EOF' || die "making the synthetic graph"
import pickle, sys
import numpy as np
rng = np.random.default_rng(20261207)
n, density, radius = 2000, 0.1, 3.5
side = (n / density) ** (1 / 3)
coords = rng.uniform(0.0, side, size=(n, 3))
d2 = ((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1)
adj = d2 < radius * radius
np.fill_diagonal(adj, False)
row, col = np.nonzero(adj)
with open(sys.argv[1], "wb") as f:
    pickle.dump({"coords": coords, "row": row.astype(np.int64), "col": col.astype(np.int64)}, f)
print(f"  synthetic graph: {n} nodes, {len(row)} directed edges (side {side:.1f} A, radius {radius} A)")
EOF
    GRAPH_KIND=synthetic
else
    GRAPH_KIND=real
fi
cat > "$WORK/plugins/oeq_offline_graphs.py" <<'EOF'
"""Serves upstream's conv-test graphs (downloaded from NERSC) from a local folder: the machine has no internet."""
import os
import shutil
import urllib.request

PREFIX = "https://portal.nersc.gov/project/m1982/equivariant_nn_graphs/"
_real = urllib.request.urlretrieve


def _offline(url, filename=None, *args, **kwargs):
    if isinstance(url, str) and url.startswith(PREFIX):
        shutil.copyfile(os.path.join(os.environ["OEQ_UPSTREAM_GRAPHS"], url[len(PREFIX):]), filename)
        return filename, None
    return _real(url, filename, *args, **kwargs)


urllib.request.urlretrieve = _offline
EOF
printf '[pytest]\naddopts = --import-mode=importlib\n' > "$WORK/pytest.ini"

# the environment every compiler-free process gets
blocked_env() {
    export PATH="$BIN:$PATH" CXX="$BIN/c++" CC="$BIN/cc" TORCH_EXTENSIONS_DIR="$WORK/torch_ext" \
           TRITON_CACHE_DIR="$WORK/triton" OEQ_UPSTREAM_GRAPHS="$GRAPHS"
    unset OEQ_JIT_EXTENSION
}

# ------------------------------------------------------------------------------------------------ 3. preflight
echo "== preflight ($(since))"
cat > "$WORK/preflight.py" <<'EOF'
import ctypes, json, os, sys
res = {"python": sys.version.split()[0]}

def maps():
    out = {}
    for line in open("/proc/self/maps"):
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        for key in ("libcudart", "libnvrtc", "libcublas", "libcuda.so", "liboeq_cuda_dispatch", "oeq_stable_cuda",
                    "liboeq_stable_cuda_aoti", "libtorch_tp_jit"):
            if key in os.path.basename(path):
                out.setdefault(key, [])
                if path not in out[key]:
                    out[key].append(path)
    return out

import torch
res["torch"], res["torch_cuda"] = torch.__version__, torch.version.cuda
import openequivariance as oeq
from openequivariance._torch import extlib
res["openequivariance"] = oeq.__version__
res["openequivariance_file"] = oeq.__file__
res["BUILT_EXTENSION"] = bool(extlib.BUILT_EXTENSION)
res["BUILT_EXTENSION_ERROR"] = None if extlib.BUILT_EXTENSION_ERROR is None else str(extlib.BUILT_EXTENSION_ERROR)
res["USE_PRECOMPILED_EXTENSION"] = bool(getattr(extlib, "USE_PRECOMPILED_EXTENSION", False))
assert extlib.BUILT_EXTENSION, extlib.BUILT_EXTENSION_ERROR
res["extension_module"] = extlib.extension_module.__file__
res["maps_after_import"] = maps()
dp = extlib.DeviceProp(0)
res["DeviceProp"] = {k: getattr(dp, k) for k in ("name", "major", "minor", "multiprocessorCount", "warpsize",
                                                  "maxSharedMemPerBlock") if hasattr(dp, k)}
res["torch_device_name"] = torch.cuda.get_device_name(0)
res["device_name_matches"] = dp.name == res["torch_device_name"]
problem = oeq.TPProblem("32x1e", "1x1e", "32x1e", [(0, 0, 0, "uvu", True)], shared_weights=False,
                        internal_weights=False)
tp = oeq.TensorProduct(problem)
g = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(64, problem.irreps_in1.dim, device="cuda", generator=g)
y = torch.randn(64, problem.irreps_in2.dim, device="cuda", generator=g)
w = torch.randn(64, problem.weight_numel, device="cuda", generator=g)
z = tp(x, y, w)
torch.cuda.synchronize()
res["tiny_tp"] = {"shape": list(z.shape), "finite": bool(torch.isfinite(z).all()), "abs_sum": float(z.abs().sum())}
res["maps"] = maps()
so = os.path.join(os.path.dirname(extlib.__file__), "liboeq_cuda_dispatch.so")
res["dispatch_library"] = so
res["dispatch_mapped_before_ctypes"] = so in res["maps"].get("liboeq_cuda_dispatch", [])
lib = ctypes.CDLL(so)
lib.oeq_cuda_dispatch_major.restype = ctypes.c_int
lib.oeq_cuda_dispatch_path.restype = ctypes.c_char_p
lib.oeq_cuda_dispatch_path.argtypes = [ctypes.c_int]
lib.oeq_cuda_dispatch_bind.restype = ctypes.c_char_p
bind = lib.oeq_cuda_dispatch_bind()
res["oeq_cuda_dispatch_bind"] = None if bind is None else bind.decode()
res["oeq_cuda_dispatch_major"] = lib.oeq_cuda_dispatch_major()
res["oeq_cuda_dispatch_path"] = [(lambda p: None if p is None else p.decode())(lib.oeq_cuda_dispatch_path(i))
                                 for i in range(3)]
res["dispatch_copies_mapped"] = len(maps().get("liboeq_cuda_dispatch", []))
res["cuda_12_libraries_mapped"] = sorted(p for k in ("libcudart", "libnvrtc", "libcublas")
                                         for p in res["maps"].get(k, []) if ".so.12" in p)
print(json.dumps(res, indent=1))
EOF
declare -A SHA
PRE_OK=1
for line in "${LINES[@]}"; do
    SHA[$line]=$(sha256sum "${WHEEL[$line]}" | cut -d' ' -f1)
    (
        blocked_env
        export PYTHONPATH="$WORK/oeq-$line:$WORK/site-common${PYTHONPATH:+:$PYTHONPATH}"
        cd "$WORK" && timeout 120 "$PY" "$WORK/preflight.py" > "$WORK/preflight-$line.json" 2> "$WORK/preflight-$line.err"
    )
    rc=$?
    echo "  $line: preflight exit $rc"
    [ $rc -eq 0 ] || { PRE_OK=0; tail -n 30 "$WORK/preflight-$line.err"; }
    cat "$WORK/preflight-$line.json" 2>/dev/null
done

# ------------------------------------------------------------------------------------------------ 5. the stages
run_job() {  # job index, job spec
    local idx=$1 spec=$2 line suite workers kexpr jit=0 name
    IFS=: read -r line suite workers kexpr <<< "$spec"
    [[ $line == */jit ]] && { jit=1; line=${line%/jit}; }
    workers=${workers:-4}
    name="$line$([ $jit = 1 ] && echo -jit)-${suite//[^A-Za-z0-9]/_}$([ -n "$kexpr" ] && echo "-${kexpr//[^A-Za-z0-9]/_}")"
    name="$(printf '%02d' "$idx")-$name"
    local files=()
    case $suite in
        batch) files=("$TESTSDIR/batch_test.py") ;;
        conv) files=("$TESTSDIR/conv_test.py") ;;
        extras) files=("$TESTSDIR/import_test.py" "$TESTSDIR/input_validation_test.py"
                       "$TESTSDIR/symmetric_contraction_test.py") ;;
        ids=*) mapfile -t files < <(grep -v '^ *$' "${suite#ids=}" | sed "s#^#$TESTSDIR/#") ;;
    esac
    case $suite:${#files[@]} in
        *:0) echo "unknown suite or no test ids: $suite" > "$WORK/logs/$name.log"
           printf '%s\n%s\n-\n0\n0\n' "$name" "$spec" > "$WORK/jobs/$idx"; return ;;
    esac
    local args=(-v -rfEs -p no:cacheprovider -c "$WORK/pytest.ini" --rootdir "$TESTSDIR" -p oeq_offline_graphs
                --junitxml "$WORK/junit/$name.xml" -o junit_family=xunit1)
    "$PY" -c 'import pytest_timeout' 2>/dev/null && args+=(--timeout "$TEST_TIMEOUT")
    [ "$workers" != 0 ] && args+=(-n "$workers")
    [ -n "$kexpr" ] && args+=(-k "$kexpr")
    local budget=$(( $(left) - 25 ))
    [ $budget -gt 10 ] || budget=10
    local t=$(date +%s)
    (
        if [ $jit = 1 ]; then
            export OEQ_JIT_EXTENSION=1 TORCH_EXTENSIONS_DIR="$WORK/torch_ext_jit-$line" OEQ_UPSTREAM_GRAPHS="$GRAPHS"
        else
            blocked_env
        fi
        export PYTHONPATH="$WORK/oeq-$line:$WORK/site-common:$WORK/plugins${PYTHONPATH:+:$PYTHONPATH}"
        cd "$WORK" && timeout -s INT -k 20 "$budget" "$PY" -m pytest "${args[@]}" "${files[@]}"
    ) > "$WORK/logs/$name.log" 2>&1
    local rc=$?
    printf '%s\n%s\n%s\n%s\n%s\n' "$name" "$spec" "$rc" "$(( $(date +%s) - t ))" "$budget" > "$WORK/jobs/$idx"
    echo "  job $name: exit $rc in $(( $(date +%s) - t ))s (cap ${budget}s)"
}

idx=0
for stage in "${STAGES[@]}"; do
    if [ "$(left)" -lt 40 ]; then
        echo "== stage $stage: skipped, $(left)s left"
        IFS=, read -r -a jobs <<< "$stage"
        for job in "${jobs[@]}"; do idx=$((idx + 1)); printf 'skipped\n%s\n-\n0\n0\n' "$job" > "$WORK/jobs/$idx"; done
        continue
    fi
    echo "== stage $stage ($(since), $(left)s left)"
    IFS=, read -r -a jobs <<< "$stage"
    pids=()
    for job in "${jobs[@]}"; do
        idx=$((idx + 1))
        run_job "$idx" "$job" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
done

# ------------------------------------------------------------------------------------------------ 6. summary
echo "== summary ($(since))"
MACHINE=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
for line in "${LINES[@]}"; do echo "$(basename "${WHEEL[$line]}") ${SHA[$line]}"; done > "$WORK/wheels.txt"
find "$WORK/torch_ext" -mindepth 1 > "$WORK/torch_ext.list" 2>/dev/null
"$PY" - "$WORK" "$OUT" "$MACHINE" "$GRAPH_KIND" "$PRE_OK" "$(since)" "$TESTSDIR" <<'EOF'
import glob, json, os, re, sys
import xml.etree.ElementTree as ET
work, out, machine, graph_kind, pre_ok, elapsed, testsdir = sys.argv[1:8]
wheels = dict(l.split() for l in open(os.path.join(work, "wheels.txt")).read().strip().splitlines())
name, _, driver = machine.partition(",")
try:
    import torch
    tv, tc = torch.__version__, str(torch.version.cuda)
except ImportError:
    tv = tc = "none"
summary = {"machine": {"device": name.strip() or "none", "driver": driver.strip() or "none",
                       "python": sys.version.split()[0], "torch": tv, "cuda": tc},
           "wheels": wheels, "graph": graph_kind, "tests_dir": testsdir, "elapsed": elapsed, "preflight": {},
           "jobs": []}
for f in sorted(glob.glob(os.path.join(work, "preflight-*.json"))):
    line = os.path.basename(f)[len("preflight-"):-len(".json")]
    try:
        summary["preflight"][line] = json.load(open(f))
    except ValueError:
        summary["preflight"][line] = {"error": open(f.replace(".json", ".err")).read()[-4000:]}
for f in sorted(glob.glob(os.path.join(work, "jobs", "*")), key=lambda p: int(os.path.basename(p))):
    jname, spec, rc, secs, cap = (open(f).read().splitlines() + [""] * 5)[:5]
    job = {"name": jname, "spec": spec, "exit": None if rc == "-" else int(rc), "seconds": int(secs or 0),
           "cap_s": int(cap or 0)}
    log = os.path.join(work, "logs", jname + ".log")
    text = open(log, errors="replace").read() if os.path.isfile(log) else ""
    m = re.findall(r"\[(\d+) items?\]|collected (\d+) items?", text)
    job["collected"] = int(next((a or b for a, b in m), 0) or 0)
    outcome = {}
    for mm in re.finditer(r"^(?:\[gw\d+\] \[ *\d+%\] )?(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+::\S+)", text, re.M):
        outcome[mm.group(2)] = mm.group(1)
    for mm in re.finditer(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", text, re.M):
        outcome[mm.group(1)] = mm.group(2)
    xml = os.path.join(work, "junit", jname + ".xml")
    if os.path.isfile(xml):
        root = ET.parse(xml).getroot()
        cases = root.iter("testcase")
        counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        failed, errors = [], []
        for c in cases:
            if c.get("name") is None:  # a test in flight when the job was interrupted: not run
                continue
            tid = f"{c.get('classname')}::{c.get('name')}"
            if c.find("failure") is not None:
                counts["failed"] += 1; failed.append(tid)
            elif c.find("error") is not None:
                counts["errors"] += 1; errors.append(tid)
            elif c.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        job["source"] = "junit"
    else:
        counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        failed = [t for t, o in outcome.items() if o == "FAILED"]
        errors = [t for t, o in outcome.items() if o == "ERROR"]
        for o in outcome.values():
            counts[{"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "ERROR": "errors"}.get(o, "passed")] += 1
        job["source"] = "log"
    job.update(counts)
    job["not_run"] = max(job["collected"] - sum(counts.values()), 0)
    job["failed_ids"], job["error_ids"] = failed[:200], errors[:200]
    tail = [l for l in text.splitlines() if re.match(r"^=+ .* =+$", l)]
    job["pytest_summary_line"] = tail[-1] if tail else None
    job["interrupted"] = "KeyboardInterrupt" in text or job["exit"] in (124, 130, 137)
    summary["jobs"].append(job)
sent = open(os.path.join(out, "sentinel.log")).read().splitlines()
summary["sentinel"] = {"blocked": [l for l in sent if l.startswith("BLOCKED")],
                       "allowed_cc": [l for l in sent if l.startswith("allowed")]}
summary["torch_extensions_dir_left"] = open(os.path.join(work, "torch_ext.list")).read().split()
summary["ok"] = (pre_ok == "1" and not summary["sentinel"]["blocked"] and not summary["torch_extensions_dir_left"]
                 and all(j["failed"] == 0 and j["errors"] == 0 and j["exit"] == 0 for j in summary["jobs"]))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
for line, p in summary["preflight"].items():
    print(f"preflight {line}: BUILT_EXTENSION={p.get('BUILT_EXTENSION')} name={p.get('DeviceProp', {}).get('name')!r} "
          f"matches={p.get('device_name_matches')} dispatch major={p.get('oeq_cuda_dispatch_major')} "
          f"paths={p.get('oeq_cuda_dispatch_path')} cuda12 mapped={p.get('cuda_12_libraries_mapped')}")
for j in summary["jobs"]:
    print(f"{j['name']}: passed {j['passed']} failed {j['failed']} skipped {j['skipped']} errors {j['errors']} "
          f"not run {j['not_run']} of {j['collected']} (exit {j['exit']}, {j['seconds']}s/{j['cap_s']}s, {j['source']})")
    for t in j["failed_ids"][:20] + j["error_ids"][:20]:
        print(f"   {t}")
print(f"sentinels: {len(summary['sentinel']['blocked'])} blocked, {len(summary['sentinel']['allowed_cc'])} allowed cc; "
      f"torch_extensions left: {len(summary['torch_extensions_dir_left'])}; ok={summary['ok']}")
EOF
cat > "$OUT/preflight.json" <<EOF
$("$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["preflight"], indent=1))' "$OUT/summary.json" 2>/dev/null || echo '{}')
EOF
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs
tar -czf "$OUT/junit.tar.gz" -C "$WORK" junit
echo "done ($(since))"
