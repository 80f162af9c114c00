#!/usr/bin/env bash
# The container runner (`oeq-wheels build --runner docker`, which parsed the options and made or pulled the image):
#   OEQ_WHEELS_IMAGE=IMAGE run_container.sh OUTDIR [build options in canonical form]
# No bind mounts (Docker Desktop's docker.exe cannot mount WSL paths): the sources go in
# as a tar stream on stdin, scratch (tool venv, pinned downloads, object cache) lives in
# the volume $OEQ_WHEELS_WORK_VOLUME, the wheels come back from $OEQ_WHEELS_OUT_VOLUME
# as a tar stream. Nothing is written into the repository.
# OEQ_WHEELS_DOCKER_NETWORK names the containers' network (e.g. host, where the engine has no
# bridge). The build writes /out/RESULT last: an engine's exit status alone is not trusted (podman
# 4.3's docker-compatible API returns 0 whatever the container's exit code, containers/podman#18889).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DOCKER="${DOCKER:-docker}"
IMAGE="${OEQ_WHEELS_IMAGE:?run_container.sh is called by oeq-wheels build --runner docker, which names the image}"
WORK_VOL="${OEQ_WHEELS_WORK_VOLUME:-fastmace-oeq-ext-work}"
OUT_VOL="${OEQ_WHEELS_OUT_VOLUME:-fastmace-oeq-ext-out}"
[ $# -ge 1 ] || { echo "usage: run_container.sh OUTDIR [build options] (called by oeq-wheels build --runner docker)" >&2; exit 2; }
# Docker's rule for volume names; it refuses others (a one-letter name), and then mounts nothing.
for v in "$WORK_VOL" "$OUT_VOL"; do
  [[ "$v" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]+$ ]] || {
    echo "build.sh: volume name '$v' is not one a container engine accepts; set OEQ_WHEELS_WORK_VOLUME and OEQ_WHEELS_OUT_VOLUME to names of two or more letters, digits, '_', '.' or '-'" >&2; exit 2; }
done
net=()
[ -n "${OEQ_WHEELS_DOCKER_NETWORK:-}" ] && net=(--network "$OEQ_WHEELS_DOCKER_NETWORK")
outdir="$1"; shift
args=("$@"); force=0
for a in "$@"; do [ "$a" = --force ] && force=1; done
extra="${outdir%/}-extra"
# One line where OUTDIR cannot be used (mkdir's own messages would be more), as the host build says it.
mkdir -p "$outdir" "$extra" 2>/dev/null || {
  echo "build.sh: error: cannot create output directory $outdir or $extra; choose another OUTDIR" >&2; exit 2; }
[ -w "$outdir" ] && [ -w "$extra" ] || {
  echo "build.sh: error: output directory $outdir or $extra is not writable; fix its permissions or choose another OUTDIR" >&2
  exit 2; }
name="oeq-wheels-$$-$RANDOM"
incoming="$(mktemp -d "$outdir/.incoming.XXXXXX")"
errlog="$(mktemp "${TMPDIR:-/tmp}/oeq-wheels-container.XXXXXX")"
job=""

cleanup() { rm -rf "$incoming" "$errlog"; }
# The engine's commands never inherit the volume locks (below): a process of the engine's that outlives the run
# (podman's conmon or pause process) would hold them.
engine() { "$DOCKER" "$@" 8>&- 9>&-; }
engine_gone() { ! engine info >/dev/null 2>&1; }
# Free space in the work volume, in KiB (a failed write may leave no message: pip cannot write its log).
volume_free_kb() {
  engine run --rm "${net[@]}" -v "$WORK_VOL:/work" "$IMAGE" df -Pk /work 2>/dev/null | awk 'NR == 2 { print $4; f = 1 } END { if (!f) print 999999999 }'
}
on_signal() {
  echo "build.sh: interrupted; stopping container $name, no wheel written to $outdir" >&2
  engine kill "$name" >/dev/null 2>&1 || true
  [ -n "$job" ] && wait "$job" 2>/dev/null || true
  cleanup
  exit 130
}
trap on_signal INT TERM
trap cleanup EXIT

# Runs that share a volume take turns: each starts by emptying them (rm -rf /work/src /out/*) and takes its wheels
# out after its container ends, so a second run at once would remove the first one's sources or wheels. A run holds
# a lock per volume (in the cache, as tools/bootstrap.sh's venv lock) from before it touches them until its wheels
# are out; the kernel drops it with the run, however it ends. A second run waits, naming the first.
LOCKS="${OEQ_WHEELS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/oeq-wheels}/container-volumes"
mkdir -p "$LOCKS" || { echo "build.sh: cannot create $LOCKS for the container volumes' locks; set OEQ_WHEELS_CACHE to a writable folder" >&2; exit 2; }
lock_volume() {  # FD VOLUME
  local file="$LOCKS/$2.lock"
  eval "exec $1>>\"\$file\""
  if ! flock -n "$1"; then
    echo "build.sh: volume $2 is in use by another container build ($(cat "$file" 2>/dev/null || true)); waiting for it to end" >&2
    flock "$1"
  fi
  printf 'pid %s, OUTDIR %s, since %s' "$$" "$outdir" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$file"
}
# In name order (two runs naming them the other way round must not each hold one), once for a volume named twice.
mapfile -t vols < <(printf '%s\n' "$WORK_VOL" "$OUT_VOL" | sort -u)
lock_volume 8 "${vols[0]}"
[ ${#vols[@]} -eq 1 ] || lock_volume 9 "${vols[1]}"

echo "build.sh: container runner, image $IMAGE (client: $DOCKER; volumes $WORK_VOL, $OUT_VOL)" >&2
engine image inspect "$IMAGE" >/dev/null 2>&1 || {
  echo "build.sh: the build image $IMAGE is not in $DOCKER's store; pull it, set OEQ_WHEELS_IMAGE, or build with --runner host" >&2; exit 1; }
for v in "$WORK_VOL" "$OUT_VOL"; do  # podman's create refuses an existing volume; docker's is idempotent
  engine volume inspect "$v" >/dev/null 2>&1 && continue
  out="$(engine volume create "$v" 2>&1 >/dev/null)" || {
    echo "build.sh: $DOCKER refuses volume $v (${out##*: }); set OEQ_WHEELS_WORK_VOLUME / OEQ_WHEELS_OUT_VOLUME to another name" >&2; exit 1; }
done

envs=(-e OEQ_WHEELS_CACHE=/work/cache)
[ -n "${OEQ_WHEELS_CONTAINER_CXX:-}" ] && envs+=(-e "CXX=$OEQ_WHEELS_CONTAINER_CXX")

# The working tree as git sees it (tracked and untracked-but-not-ignored files; not a tracked file deleted since).
( cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
    tar --null --no-recursion -T - -cf - ) |
  engine run --rm -i --name "$name" "${net[@]}" -v "$WORK_VOL:/work" -v "$OUT_VOL:/out" "${envs[@]}" "$IMAGE" \
    bash -c 'set -euo pipefail; rm -rf /work/src /out/*; mkdir -p /work/src; tar -C /work/src -xf -
             bash /work/src/tools/release/oeq_wheels/build_in_container.sh /out/dist "$@"
             echo ok > /out/RESULT' bash "${args[@]}" 2> >(tee "$errlog" >&2) &
job=$!
set +e
wait "$job"
rc=$?
set -e
job=""
if [ "$rc" -ne 0 ]; then
  if engine_gone; then
    echo "build.sh: the container engine stopped answering during the build (exit $rc); no wheel written to $outdir; start it again and rerun (volume $WORK_VOL keeps the downloads and objects)" >&2
  elif grep -q "No space left on device" "$errlog" || [ "$(volume_free_kb)" -lt 20480 ]; then
    echo "build.sh: the disk behind volume $WORK_VOL is full (No space left on device); no wheel written to $outdir; free space for $DOCKER or remove the volume ($DOCKER volume rm $WORK_VOL) and rerun" >&2
  else
    echo "build.sh: the container build failed (exit $rc); no wheel written to $outdir" >&2
  fi
  exit "$rc"
fi
engine run --rm "${net[@]}" -v "$OUT_VOL:/out" "$IMAGE" tar -C /out -cf - . | tar -C "$incoming" -xf - || {
  echo "build.sh: could not copy the wheels out of volume $OUT_VOL; no wheel written to $outdir" >&2; exit 1; }
[ "$(cat "$incoming/RESULT" 2>/dev/null)" = ok ] || {
  echo "build.sh: the container exited 0 but the build did not report success (no /out/RESULT); not trusting it, no wheel written to $outdir" >&2; exit 1; }
shopt -s nullglob
wheels=("$incoming"/dist/*.whl)
oeq=("$incoming"/dist-extra/*.whl)
[ ${#wheels[@]} -gt 0 ] || { echo "build.sh: the container produced no wheel" >&2; exit 1; }
check() {  # never replace a different file of the same name without --force
  local w="$1" dest="$2/$(basename "$1")"
  if [ -e "$dest" ] && ! cmp -s "$w" "$dest" && [ "$force" -eq 0 ]; then
    echo "build.sh: $dest already exists with different content; bump .postN in oeq_wheels/pins.toml (or --force for a local build)" >&2
    exit 1
  fi
}
for w in "${wheels[@]}"; do check "$w" "$outdir"; done
for w in "${oeq[@]}"; do check "$w" "$extra"; done
for w in "${wheels[@]}"; do mv -f "$w" "$outdir/"; done
for f in "${oeq[@]}" "$incoming"/dist-extra/REPORT.md "$incoming"/dist-extra/REPORT.json; do
  [ -e "$f" ] && mv -f "$f" "$extra/"
done
echo "build.sh: ${#wheels[@]} fastmace-oeq-ext wheel(s) in $outdir, ${#oeq[@]} served wheel(s) (openequivariance and its lines' fastmace-oeq-ext) in $extra, from image $IMAGE" >&2
