#!/bin/bash
# experiments/gpu/run-shards.sh on a host without GPUs, with host designs:
# - N shards start at once (a barrier in a stand-in canopy would wait forever for a one-by-one
#   launcher), each pinned to its own entry of the GPU list (CUDA_VISIBLE_DEVICES), N = the GPUs
#   nvidia-smi lists (a stand-in here) or CUDA_VISIBLE_DEVICES names, never more shards than GPUs;
# - a shard killed mid-run fails the run naming its log, nothing is merged; the rerun runs only that
#   shard, and the merged rows are the rows of the unsharded run;
# - --devices none runs N shards with no GPU visible.
# Usage: run_shards.sh CANOPY_BINARY SOURCE_DIR WORK_DIR
set -u
canopy="$1"
src="$2"
work="$3"
config="$src/tests/experiments/tiny_run.toml"
launcher="$src/experiments/gpu/run-shards.sh"
rm -rf "$work"
mkdir -p "$work/bin"
cd "$work" || exit 1
. "$src/tests/experiments/expect.sh"

# The stand-in canopy: logs each shard's start and CUDA_VISIBLE_DEVICES, waits until WRAP_N shards
# have started (60 s, then exit 3), kills itself on shard WRAP_KILL, else runs the real canopy.
cat > bin/canopy <<EOF
#!/bin/bash
if [ "\$1" = run ]; then
  shard=\$(echo "\$*" | sed -n 's|.*--shard \([0-9]*\)/.*|\1|p')
  echo "shard=\$shard visible=\${CUDA_VISIBLE_DEVICES-unset}" >> "$work/starts"
  for _ in \$(seq 600); do
    [ "\$(wc -l < "$work/starts")" -ge "\${WRAP_N:-1}" ] && break
    sleep 0.1
  done
  [ "\$(wc -l < "$work/starts")" -ge "\${WRAP_N:-1}" ] || { echo "shards did not start at once" >&2; exit 3; }
  [ "\$shard" = "\${WRAP_KILL:-}" ] && kill -9 \$\$
fi
exec "$canopy" "\$@"
EOF
chmod +x bin/canopy
export CANOPY_BIN="$work/bin/canopy"
unset CUDA_VISIBLE_DEVICES
started() { sort starts | tr '\n' ' '; }

"$canopy" run "$config" --out whole --quiet > /dev/null 2>&1 || fail "the unsharded run"

# Three shards at once, shard 1 killed: the run fails naming shard 1's log, and merges nothing.
: > starts
WRAP_N=3 WRAP_KILL=1 expect 3 "shard 1/3 (killed by signal 9); see $work/sw/shard-1.log" \
  "$launcher" --devices none "$config" sw 3
[ "$(started)" = "shard=0 visible= shard=1 visible= shard=2 visible= " ] || fail "starts: $(started)"
[ -e sw/merged ] && fail "merged although shard 1 was killed"
[ -s sw/shard-0/results.json ] && [ -s sw/shard-2/results.json ] || fail "the other shards did not finish"
before=$(cat sw/shard-0/results.json sw/shard-2/results.json | sha256sum)

# The rerun runs shard 1 alone, then merges; the merged rows are the unsharded run's.
: > starts
expect 0 "" "$launcher" --devices none "$config" sw 3
[ "$(started)" = "shard=1 visible= " ] || fail "the rerun ran $(started), expected shard 1 alone"
grep -q "shard 0/3 finished before" out.log && grep -q "shard 2/3 finished before" out.log || fail "skips not said"
[ "$(cat sw/shard-0/results.json sw/shard-2/results.json | sha256sum)" = "$before" ] || fail "finished shards rerun"
python3 "$src/experiments/tools/same_rows.py" whole/results.json sw/merged/results.json > same.log ||
  fail "merged rows differ from the unsharded run's: $(cat same.log)"
python3 -c "import json, sys; e = json.load(open('sw/merged/results.json'))['environment']
sys.exit(not all('shard_%d' % k in e for k in range(3)))" || fail "the merged environment lost a shard's device record"
# A third run has nothing left to run and merges again; another N is another split.
: > starts
expect 0 "" "$launcher" --devices none "$config" sw 3
[ -s starts ] && fail "a finished sweep reran $(started)"
expect 2 "--devices none needs N" "$launcher" --devices none "$config" sw

# One shard per GPU, each pinned to its entry: an explicit list, CUDA_VISIBLE_DEVICES, nvidia-smi.
: > starts
WRAP_N=3 expect 0 "" "$launcher" --devices 3,1,2 "$config" list
[ "$(started)" = "shard=0 visible=3 shard=1 visible=1 shard=2 visible=2 " ] || fail "--devices 3,1,2: $(started)"
: > starts
CUDA_VISIBLE_DEVICES=5,7 WRAP_N=2 expect 0 "" "$launcher" "$config" cvd
[ "$(started)" = "shard=0 visible=5 shard=1 visible=7 " ] || fail "CUDA_VISIBLE_DEVICES=5,7: $(started)"
mkdir smi
cat > smi/nvidia-smi <<'EOF'
#!/bin/sh
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-1111-1111-1111-111111111111)"
EOF
chmod +x smi/nvidia-smi
: > starts
PATH="$work/smi:$PATH" WRAP_N=2 expect 0 "" "$launcher" "$config" smi
[ "$(started)" = "shard=0 visible=0 shard=1 visible=1 " ] || fail "nvidia-smi's two GPUs: $(started)"
PATH="$work/smi:$PATH" expect 2 "3 shards but 2 GPU(s) (0 1)" "$launcher" "$config" smi3 3
expect 2 "empty entry" "$launcher" --devices 0,,1 "$config" bad
expect 2 "N must be a whole number" "$launcher" --devices none "$config" bad 0
mkdir nogpu && printf '#!/bin/sh\necho "No devices were found"\n' > nogpu/nvidia-smi && chmod +x nogpu/nvidia-smi
PATH="$work/nogpu:$PATH" expect 2 "no GPU visible" "$launcher" "$config" none
CUDA_VISIBLE_DEVICES= PATH="$work/smi:$PATH" expect 2 "CUDA_VISIBLE_DEVICES is empty" "$launcher" "$config" hidden

[ "$failures" -eq 0 ] && echo "run_shards: all checks passed"
exit $((failures > 0))
