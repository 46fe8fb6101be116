#!/bin/sh
# Exit code 4, "needs a GPU this host lacks", the same for every subcommand: `check` of a named
# CUDA design, `peaks`, and a `run` in which every row was skipped for want of a GPU (its skipped
# rows still written). Bad input still wins (2), and work that can run here is not held back by
# designs that cannot (`check --designs all`, a run with host rows beside skipped GPU rows: 0).
# The GPU is hidden (CUDA_VISIBLE_DEVICES=""), so the test means the same on a GPU host.
# Usage: no_gpu_exit_codes.sh CANOPY_BINARY SOURCE_DIR WORK_DIR
set -u
canopy="$1"
src="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
CUDA_VISIBLE_DEVICES=""
export CUDA_VISIBLE_DEVICES
# A build whose Kokkos itself runs on CUDA cannot start without a device: nothing to test there.
if ! "$canopy" designs > designs.md 2>&1; then
  echo "SKIP: canopy does not start without a visible GPU in this build"
  exit 0
fi
grep -q "^| cuda-flat | CUDA device | no: " designs.md || { cat designs.md; echo "FAILED: cuda-flat should not run with the GPU hidden" >&2; exit 1; }
. "$src/tests/experiments/expect.sh"
small="--batch 1 --heads 2 --tree 5 --prefix 64"
trace="$src/data/ddtree_b8_ctx1k.h5"

# check: a CUDA design named on the command line is refused before any work ...
expect 4 "--designs: cuda-sm120 needs a GPU this host lacks" "$canopy" check $small --designs cuda-sm120
expect 4 "--designs: cuda-flat needs a GPU this host lacks" "$canopy" check $small --designs reference,cuda-flat
grep -q "| pass " out.log && { echo "FAILED: check ran the reference before refusing cuda-flat" >&2; failures=$((failures + 1)); }
expect 4 "--designs: cuda-sm120 needs a GPU this host lacks" "$canopy" check --trace "$trace" --steps 1 --designs cuda-sm120
# ... bad input first: the same command is wrong on any host ...
expect 2 "--tree: 0 tree nodes per request: nothing to check" "$canopy" check --tree 0 --designs cuda-sm120
expect 2 "no-such-design" "$canopy" check $small --designs no-such-design
expect 2 "" "$canopy" check --trace no_such.h5 --designs cuda-sm120
# ... and "all" means what runs here, saying what it leaves out.
expect 0 "" "$canopy" check $small --designs all
grep -q "(skipping cuda-sm120: " out.log || { echo "FAILED: check --designs all does not say it skips cuda-sm120" >&2; failures=$((failures + 1)); }

# peaks measures the GPU: nothing to do without one.
expect 4 "canopy peaks needs a GPU this host lacks" "$canopy" peaks --quick --warps 4
# ... but an output file it could never write is bad input on any host, found before measuring.
expect 2 "--out: empty; give a file to write" "$canopy" peaks --quick --out ''
expect 2 "--out: folder 'no-such-folder' of 'no-such-folder/p.json' does not exist" "$canopy" peaks --quick --out no-such-folder/p.json

# run: every row skipped for want of a GPU -> 4, the skipped rows written with their reason ...
expect 4 "every row was skipped: cuda-sm120 needs a GPU this host lacks" \
  "$canopy" run "$src/tests/experiments/cuda_smoke.toml" --quiet --out gpu-only
/usr/bin/python3 - gpu-only/results.json <<'PY' || failures=$((failures + 1))
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
if not rows or any(r["status"] != "skipped" or "no usable GPU" not in r["note"] for r in rows):
    sys.exit("FAILED: gpu-only/results.json should hold only rows skipped for want of a GPU")
PY
# ... but rows that ran count: a host design beside a skipped GPU design is a run (0).
cat > mixed.toml <<'EOF'
[experiment]
name = "mixed"
repetitions = 2
warmup = 0
[[inputs.sweep]]
batch = [1]
heads = [2]
tree = [5]
prefix = [32]
[designs]
names = ["cuda-flat", "reference"]
[options]
mode = ["eager"]
EOF
expect 0 "" "$canopy" run mixed.toml --quiet --out mixed
/usr/bin/python3 - mixed/results.json <<'PY' || failures=$((failures + 1))
import json, sys
status = {r["design"]: r["status"] for r in json.load(open(sys.argv[1]))["rows"]}
if status != {"cuda-flat": "skipped", "reference": "ok"}:
    sys.exit("FAILED: mixed/results.json: expected cuda-flat skipped and reference ok, got %s" % status)
PY

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed" >&2; exit 1; }
echo "no-GPU exit codes: all checks passed"
