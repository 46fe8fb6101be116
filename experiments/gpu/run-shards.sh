#!/usr/bin/env bash
# Runs a canopy experiment as N shards on the N GPUs of this host, all at once, one process per GPU
# pinned to it (CUDA_VISIBLE_DEVICES), then merges them: the one-host counterpart of
# experiments/slurm/submit.sh, with the same folder layout (OUT/shard-K, OUT/merged).
#
#   experiments/gpu/run-shards.sh [options] CONFIG OUT [N]
#
#   N                  shards, one per GPU (default: every visible GPU: the entries of
#                      CUDA_VISIBLE_DEVICES when it is set, else the GPUs nvidia-smi -L lists)
#   --devices LIST     the GPUs to use, comma-separated indices or UUIDs (default: as for N); shard K
#                      runs with CUDA_VISIBLE_DEVICES=LIST[K]
#   --devices none     no GPU: every shard runs with CUDA_VISIBLE_DEVICES= (host designs only; N is
#                      then required and not bounded by the GPUs), e.g. to test the launcher on a CPU host
#   --overwrite        rerun every shard, replacing finished ones (default: a rerun skips them)
#   --merge-args ARGS  extra flags for canopy merge (e.g. --allow-mixed-devices)
# Environment: CANOPY_BIN, the canopy binary (default: build/full/experiments/canopy).
#
# Shard K writes OUT/shard-K and logs to OUT/shard-K.log; OUT/shard-K.done records a finished shard
# (its exit code, N, and digests of the config and the binary), so a rerun with the same config,
# binary and N runs only the shards that did not finish. A shard that fails (exit 2, 3, 4, or a
# signal) fails the run: its log is named, the merge does not run, the other shards finish. A shard
# whose designs FAILED a check (exit 1) wrote its rows; they are merged and the run exits 1.
# Exit codes: canopy's (0, 1, 2, 3, 4); a shard killed by a signal is 3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "run-shards: $*" >&2
  exit 2
}

devices="" overwrite=0 merge_args=""
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --devices) [ $# -ge 2 ] || die "--devices needs a value (a list of GPUs, or none)"; devices=$2; shift 2 ;;
    --devices=*) devices=${1#--devices=}; shift ;;
    --overwrite) overwrite=1; shift ;;
    --merge-args) [ $# -ge 2 ] || die "--merge-args needs a value"; merge_args=$2; shift 2 ;;
    --merge-args=*) merge_args=${1#--merge-args=}; shift ;;
    -h | --help) usage ;;
    --) shift; positional+=("$@"); break ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ ${#positional[@]} -lt 2 ] || [ ${#positional[@]} -gt 3 ]; then usage; fi
config=${positional[0]} out=${positional[1]} n=${positional[2]:-}
[ -f "$config" ] || die "config '$config' not found"
[ -n "$out" ] || die "OUT must not be empty"
bin=${CANOPY_BIN:-$here/../../build/full/experiments/canopy}
[ -x "$bin" ] || die "canopy binary '$bin' not found (set CANOPY_BIN)"
if [ -n "$n" ]; then
  case "$n" in *[!0-9]* | 0*) die "N must be a whole number >= 1, got '$n'" ;; esac
fi

# The GPUs, one per shard. CUDA numbers GPUs fastest first unless told otherwise; PCI order is the
# order nvidia-smi lists them in, so an index means the same card to both.
export CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}
gpus=()
if [ "$devices" = none ]; then
  [ -n "$n" ] || die "--devices none needs N (there are no GPUs to count)"
elif [ -n "$devices" ]; then
  IFS=, read -r -a gpus <<< "$devices"
elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # set, even empty: what this shell may use
  IFS=, read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi > /dev/null; then
  count=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
  for ((i = 0; i < count; ++i)); do gpus+=("$i"); done
fi
if [ "$devices" != none ]; then
  for g in "${gpus[@]}"; do
    [ -n "$g" ] || die "an empty entry in the GPU list '${devices:-$CUDA_VISIBLE_DEVICES}'"
  done
  [ ${#gpus[@]} -gt 0 ] || die "no GPU visible (CUDA_VISIBLE_DEVICES is empty, or unset and nvidia-smi -L lists none); name them with --devices, or pass --devices none N for host designs"
  n=${n:-${#gpus[@]}}
  [ "$n" -le ${#gpus[@]} ] || die "$n shards but ${#gpus[@]} GPU(s) (${gpus[*]}): one shard per GPU, so N <= ${#gpus[@]}"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One launcher per folder: a second would race this one's shards and marks.
exec 9> "$out/.run-shards.lock"
flock -n 9 || die "'$out' is in use by another run-shards.sh"

# What a finished shard must match to be skipped: the config's text, the binary and N.
stamp="shards=$n config=$(sha256sum < "$config" | cut -c1-16) bin=$(sha256sum < "$bin" | cut -c1-16)"
pids=() shards=()
# shellcheck disable=SC2317  # called by the trap
stop() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  echo "run-shards: interrupted; the shards that finished are kept (a rerun skips them)" >&2
  exit 3
}
trap stop INT TERM
for ((k = 0; k < n; ++k)); do
  dir=$out/shard-$k log=$out/shard-$k.log done_mark=$out/shard-$k.done
  if [ "$overwrite" = 0 ] && [ -f "$dir/results.json" ] && [ -f "$done_mark" ] &&
    grep -Eqx "exit=[01] $stamp" "$done_mark"; then
    echo "run-shards: shard $k/$n finished before (${dir}), skipped"
    continue
  fi
  rm -f "$done_mark"
  # A shard folder left by a failed or killed attempt holds at most that attempt's results.
  again=()
  [ -e "$dir" ] && again=(--overwrite)
  if [ "$devices" = none ]; then visible="" where="no GPU"; else visible=${gpus[$k]} where="GPU ${gpus[$k]}"; fi
  echo "run-shards: shard $k/$n on $where -> $dir (log $log)"
  (
    # Each shard finds its own GPU as device 0; its mark is written only once it has exited. A
    # background job ignores SIGINT, so a stop reaches canopy as SIGTERM, forwarded here.
    set +e
    CUDA_VISIBLE_DEVICES=$visible "$bin" run "$config" --shard "$k/$n" --out "$dir" --quiet "${again[@]}" > "$log" 2>&1 &
    child=$!
    trap 'kill "$child" 2> /dev/null' TERM
    wait "$child"
    rc=$?
    [ "$rc" -le 1 ] && echo "exit=$rc $stamp" > "$done_mark"
    exit "$rc"
  ) &
  pids+=($!)
  shards+=("$k")
done

failed=0 first_rc=0
for i in "${!pids[@]}"; do
  k=${shards[$i]}
  rc=0
  wait "${pids[$i]}" || rc=$?
  [ "$rc" -le 1 ] && continue
  if [ "$rc" -gt 128 ]; then
    why="killed by signal $((rc - 128))"
    rc=3
  else
    why="exit $rc"
  fi
  echo "run-shards: FAILED: shard $k/$n ($why); see $out/shard-$k.log:" >&2
  tail -n 5 "$out/shard-$k.log" | sed 's/^/  /' >&2 || true
  failed=$((failed + 1))
  [ "$first_rc" = 0 ] && first_rc=$rc
done
trap - INT TERM
if [ "$failed" -gt 0 ]; then
  echo "run-shards: $failed of $n shard(s) failed, nothing merged; rerun the same command to run only those" >&2
  exit "$first_rc"
fi

dirs=()
for ((k = 0; k < n; ++k)); do dirs+=("$out/shard-$k"); done
rc=0
# shellcheck disable=SC2086
"$bin" merge "${dirs[@]}" --out "$out/merged" --overwrite $merge_args > "$out/merge.log" 2>&1 || rc=$?
if [ "$rc" -gt 1 ]; then
  echo "run-shards: FAILED: canopy merge (exit $rc); see $out/merge.log:" >&2
  tail -n 5 "$out/merge.log" | sed 's/^/  /' >&2
  exit "$rc"
fi
echo "run-shards: $n shard(s) merged into $out/merged (log $out/merge.log)"
exit "$rc"
