#!/bin/sh
# What the command line refuses, with exit 2 and the culprit named:
# - a run owns its output folder: checked before any work, locked while it runs, never replaced
#   without --overwrite, written as one set; merge never writes over its inputs; trace synth never
#   replaces a file silently;
# - one validation of a run's inputs, with the same limits and words for flags and config keys;
#   empty work is "nothing to check", never a pass; conflicting or ignored flags are named.
# Usage: cli_refusals.sh CANOPY_BINARY SOURCE_DIR WORK_DIR
set -u
canopy="$1"
src="$2"
config="$src/tests/experiments/tiny_run.toml"
work="$3"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
. "$src/tests/experiments/expect.sh"
touch a-file
run_out() { code="$1"; needle="$2"; shift 2; expect "$code" "$needle" "$canopy" run "$config" --quiet "$@"; }
run_out 2 "--out: output folder 'a-file/results' cannot be created" --out a-file/results
run_out 2 "--out: the output folder is empty" --out ""
run_out 0 "" --out first
run_out 2 "is not empty" --out first
run_out 0 "" --out first --overwrite
ls -a first | grep -q "canopy-staging\|\.tmp\." && { echo "FAILED: temporaries left in first/" >&2; failures=$((failures + 1)); }
ls -a . | grep -q "canopy-staging" && { echo "FAILED: staging folder left beside first/" >&2; failures=$((failures + 1)); }
mkdir foreign && touch foreign/notes.txt
run_out 2 "holds files that are not a canopy run's results" --out foreign --overwrite
# A second run into a folder another run holds is refused while the first holds it.
flock first/.canopy.lock sleep 5 &
holder=$!
sleep 0.5
run_out 2 "in use by another canopy run" --out first --overwrite
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# merge: never into one of its inputs, never over a folder silently.
"$canopy" run "$config" --quiet --shard 0/2 --out s0 > /dev/null 2>&1
"$canopy" run "$config" --quiet --shard 1/2 --out s1 > /dev/null 2>&1
expect 2 "--out: 's0' is also input 1" "$canopy" merge s0 s1 --out s0
expect 2 "is also input 1 ('s0')" "$canopy" merge s0 s1 --out ./s0/ --overwrite
expect 0 "" "$canopy" merge s0 s1 --out merged
expect 2 "is not empty" "$canopy" merge s0 s1 --out merged

if "$canopy" trace --help > /dev/null 2>&1; then
  synth() { code="$1"; needle="$2"; shift 2; expect "$code" "$needle" "$canopy" trace synth --steps 2 --concurrency 2 --budget 4 --prompt 16 --output 8 --num-slots 512 -q "$@"; }
  synth 0 "" --out t.h5
  synth 2 "--out: 't.h5' exists; pass --overwrite" --out t.h5
  synth 0 "" --out t.h5 --overwrite
  synth 2 "--concurrency and --rate" --out u.h5 --rate 2
fi
# ---- one validation of the inputs: flags ...
expect 2 "--batch: 0 requests with work: nothing to check" "$canopy" check --batch 0
expect 2 "--tree: 0 tree nodes per request: nothing to check" "$canopy" check --tree 0
expect 2 "--tree: must be in [1, 1024] (tree nodes per request), got 100000" "$canopy" check --tree 100000
expect 2 "--nsplit: must be in [0, 1024]" "$canopy" check --nsplit 100000000
expect 2 "--heads: must be in [1, 128]" "$canopy" check --heads 0
expect 2 "--seed: must be a non-negative integer" "$canopy" check --seed -1
expect 2 "--steps: applies to --trace only" "$canopy" check --steps 3
trace="$src/data/ddtree_b8_ctx1k.h5"
for flag in "--batch 2" "--tree 5" "--ragged" "--prefix 64"; do
  expect 2 "and --trace: the trace fixes the shapes" "$canopy" check --trace "$trace" $flag
done
# ... and the same keys in a config, the same words.
sweep() {
  { echo '[experiment]'; echo "$1"; echo '[[inputs.sweep]]'; echo "$2"; echo '[designs]'; echo "${3:-names = [\"reference\"]}"
    echo '[options]'; echo "${4:-}"; } > bad.toml
}
config_refused() { expect 2 "$1" "$canopy" run bad.toml --quiet --out "bad-$(date +%s%N)"; }
sweep "" "tree = [100000]";               config_refused "inputs.sweep[0].tree[0]: must be in [1, 1024] (tree nodes per request), got 100000"
sweep "" "tree = [0]";                    config_refused "inputs.sweep[0].tree[0]: 0 tree nodes per request: nothing to check"
sweep "" "heads = [1000]";                config_refused "inputs.sweep[0].heads[0]: must be in [1, 128]"
sweep "" "prefix = [-1]";                 config_refused "inputs.sweep[0].prefix[0]: must be in [0, 16777216]"
sweep "" "batch = [2]" "" "nsplit = [100000000]"; config_refused "options.nsplit[0]: must be in [0, 1024]"
sweep "check_rate = nan" "batch = [1]";   config_refused "experiment.check_rate: must be a finite number in [0, 1], got nan"
sweep "max_check_gflop = -1" "batch = [1]"; config_refused "experiment.max_check_gflop: must be a finite number"
sweep "repetitions = 0" "batch = [1]";    config_refused "experiment.repetitions: must be in [1, 1000000]"
sweep "" "batch = [1]" 'names = ["reference", "reference"]'; config_refused "designs.names[1]: 'reference' is listed twice"
# FP8 keys (docs/experiments.md, "KV dtype"): unknown dtypes, scales an fp32 cannot hold as > 0, and
# numerics with no meaning for an input's dtype, each refused naming its key before any work.
sweep "" "kv_dtype = \"fp8\"";          config_refused "inputs.sweep[0].kv_dtype[0]: unknown kv dtype 'fp8'"
sweep "" "kv_scale = 0";                  config_refused "inputs.sweep[0].kv_scale: must be a finite number > 0"
sweep "" "kv_scale = nan";                config_refused "inputs.sweep[0].kv_scale: must be a finite number > 0"
sweep "" "kv_dtype = \"fp8-e4m3\"" "" 'numerics = "mma"'; config_refused "options.numerics[0]: unknown numerics 'mma'"
sweep "" "batch = [1]" "" 'numerics = ["fp8-mma"]'; config_refused "options.numerics[0]: numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not bf16"
sweep "" "kv_dtype = \"fp8-e4m3-blockscaled\"" "" 'numerics = ["fp8-mma"]'; config_refused "not fp8-e4m3-blockscaled (inputs.sweep[0].kv_dtype[0])"
{ echo '[inputs]'; echo "traces = [\"$trace\"]"; echo '[designs]'; echo 'names = ["reference"]'; echo '[options]'; echo 'numerics = "fp8-mma"'; } > bad.toml
config_refused "options.numerics[0]: numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not bf16 (inputs.traces[0]"
ls -d bad-* > /dev/null 2>&1 && { echo "FAILED: a refused config left an output folder" >&2; failures=$((failures + 1)); }
{ echo '[inputs]'; echo 'max_steps = -1'; echo "traces = [\"$trace\"]"; echo '[designs]'; echo 'names = ["reference"]'; } > bad.toml
config_refused "inputs.max_steps: must be in [0,"

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed" >&2; exit 1; }
echo "cli refusals: all checks passed"
