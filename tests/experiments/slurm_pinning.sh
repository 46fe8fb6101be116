#!/bin/bash
# The Slurm path without a cluster (stand-ins for sbatch and srun): submit.sh asks one GPU per array
# task, and a task runs its shard pinned to one GPU as experiments/gpu/run-shards.sh pins one: the
# GPU Slurm set in CUDA_VISIBLE_DEVICES, else the one it allocated (SLURM_JOB_GPUS), the first of several.
# Usage: slurm_pinning.sh SOURCE_DIR WORK_DIR
set -u
src="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work/bin"
cd "$work" || exit 1
. "$src/tests/experiments/expect.sh"
printf '#!/bin/sh\necho "$*" >> %s/sbatch.args\necho 42\n' "$work" > bin/sbatch
printf '#!/bin/sh\nexec "$@"\n' > bin/srun
printf '#!/bin/sh\necho "canopy $* visible=${CUDA_VISIBLE_DEVICES-unset}"\n' > bin/canopy
chmod +x bin/*
export PATH="$work/bin:$PATH"
touch config.toml

CANOPY_BIN="$work/bin/canopy" expect 0 "" "$src/experiments/slurm/submit.sh" config.toml sweep 4
head -n 1 sbatch.args | grep -q -- "--array=0-3 .*--gres=gpu:1 " || fail "array job args: $(head -n 1 sbatch.args)"

task() {  # task K ENV...: runs array task K of 4 with ENV, prints what canopy was run as
  k=$1
  shift
  env -u CUDA_VISIBLE_DEVICES -u SLURM_JOB_GPUS CANOPY_BIN="$work/bin/canopy" CANOPY_CONFIG=config.toml \
    CANOPY_OUT=sweep SLURM_ARRAY_TASK_ID="$k" SLURM_ARRAY_TASK_COUNT=4 "$@" \
    bash "$src/experiments/slurm/canopy-shard.sbatch" 2> task.err | grep '^canopy run'
}
[ "$(task 1 CUDA_VISIBLE_DEVICES=0)" = "canopy run config.toml --shard 1/4 --out sweep/shard-1 --quiet visible=0" ] ||
  fail "gres-pinned task: $(task 1 CUDA_VISIBLE_DEVICES=0)"
[ "$(task 2 SLURM_JOB_GPUS=6)" = "canopy run config.toml --shard 2/4 --out sweep/shard-2 --quiet visible=6" ] ||
  fail "task given GPU 6 without gres pinning: $(task 2 SLURM_JOB_GPUS=6)"
[ "$(task 3 CUDA_VISIBLE_DEVICES=2,5)" = "canopy run config.toml --shard 3/4 --out sweep/shard-3 --quiet visible=2" ] ||
  fail "task shown two GPUs: $(task 3 CUDA_VISIBLE_DEVICES=2,5)"
grep -q "given GPUs 2,5, runs on the first" task.err || fail "two GPUs not said: $(cat task.err)"

[ "$failures" -eq 0 ] && echo "slurm_pinning: all checks passed"
exit $((failures > 0))
