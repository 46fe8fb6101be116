#!/bin/sh
# Hostile inputs at the command line, each answered with exit 2 naming the input (or the right result),
# never a hang, a crash or a bare bad_alloc:
# - special files where a regular file is read (FIFO, device, a link to one, a folder);
# - shapes whose memory this machine lacks, refused with the shape and the bytes before any work;
# - edited shards, repeated or empty list items, integers past 64 bits or empty;
# - output paths checked before the work (`D/.`, a symlink, a missing --summary folder);
# - messages that name what was given (an unknown command, whole numbers as integers).
# Usage: cli_hostile.sh CANOPY_BINARY SOURCE_DIR WORK_DIR
set -u
canopy="$1"
src="$2"
config="$src/tests/experiments/tiny_run.toml"
work="$3"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
. "$src/tests/experiments/expect.sh"
bounded() { code="$1"; needle="$2"; shift 2; expect "$code" "$needle" timeout 20 "$@"; }

# ---- reads with a bound: regular files only
mkfifo fifo.toml
bounded 2 "config: 'fifo.toml' is a FIFO" "$canopy" run fifo.toml --out o1
bounded 2 "config: '/dev/urandom' is a character device" "$canopy" run /dev/urandom --out o2
ln -s /dev/zero zero.toml
bounded 2 "config: 'zero.toml' is a character device" "$canopy" run zero.toml --out o3
mkdir dir.toml
bounded 2 "config: 'dir.toml' is a folder" "$canopy" run dir.toml --out o4
"$canopy" run "$config" --quiet --shard 0/2 --out s0 > /dev/null 2>&1
"$canopy" run "$config" --quiet --shard 1/2 --out s1 > /dev/null 2>&1
cp -r s1 s1fifo && rm s1fifo/results.json && mkfifo s1fifo/results.json
bounded 2 "shard results: 's1fifo/results.json' is a FIFO" "$canopy" merge s0 s1fifo --out m1
cp -r s1 s1zero && rm s1zero/results.json && ln -s /dev/zero s1zero/results.json
bounded 2 "shard results: 's1zero/results.json' is a character device" "$canopy" merge s0 s1zero --out m2

# ---- sizes checked before allocation
expect 2 "B=64 H=128 T=1024 P=1048576 needs about" "$canopy" check --batch 64 --heads 128 --tree 1024 --prefix 1048576
grep -q "bytes of host memory\|bytes (.* GiB) of host memory" err.log || { echo "FAILED: no size in the refusal" >&2; failures=$((failures + 1)); }
{ echo '[[inputs.sweep]]'; echo 'batch = [1, 4096]'; echo 'heads = [128]'; echo 'tree = [1024]'; echo 'prefix = [16777216]'
  echo '[designs]'; echo 'names = ["reference"]'; } > huge.toml
expect 2 "inputs.sweep[0]: B=4096 H=128 T=1024 P=16777216 needs about" "$canopy" run huge.toml --out o5

# ---- merged rows identified by what they are
cp -r s1 s1edit
python3 - s1edit/results.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["rows"][0]["mask"] = "parents" if j["rows"][0]["mask"] == "tree" else "tree"
open(sys.argv[1], "w").write(json.dumps(j))
PY
expect 2 "s1edit: its rows are not the ones the run wrote" "$canopy" merge s0 s1edit --out m3
expect 0 "" "$canopy" merge s0 s1 --out m4

# ---- integers and lists as given
expect 2 "--seed: '18446744073709551616' does not fit" "$canopy" check --seed 18446744073709551616
expect 2 "--nsplit: is empty" "$canopy" check --nsplit ''
expect 2 "--tree: must be written without leading zeros" "$canopy" check --tree 010
expect 2 "--designs[1]: 'reference' is listed twice" "$canopy" check --designs reference,reference
expect 2 "--designs[1]: empty name" "$canopy" check --designs reference,
expect 2 "--designs[0]: 'all' stands alone" "$canopy" check --designs all,reference

# ---- work not lost at the last step
expect 0 "" "$canopy" run "$config" --quiet --out D/.
[ -f D/results.json ] || { echo "FAILED: --out D/. wrote no D/results.json" >&2; failures=$((failures + 1)); }
expect 0 "" "$canopy" merge s0 s1 --out M/.
[ -f M/results.json ] || { echo "FAILED: merge --out M/. wrote no M/results.json" >&2; failures=$((failures + 1)); }
mkdir target && ln -s target link
expect 0 "" "$canopy" run "$config" --quiet --out link
{ [ -L link ] && [ -f target/results.json ]; } || { echo "FAILED: --out link replaced the link" >&2; failures=$((failures + 1)); }
if "$canopy" trace --help > /dev/null 2>&1; then
  synth() { code="$1"; needle="$2"; shift 2; expect "$code" "$needle" "$canopy" trace synth --steps 2 --concurrency 2 --budget 4 --prompt 16 --output 8 --num-slots 512 -q "$@"; }
  synth 2 "--summary: folder 'nodir' of 'nodir/s.json' does not exist" --out t.h5 --summary nodir/s.json
  [ -e t.h5 ] && { echo "FAILED: the trace was written before --summary was refused" >&2; failures=$((failures + 1)); }
  synth 2 "--out: folder 'nodir' of 'nodir/t.h5' does not exist" --out nodir/t.h5
  expect 2 "arrivals.rate: 1e+308 is outside [1e-06, 1000000]" "$canopy" trace synth --rate 1e308 --steps 2 --out u.h5
fi

# ---- messages
expect 2 "unknown command 'frob'" "$canopy" frob
[ "$failures" -eq 0 ] || { echo "$failures case(s) failed" >&2; exit 1; }
echo "all hostile cases refused by name"
