#!/usr/bin/env bash
# FastMACE 1.0.0 with the proposed OEq rules (oeq_rules.py, put over its functions by launch.py) on the hybrid
# backend, our binary OEq and NO fastmace-oeq-ext, every compiler hidden; against FastMACE's own build.
#
#   contrib/fastmace/gpu_rules.sh DIR
#
# DIR (the device call's carried folder) holds: carry/*.whl (FastMACE 1.0.0 and the dependencies the GPU machine
# lacks), carry/*.tar.xz (the cuEquivariance ops wheels, unpacked), carry/build/*.whl (nvidia-cuda-crt and -cccl,
# run B's host build only), exactly one openequivariance-*cp312*x86_64.whl, and oeq_rules.py, launch.py,
# fastmace_smoke.py. Runs on the GPU machine (python3 with torch 2.11.0+cu130, no internet):
#
#   1. pip install --no-index --no-deps --target /tmp/site: the carry and our OEq; fastmace_oeq_ext must not import;
#   2. the driver torch maps (OEQ_CUDA_DRIVER_LIBRARY), the random-weight model (shared by every run);
#   3. run R, the rules: g++, c++, ninja, nvcc, cmake, clang, clang++ sentinels first on PATH (log and exit 97),
#      CXX the c++ sentinel, CC a logging pass-through to gcc (Triton builds its launchers with it),
#      FASTMACE_OEQ_PREBUILT=1 (nothing may be built); `launch.py -m fastmace.cli doctor`, then the smoke
#      through launch.py;
#   4. run B, FastMACE 1.0.0 as it is: compilers present, FASTMACE_OEQ_PREBUILT=0 (FastMACE builds OEq's JIT
#      host extension, OEQ_JIT_EXTENSION=1), crt + cccl on CPATH; doctor, then the smoke;
#      in the order R1, B1 (20 steps, compared), R2, B2 (200 steps, each with its run's warm FastMACE cache);
#   5. compares R1/B1 and R2/B2 within FastMACE's gate floors (fastmace_smoke.py --compare).
#
# $OUT gets: summary.txt, doctor.txt, R.tar.gz (the records), sentinel.log, run.log.
set -u -o pipefail
DIR=$(cd "${1:?usage: gpu_rules.sh DIR}" && pwd)
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d /tmp/gpu-rules-out.XXXXXX)}
SITE=/tmp/site BUILD_SITE=/tmp/site-build WORK=/tmp/gpu-rules
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET_S:-560}))
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK/rec"
SUMMARY=$OUT/summary.txt SENT=$OUT/sentinel.log
: > "$SUMMARY"; : > "$SENT"
note() { echo "$*" | tee -a "$SUMMARY"; }
die() { note "FAILED: $*"; exit 1; }
since() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $((DEADLINE - $(date +%s))); }
budget() { local l=$(( $(left) - 15 )); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
PIP=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir)

main() {
echo "== install ($(since))"
rm -rf "$SITE" "$BUILD_SITE"; mkdir -p "$SITE" "$BUILD_SITE"
shopt -s nullglob
carried=("$DIR"/carry/*.whl); trees=("$DIR"/carry/*.tar.xz); build=("$DIR"/carry/build/*.whl)
oeq=("$DIR"/openequivariance-*cp312*x86_64.whl)
shopt -u nullglob
[ ${#oeq[@]} -eq 1 ] || die "need exactly one openequivariance-*cp312*x86_64.whl in $DIR"
"${PIP[@]}" --target "$SITE" "${carried[@]}" "${oeq[0]}" || die "pip install of the carry"
for t in "${trees[@]}"; do tar -xJf "$t" -C "$SITE" || die "unpacking $t"; done
"${PIP[@]}" --target "$BUILD_SITE" "${build[@]}" || die "pip install of crt/cccl"
export PYTHONPATH=$SITE
note "oeq wheel: $(basename "${oeq[0]}") sha256 $(sha256sum "${oeq[0]}" | cut -d' ' -f1)"
"$PY" - <<'EOF' | tee -a "$SUMMARY" || die "imports"
import importlib.util, importlib.metadata as m, sys, platform
assert importlib.util.find_spec("fastmace_oeq_ext") is None, "fastmace_oeq_ext is importable"
print("python", platform.python_version(), "; versions:", {n: m.version(n) for n in (
    "torch", "fastmace", "mace-torch", "cuequivariance-torch", "cuequivariance-ops-torch-cu13", "openequivariance",
    "triton")}, "; fastmace-oeq-ext: not installed")
EOF
"$PY" -c 'import cuequivariance_ops_torch, mace.modules, ase, e3nn; print("imports ok")' 2>&1 | tail -3 | tee -a "$SUMMARY"
"$PY" -c 'import cuequivariance_ops_torch' 2>/dev/null || die "cuequivariance_ops_torch does not import (FastMACE would refuse)"
DRIVER=$("$PY" -c '
import torch; torch.zeros(1, device="cuda")
print(next(l.split(None, 5)[-1].strip() for l in open("/proc/self/maps") if "/libcuda.so" in l))')
export OEQ_CUDA_DRIVER_LIBRARY=$DRIVER
note "driver: $DRIVER; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
SMOKE=$DIR/fastmace_smoke.py LAUNCH=$DIR/launch.py MODEL=$WORK/mace-nacl-random.model
"$PY" "$SMOKE" --make-model "$MODEL" || die "model"
unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TORCH_EXTENSIONS_DIR OEQ_JIT_EXTENSION

BIN=$WORK/sentinels; mkdir -p "$BIN"
for tool in g++ c++ ninja nvcc cmake clang clang++; do
    printf '#!/bin/sh\nprintf "BLOCKED %s %%s\\n" "$*" >> "%s"\necho "%s: blocked (nothing may be compiled)" >&2\nexit 97\n' \
        "$tool" "$SENT" "$tool" > "$BIN/$tool"
    chmod +x "$BIN/$tool"
done
REAL_CC=$(command -v gcc || command -v cc)
printf '#!/bin/sh\nprintf "allowed cc %%s\\n" "$1" >> "%s"\nexec "%s" "$@"\n' "$SENT" "$REAL_CC" > "$BIN/cc-pass"
chmod +x "$BIN/cc-pass"

run_R() {  # NAME STEPS: the rules, no fastmace-oeq-ext, compilers hidden
    [ "$(left)" -gt 100 ] || { echo "$1: skipped, budget"; return; }
    echo "== $1: the rules, no fastmace-oeq-ext, compilers hidden, $2 steps ($(since))"
    (
        export PATH="$BIN:$PATH" CXX="$BIN/c++" CC="$BIN/cc-pass" FASTMACE_OEQ_PREBUILT=1 FASTMACE_CACHE="$WORK/cache-R"
        if [ ! -f "$OUT/doctor.txt" ]; then
            echo "### run R: launch.py (the rules), FASTMACE_OEQ_PREBUILT=1, compilers blocked" > "$OUT/doctor.txt"
            timeout "$(budget 60)" "$PY" "$LAUNCH" -m fastmace.cli doctor >> "$OUT/doctor.txt" 2>&1
            echo "(doctor exit $?)" >> "$OUT/doctor.txt"
        fi
        LAUNCH_REPORT=$WORK/rec/$1.launch.json timeout "$(budget 200)" "$PY" "$LAUNCH" "$SMOKE" "$WORK/rec/$1.json" \
            --model "$MODEL" --steps "$2" --output "$WORK/$1.fastmace"
        echo "$1 exit $?"
    ) 2>&1 | tee -a "$WORK/rec/R.log"
}
run_B() {  # NAME STEPS: FastMACE 1.0.0 as it is, its own JIT build of OEq's host extension
    [ "$(left)" -gt 100 ] || { echo "$1: skipped, budget"; return; }
    echo "== $1: FastMACE 1.0.0 unpatched, its own JIT build, $2 steps ($(since))"
    (
        export FASTMACE_OEQ_PREBUILT=0 FASTMACE_CACHE="$WORK/cache-B"
        export CPATH="$BUILD_SITE/nvidia/cu13/include:$BUILD_SITE/nvidia/cu13/include/cccl${CPATH:+:$CPATH}"
        if ! grep -q "### run B" "$OUT/doctor.txt" 2>/dev/null; then
            echo "### run B: FastMACE as it is, FASTMACE_OEQ_PREBUILT=0, compilers present" >> "$OUT/doctor.txt"
            timeout "$(budget 60)" "$PY" -m fastmace.cli doctor >> "$OUT/doctor.txt" 2>&1
            echo "(doctor exit $?)" >> "$OUT/doctor.txt"
        fi
        timeout "$(budget 240)" "$PY" "$SMOKE" "$WORK/rec/$1.json" --model "$MODEL" --steps "$2" --output "$WORK/$1.fastmace"
        echo "$1 exit $?"
    ) 2>&1 | tee -a "$WORK/rec/B.log"
}
# The compared pair first, then one repeat of each with more steps (timing), as the budget allows.
run_R R1 20; run_B B1 20; run_R R2 200; run_B B2 200
note "runs done ($(since))"

VERDICT=0  # 0 only if both pairs compared within the floors, R used OEq's own precompiled module, nothing blocked
for pair in "R1 B1" "R2 B2"; do set -- $pair
    [ -f "$WORK/rec/$1.json" ] && [ -f "$WORK/rec/$2.json" ] || { VERDICT=1; note "$1/$2: no records"; continue; }
    "$PY" "$SMOKE" --compare "$WORK/rec/$1.json" "$WORK/rec/$2.json" 2>&1 | tee -a "$SUMMARY"
    [ "${PIPESTATUS[0]}" -eq 0 ] || VERDICT=1
    "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1]))
sys.exit((r.get("oeq_extension") or {}).get("source") != "oeq-precompiled")' "$WORK/rec/$1.json" \
        || { VERDICT=1; note "$1: FastMACE did not use OEq's precompiled module"; }
done
"$PY" - "$WORK/rec" >> "$SUMMARY" <<'EOF'
import json, os, sys
d = sys.argv[1]
for name in ("R1", "R2", "B1", "B2"):
    p = os.path.join(d, name + ".json")
    if not os.path.isfile(p):
        print(f"{name}: no record"); continue
    r = json.load(open(p)); t = r.get("timings_s", {}); ext = r.get("oeq_extension") or {}
    la = os.path.join(d, name + ".launch.json")
    launch = json.load(open(la)) if os.path.isfile(la) else None
    print(f"{name}: ok={r.get('ok')} backend={r.get('backend')} tier={(r.get('plan') or {}).get('tier')} "
          f"steps={r.get('steps')} per_step_ms={t.get('per_step_ms')} fm_load={t.get('fm_load')} "
          f"setup={t.get('simulation_setup')} total={t.get('total')}")
    print(f"  extension: source={ext.get('source')} path={ext.get('path')} prebuilt_skipped={ext.get('prebuilt_skipped')}")
    print(f"  OEq loaded: {r.get('openequivariance_loaded')}; mapped: {r.get('mapped_libraries')}")
    print(f"  nvcc attempts: {r.get('nvcc_attempts')}; at exit: {launch}")
    if r.get("error"):
        print(f"  error: {r['error']}\n  " + (r.get("traceback") or "")[-3000:].replace("\n", "\n  "))
EOF
blocked=$(grep -c '^BLOCKED' "$SENT"); allowed=$(grep -c '^allowed cc' "$SENT")
note "sentinels (run R): $blocked blocked calls, $allowed allowed cc calls"
grep '^BLOCKED' "$SENT" | head -5 | tee -a "$SUMMARY"
grep -h "host extension\|OpenEquivariance\|not used" "$OUT/doctor.txt" | tee -a "$SUMMARY"
[ "$blocked" -eq 0 ] || VERDICT=1
note "verdict: $VERDICT; total $(since)"
tar czf "$OUT/R.tar.gz" -C "$WORK" rec
# The run record (records/runs/): the commit is the checkout's (RECORD_COMMIT: the GPU machine's copy has no .git).
if [ -n "${RECORD_COMMIT:-}" ]; then
    rec=(); for n in R1 B1 R2 B2; do rec+=(--json "$n=$WORK/rec/$n.json" --json "$n.launch=$WORK/rec/$n.launch.json"); done
    "$PY" "$(dirname "$0")/../../tools/run_record.py" --tool "contrib/fastmace/gpu_rules.sh DIR" \
        --commit "$RECORD_COMMIT" --wheel "${oeq[0]}" --verdict "$VERDICT" "${rec[@]}" \
        --text summary="$SUMMARY" --text doctor="$OUT/doctor.txt" --text sentinels="$SENT" \
        --note "FastMACE 1.0.0 with the proposed rules (oeq_rules.py over its functions, launch.py), our binary OEq and no fastmace-oeq-ext, every compiler a sentinel (R1, R2), against FastMACE's own JIT build of OEq's host extension (B1, B2); R1/B1 20 steps, R2/B2 200 steps, compared within FastMACE's gate floors." \
        --note "The carry: FastMACE 1.0.0 and what the machine lacks, pinned by version, installed with pip --no-index --no-deps --target; the cuEquivariance ops wheels unpacked." \
        --out "$OUT/record.json"
fi
return "$VERDICT"
}
main 2>&1 | tee "$OUT/run.log"
