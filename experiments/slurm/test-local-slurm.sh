#!/usr/bin/env bash
# End-to-end test of the Slurm path on this machine only (localhost): installs Debian's Slurm and
# MUNGE when missing (scripts/setup), starts munged, slurmctld and slurmd with a one-node
# configuration in a temporary folder, submits the CPU demo (experiments/configs/demo.toml) as a
# 3-task array plus the merge job (submit.sh, no GPU gres), waits, and checks that the merged rows
# are the rows of an unsharded run of the same config (same inputs, designs, options, paths, checks
# and errors; timings may differ). Stops every daemon it started, also on failure.
#
#   experiments/slurm/test-local-slurm.sh [CANOPY_BINARY]     (as root; default build/full/experiments/canopy)
# Exit 0: pass. Exit 1: the merged rows differ or a job failed. Exit 2: cannot run here.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$repo/build/full/experiments/canopy}
[ -x "$bin" ] || { echo "test-local-slurm: canopy binary '$bin' not found (build first: scripts/build)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "test-local-slurm: needs root (starts munged, slurmctld, slurmd)" >&2; exit 2; }
"$repo/scripts/setup" slurmctld slurmd slurm-client munge

work=$(mktemp -d /tmp/canopy-slurm.XXXXXX)
chmod 755 "$work"  # munged runs as the munge user
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/munge/munged.pid" ] && kill "$(cat "$work/munge/munged.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

# MUNGE: a running munged is used as it is; otherwise one is started here (and stopped at the end).
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p "$work/munge" /run/munge
  chown munge:munge "$work/munge" /run/munge
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key && chown munge:munge /etc/munge/munge.key; }
  runuser -u munge -- /usr/sbin/munged --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" \
    --seed-file="$work/munge/munged.seed"
  for _ in $(seq 50); do [ -s "$work/munge/munged.pid" ] && munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n </dev/null | unmunge >/dev/null || { echo "test-local-slurm: munged did not start" >&2; exit 2; }

# One node: this host, all its CPUs, a root-run controller with state in the work folder.
node=$(hostname -s)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=canopy-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$node CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=canopy Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$work/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o %t | grep -q idle || { echo "test-local-slurm: the node did not come up" >&2; tail "$work"/slurm*.log >&2; exit 2; }
echo "test-local-slurm: slurm up ($(sinfo -h -o '%P %D nodes %c CPUs %t'))"

config=$repo/experiments/configs/demo.toml
"$bin" run "$config" --out "$work/unsharded" --quiet > "$work/unsharded.log"
CANOPY_BIN=$bin CANOPY_GRES="" "$repo/experiments/slurm/submit.sh" "$config" "$work/sweep" 3 | tee "$work/submit.log"
merge_job=$(sed -n 's/.*merge job \([0-9]*\).*/\1/p' "$work/submit.log")
for _ in $(seq 600); do
  [ -z "$(squeue -h 2>/dev/null)" ] && break
  sleep 0.5
done
state=$(scontrol show job "$merge_job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
if [ ! -s "$work/sweep/merged/results.json" ]; then
  echo "test-local-slurm: FAILED: no merged results (merge job $merge_job: ${state:-gone})" >&2
  tail -n 5 "$work"/sweep/*.log >&2 || true
  exit 1
fi
python3 "$repo/experiments/tools/same_rows.py" "$work/unsharded/results.json" "$work/sweep/merged/results.json" |
  sed 's/^same_rows:/test-local-slurm: PASSED:/' || { echo "test-local-slurm: FAILED: the merged rows differ" >&2; exit 1; }
