#!/bin/sh
# Replays the committed fuzz corpus (experiments/fuzz/corpus: every input that ever crashed, hung
# or gave a wrong exit code) through `canopy trace info`, `trace validate` and `check --trace`.
# Each must finish within 30 s with exit 0 or 2 (check: 0, 1 or 2), never a runtime failure (3),
# a crash or a hang. Raw-mode inputs (first byte 0) are HDF5 images behind that byte; structured
# ones are decoded by the fuzz target alone and are skipped here.
# Usage: fuzz_corpus.sh CANOPY_BINARY CORPUS_DIR WORK_DIR
set -u
canopy="$1"
corpus="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work"
failures=0
replayed=0
for input in "$corpus"/*; do
  [ -f "$input" ] || continue
  [ "$(head -c 1 "$input" | od -An -tu1 | tr -d ' ')" = "0" ] || continue
  file="$work/$(basename "$input").h5"
  tail -c +2 "$input" > "$file"
  replayed=$((replayed + 1))
  for cmd in "trace info" "trace validate" "check --designs reference --trace"; do
    # shellcheck disable=SC2086
    timeout 30 "$canopy" $cmd "$file" > "$work/out.log" 2> "$work/err.log"
    rc=$?
    case "$cmd:$rc" in
      *:0 | *:2 | check*:1) ;;
      *)
        echo "FAILED: canopy $cmd $(basename "$input"): exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')" >&2
        tail -3 "$work/err.log" >&2
        failures=$((failures + 1))
        ;;
    esac
  done
done
[ "$replayed" -gt 0 ] || { echo "FAILED: no raw-mode input in $corpus" >&2; exit 1; }
[ "$failures" -eq 0 ] || { echo "$failures replay(s) failed" >&2; exit 1; }
echo "fuzz corpus: $replayed inputs replayed through info, validate and check --trace"
