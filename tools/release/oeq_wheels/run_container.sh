#!/usr/bin/env bash
# The container runner (`oeq-wheels build --runner docker`, which parsed the options):
#   run_container.sh OUTDIR [build options in canonical form]
# No bind mounts (Docker Desktop's docker.exe cannot mount WSL paths): the sources go in
# as a tar stream on stdin, scratch (tool venv, pinned downloads, object cache) lives in
# the volume $OEQ_WHEELS_WORK_VOLUME, the wheels come back from $OEQ_WHEELS_OUT_VOLUME
# as a tar stream. Nothing is written into the repository.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
DOCKER="${DOCKER:-docker}"
IMAGE="${OEQ_WHEELS_IMAGE:-$(grep -v '^#' "$REPO/docker/IMAGE" | head -n1)}"
WORK_VOL="${OEQ_WHEELS_WORK_VOLUME:-fastmace-oeq-ext-work}"
OUT_VOL="${OEQ_WHEELS_OUT_VOLUME:-fastmace-oeq-ext-out}"
[ $# -ge 1 ] || { echo "usage: run_container.sh OUTDIR [build options] (called by oeq-wheels build --runner docker)" >&2; exit 2; }
outdir="$1"; shift
args=("$@"); force=0
for a in "$@"; do [ "$a" = --force ] && force=1; done
extra="${outdir%/}-extra"
mkdir -p "$outdir" "$extra" || { echo "build.sh: cannot create output directory $outdir or $extra" >&2; exit 2; }
[ -w "$outdir" ] && [ -w "$extra" ] || { echo "build.sh: output directory $outdir or $extra is not writable" >&2; exit 2; }
name="oeq-wheels-$$-$RANDOM"
incoming="$(mktemp -d "$outdir/.incoming.XXXXXX")"
job=""

cleanup() { rm -rf "$incoming"; }
on_signal() {
  echo "build.sh: interrupted; stopping container $name, no wheel written to $outdir" >&2
  "$DOCKER" kill "$name" >/dev/null 2>&1 || true
  [ -n "$job" ] && wait "$job" 2>/dev/null || true
  cleanup
  exit 130
}
trap on_signal INT TERM
trap cleanup EXIT

echo "build.sh: container runner, image $IMAGE (client: $DOCKER; volumes $WORK_VOL, $OUT_VOL)" >&2
"$DOCKER" volume create "$WORK_VOL" >/dev/null
"$DOCKER" volume create "$OUT_VOL" >/dev/null

envs=(-e OEQ_WHEELS_CACHE=/work/cache)
[ -n "${OEQ_WHEELS_CONTAINER_CXX:-}" ] && envs+=(-e "CXX=$OEQ_WHEELS_CONTAINER_CXX")

# The working tree as git sees it (tracked and untracked-but-not-ignored files).
( cd "$REPO" && git ls-files -z --cached --others --exclude-standard | tar --null --no-recursion -T - -cf - ) |
  "$DOCKER" run --rm -i --name "$name" -v "$WORK_VOL:/work" -v "$OUT_VOL:/out" "${envs[@]}" "$IMAGE" \
    bash -c 'set -euo pipefail; rm -rf /work/src /out/*; mkdir -p /work/src; tar -C /work/src -xf -
             exec bash /work/src/tools/release/oeq_wheels/build_in_container.sh /out/dist "$@"' bash "${args[@]}" &
job=$!
set +e
wait "$job"
rc=$?
set -e
job=""
if [ "$rc" -ne 0 ]; then
  echo "build.sh: the container build failed (exit $rc); no wheel written to $outdir" >&2
  exit "$rc"
fi
"$DOCKER" run --rm -v "$OUT_VOL:/out" "$IMAGE" tar -C /out -cf - . | tar -C "$incoming" -xf -
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
echo "build.sh: ${#wheels[@]} fastmace-oeq-ext wheel(s) in $outdir, ${#oeq[@]} openequivariance wheel(s) in $extra, from image $IMAGE" >&2
