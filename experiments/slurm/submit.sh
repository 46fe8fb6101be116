#!/usr/bin/env bash
# Submits a canopy experiment to Slurm as a job array of N shards (one GPU each) plus a merge job
# that waits for all of them (--dependency=afterok). Prints the two job ids.
#
#   experiments/slurm/submit.sh CONFIG OUT_DIR N [sbatch options for the shard tasks...]
#
# Environment (all optional):
#   CANOPY_BIN        canopy binary, on a shared file system (default: build/full/experiments/canopy)
#   CANOPY_GRES       generic resources per shard task (default: gpu:1; empty: none, e.g. CPU-only runs)
#   CANOPY_PARTITION  partition for the shard tasks (default: the cluster's default)
#   CANOPY_MERGE_ARGS extra flags for canopy merge (e.g. --allow-mixed-devices)
# Examples: submit.sh experiments/configs/designs.toml /scratch/$USER/designs 8 --time=02:00:00
#           CANOPY_PARTITION=h100 submit.sh cfg.toml out 4 --constraint=h100
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 3 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
config=$1 out=$2 n=$3
shift 3
case "$n" in '' | *[!0-9]* | 0) echo "submit.sh: N must be a whole number >= 1, got '$n'" >&2; exit 2 ;; esac
[ -f "$config" ] || { echo "submit.sh: config '$config' not found" >&2; exit 2; }
bin=${CANOPY_BIN:-$here/../../build/full/experiments/canopy}
[ -x "$bin" ] || { echo "submit.sh: canopy binary '$bin' not found (set CANOPY_BIN)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
mkdir -p "$out"
out=$(cd "$out" && pwd)
shard_opts=(--array="0-$((n - 1))" --chdir="$out")
gres=${CANOPY_GRES-gpu:1}
[ -n "$gres" ] && shard_opts+=(--gres="$gres")
[ -n "${CANOPY_PARTITION:-}" ] && shard_opts+=(--partition="$CANOPY_PARTITION")
export CANOPY_BIN="$bin" CANOPY_CONFIG="$config" CANOPY_OUT="$out" CANOPY_SHARDS="$n"
array=$(sbatch --parsable --export=ALL "${shard_opts[@]}" "$@" "$here/canopy-shard.sbatch")
array=${array%%;*}
merge=$(sbatch --parsable --export=ALL --chdir="$out" --dependency="afterok:$array" \
  ${CANOPY_PARTITION:+--partition="$CANOPY_PARTITION"} "$here/canopy-merge.sbatch")
merge=${merge%%;*}
echo "array job $array ($n shards) -> $out/shard-*; merge job $merge -> $out/merged"
