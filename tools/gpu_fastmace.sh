#!/usr/bin/env bash
# FastMACE 1.0.0 on its hybrid cuEquivariance + OpenEquivariance backend, with our wheels: a GPU smoke test.
#
#   tools/gpu_fastmace.sh WHEELDIR [--install-only]
#
# Runs from the repository root on the GPU machine (python3 with torch 2.11.0+cu130, no internet). WHEELDIR
# holds our two cp312 wheels: one openequivariance-*cp312*.whl and one fastmace_oeq_ext-*cp312*.whl. The
# carry (.gpu-carry/, or $FASTMACE_CARRY) holds FastMACE 1.0.0 and the dependencies the machine lacks as
# wheels, the two cuEquivariance ops wheels unpacked in one .tar.xz, and in build/ the nvidia-cuda-crt and
# nvidia-cuda-cccl wheels that only run B's host build needs.
#
#   1. installs the carried wheels and ours with pip --target into /tmp/site (PYTHONPATH), unpacks the ops
#      trees there, and crt + cccl into /tmp/site-build (on run B's CPATH only);
#   2. finds the libcuda.so.1 torch loaded (/proc/self/maps after torch.cuda.init()) for FastMACE
#      (OEQ_CUDA_DRIVER_LIBRARY; its own search list misses the machine's driver directory);
#   3. builds the random-weight Na/Cl MACE model once (tools/fastmace_smoke.py), shared by both runs;
#   4. run A "prebuilt": g++, c++, ninja, nvcc, cmake, clang, clang++ are sentinels first on PATH that log
#      their argv and exit 97, CXX is the c++ sentinel, FASTMACE_OEQ_PREBUILT=1 (FastMACE refuses to build),
#      a fresh FASTMACE_CACHE; `python3 -m fastmace.cli doctor`, then the smoke run. CC is a pass-through
#      to the real gcc that logs each call ("allowed cc"): Triton builds its launchers with $CC (else gcc),
#      and a sentinel there would stop every Triton kernel, which is no host-extension build;
#   5. run B "built": compilers as the machine has them, FASTMACE_OEQ_PREBUILT=0 (FastMACE builds OEq's
#      host extension with its own fallback, OEQ_JIT_EXTENSION=1 against the CUDA wheels), crt + cccl on
#      CPATH, another fresh FASTMACE_CACHE; doctor, then the smoke run;
#   6. compares the two runs within FastMACE's own gate floors (tools/fastmace_smoke.py --compare).
#
# $OUT/ gets (flat): summary.txt, doctor.txt, A.json, B.json, sentinel.log, compare.txt, run.log; with
# RECORD_COMMIT=SHA (the checkout's commit) also record.json, the run record for records/runs/ (tools/run_record.py).
# Stays within FASTMACE_SMOKE_BUDGET_S (default 470 s) by capping each step's timeout.
# FASTMACE_SMOKE_ARGS adds arguments to both smoke runs (e.g. "--precision float32"); a CPU plumbing check
# can pass "--backend cueq --device cpu --compile-mode none". --install-only stops after step 1 (dry check).
set -u -o pipefail

WHEELDIR=${1:?usage: tools/gpu_fastmace.sh WHEELDIR [--install-only]}
INSTALL_ONLY=0
[ "${2:-}" = "--install-only" ] && INSTALL_ONLY=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=${FASTMACE_CARRY:-$ROOT/.gpu-carry}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d /tmp/fastmace-out.XXXXXX)}
SITE=${FASTMACE_SITE:-/tmp/site}
BUILD_SITE=${FASTMACE_BUILD_SITE:-/tmp/site-build}
WORK=${FASTMACE_WORK:-/tmp/fastmace-smoke}
SMOKE=$ROOT/tools/fastmace_smoke.py
read -r -a SMOKE_ARGS <<< "${FASTMACE_SMOKE_ARGS:-}"
T0=$(date +%s)
DEADLINE=$((T0 + ${FASTMACE_SMOKE_BUDGET_S:-470}))
export PYTHONUNBUFFERED=1

mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
SENT=$OUT/sentinel.log
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
die() { note "FAILED: $*"; exit 1; }
since() { echo "$(( $(date +%s) - T0 ))s"; }
# min(wanted, seconds left before the deadline less a margin), at least 5
budget() { local left=$((DEADLINE - $(date +%s) - 15)); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }

PIP=("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir)

main() {

# --------------------------------------------------------------------------- 1. install
echo "== install ($(since))"
rm -rf "$SITE" "$BUILD_SITE" "$WORK"
mkdir -p "$SITE" "$BUILD_SITE" "$WORK"
shopt -s nullglob
carried=("$CARRY"/*.whl); trees=("$CARRY"/*.tar.xz); build=("$CARRY"/build/*.whl)
oeq=("$WHEELDIR"/openequivariance-*cp312*.whl); ext=("$WHEELDIR"/fastmace_oeq_ext-*cp312*.whl)
shopt -u nullglob
[ ${#carried[@]} -gt 0 ] || die "no wheels in $CARRY"
[ ${#oeq[@]} -eq 1 ] || die "need exactly one openequivariance-*cp312*.whl in $WHEELDIR, found ${#oeq[@]}"
[ ${#ext[@]} -eq 1 ] || die "need exactly one fastmace_oeq_ext-*cp312*.whl in $WHEELDIR, found ${#ext[@]}"
"${PIP[@]}" --target "$SITE" "${carried[@]}" || die "pip install of the carried wheels"
for tree in "${trees[@]}"; do tar -xJf "$tree" -C "$SITE" || die "unpacking $tree"; done
"${PIP[@]}" --upgrade --target "$SITE" "${oeq[0]}" "${ext[0]}" || die "pip install of $WHEELDIR's wheels"
[ ${#build[@]} -eq 0 ] || "${PIP[@]}" --target "$BUILD_SITE" "${build[@]}" || die "pip install of crt/cccl"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
"$PY" -m pip list --path "$SITE" 2>/dev/null | sed 's/^/  /'
dups=$(ls -d "$SITE"/*.dist-info | sed 's#.*/##; s/-[^-]*\.dist-info$//' | tr 'A-Z_' 'a-z-' | sort | uniq -d)
[ -z "$dups" ] || die "two versions installed of: $dups"
[ -f "$BUILD_SITE/nvidia/cu13/include/crt/host_defines.h" ] || echo "warning: no crt/host_defines.h in $BUILD_SITE"
note "installed: $(ls -d "$SITE"/*.dist-info | wc -l) distributions in $SITE" \
     "(ours: $(basename "${oeq[0]}"), $(basename "${ext[0]}"))"
if [ "$INSTALL_ONLY" = 1 ]; then
    "$PY" -c 'import fastmace, mace, cuequivariance_torch, openequivariance, fastmace_oeq_ext, ase, e3nn
print("imports ok: fastmace", fastmace.__version__, "e3nn", e3nn.__version__)' || die "imports"
    note "install-only: done ($(since))"
    return 0
fi

# --------------------------------------------------------------------------- 2. the driver
DRIVER=$("$PY" - <<'EOF'
import torch
if torch.cuda.is_available():
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    for line in open("/proc/self/maps"):
        path = line.split(None, 5)[-1].strip()
        if "/libcuda.so" in path:
            print(path)
            break
EOF
)
if [ -n "$DRIVER" ]; then
    export OEQ_CUDA_DRIVER_LIBRARY=$DRIVER
    note "driver: OEQ_CUDA_DRIVER_LIBRARY=$DRIVER"
else
    note "driver: no libcuda.so mapped (no CUDA device?); OEQ_CUDA_DRIVER_LIBRARY left unset"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$SUMMARY"

# --------------------------------------------------------------------------- 3. the model
MODEL=$WORK/mace-nacl-random.model
"$PY" "$SMOKE" --make-model "$MODEL" || die "building the random-weight model"
note "model: $(sha256sum "$MODEL" | cut -c1-16)... (random weights, seeded)"

unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TORCH_EXTENSIONS_DIR  # FastMACE puts them under FASTMACE_CACHE

# --------------------------------------------------------------------------- 4. run A: prebuilt
BIN=$WORK/sentinels
mkdir -p "$BIN"
: > "$SENT"
for tool in g++ c++ ninja nvcc cmake clang clang++; do
    cat > "$BIN/$tool" <<EOF
#!/bin/sh
printf 'BLOCKED %s %s\n' "$tool" "\$*" >> "$SENT"
echo "$tool: blocked by gpu_fastmace.sh (run A: nothing may be compiled)" >&2
exit 97
EOF
    chmod +x "$BIN/$tool"
done
REAL_CC=$(command -v gcc || command -v cc || true)
cat > "$BIN/cc-pass" <<EOF
#!/bin/sh
printf 'allowed cc %s\n' "\$1" >> "$SENT"
exec "${REAL_CC:-gcc}" "\$@"
EOF
chmod +x "$BIN/cc-pass"
note "run A: sentinels in $BIN first on PATH; CXX=c++ sentinel; CC=pass-through to ${REAL_CC:-<no gcc found>}"

echo "== run A: prebuilt ($(since))"
(
    export PATH="$BIN:$PATH" CXX="$BIN/c++" CC="$BIN/cc-pass" FASTMACE_OEQ_PREBUILT=1 FASTMACE_CACHE="$WORK/cache-A"
    echo "### run A (prebuilt): FASTMACE_OEQ_PREBUILT=1, compilers blocked" > "$OUT/doctor.txt"
    timeout "$(budget 45)" "$PY" -m fastmace.cli doctor >> "$OUT/doctor.txt" 2>&1
    echo "(doctor exit $?)" >> "$OUT/doctor.txt"
    timeout "$(budget 170)" "$PY" "$SMOKE" "$OUT/A.json" --model "$MODEL" --output "$WORK/A.fastmace" "${SMOKE_ARGS[@]}"
)
RC_A=$?
note "run A exit $RC_A ($(since))"

# --------------------------------------------------------------------------- 5. run B: built
echo "== run B: built ($(since))"
(
    export FASTMACE_OEQ_PREBUILT=0 FASTMACE_CACHE="$WORK/cache-B"
    export CPATH="$BUILD_SITE/nvidia/cu13/include:$BUILD_SITE/nvidia/cu13/include/cccl${CPATH:+:$CPATH}"
    echo "### run B (built): FASTMACE_OEQ_PREBUILT=0, compilers present, CPATH=$CPATH" >> "$OUT/doctor.txt"
    timeout "$(budget 45)" "$PY" -m fastmace.cli doctor >> "$OUT/doctor.txt" 2>&1
    echo "(doctor exit $?)" >> "$OUT/doctor.txt"
    timeout "$(budget 260)" "$PY" "$SMOKE" "$OUT/B.json" --model "$MODEL" --output "$WORK/B.fastmace" "${SMOKE_ARGS[@]}"
)
RC_B=$?
note "run B exit $RC_B ($(since))"

# --------------------------------------------------------------------------- 6. compare and summarise
if [ -f "$OUT/A.json" ] && [ -f "$OUT/B.json" ]; then
    "$PY" "$SMOKE" --compare "$OUT/A.json" "$OUT/B.json" > "$OUT/compare.txt" 2>&1
    RC_C=$?
else
    echo "compare: a record is missing" > "$OUT/compare.txt"
    RC_C=1
fi
"$PY" - "$OUT" "$RC_A" "$RC_B" "$RC_C" >> "$SUMMARY" <<'EOF'
import json, os, sys
out, rc_a, rc_b, rc_c = sys.argv[1], *sys.argv[2:]
for name, rc in (("A", rc_a), ("B", rc_b)):
    path = os.path.join(out, f"{name}.json")
    if not os.path.isfile(path):
        print(f"run {name}: no record (exit {rc})")
        continue
    r = json.load(open(path))
    ext = r.get("oeq_extension") or {}
    t = r.get("timings_s", {})
    print(f"run {name}: ok={r.get('ok')} backend={r.get('backend')} precision={(r.get('plan') or {}).get('force_precision')} "
          f"tier={(r.get('plan') or {}).get('tier')} exit={rc}")
    print(f"  oeq extension: source={ext.get('source')} extension_version={ext.get('extension_version')} "
          f"path={ext.get('path')} seconds={ext.get('seconds')}"
          + (f" prebuilt_skipped={ext.get('prebuilt_skipped')}" if ext.get("prebuilt_skipped") else "")
          + (f" error={ext.get('error')}" if ext.get("error") else ""))
    print(f"  fm.load oeq_runtime: {(r.get('oeq_runtime') or {}).get('fm_load')}")
    print(f"  prebuilt check: usable={(r.get('prebuilt_check') or {}).get('usable')} "
          f"reason={(r.get('prebuilt_check') or {}).get('reason')}")
    print(f"  OEq library loaded: {(r.get('openequivariance_loaded') or {}).get('torch_ext_so_path')}")
    print(f"  timings: fm.load {t.get('fm_load')} s, setup {t.get('simulation_setup')} s, run {t.get('run')} s "
          f"({t.get('per_step_ms')} ms/step), total {t.get('total')} s")
    energies = r.get("energies_eV") or []
    if energies:
        print(f"  energy: step {energies[0][0]} {energies[0][1]:.6f} eV, step {energies[-1][0]} {energies[-1][1]:.6f} eV")
    if r.get("error"):
        print(f"  error: {r['error']}")
lines = open(os.path.join(out, "sentinel.log")).read().splitlines()
blocked = [line for line in lines if line.startswith("BLOCKED")]
print(f"sentinels (run A): {len(blocked)} blocked calls, {len(lines) - len(blocked)} allowed cc calls")
for line in blocked[:10]:
    print(f"  {line[:200]}")
print(open(os.path.join(out, "compare.txt")).read().rstrip())
EOF
note "total $(since); exits A=$RC_A B=$RC_B compare=$RC_C"
echo "================ summary"
cat "$SUMMARY"
VERDICT=0; [ "$RC_A" = 0 ] && [ "$RC_B" = 0 ] && [ "$RC_C" = 0 ] || VERDICT=1
# The run record (records/runs/): the commit is the checkout's (RECORD_COMMIT: the GPU machine's copy has no .git).
if [ -n "${RECORD_COMMIT:-}" ]; then
    "$PY" "$ROOT/tools/run_record.py" --tool "tools/gpu_fastmace.sh WHEELDIR${SMOKE_ARGS[*]:+ (smoke: ${SMOKE_ARGS[*]})}" \
        --commit "$RECORD_COMMIT" --wheel "${oeq[0]}" --wheel "${ext[0]}" --verdict "$VERDICT" \
        --json A="$OUT/A.json" --json B="$OUT/B.json" --text summary="$SUMMARY" --text doctor="$OUT/doctor.txt" \
        --text compare="$OUT/compare.txt" --text sentinels="$OUT/sentinel.log" --out "$OUT/record.json"
fi
return "$VERDICT"
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
