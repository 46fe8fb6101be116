#!/usr/bin/env bash
# Checks and measurements of the CUDA designs on a GPU machine, from binaries built on another
# machine (docs/design.md §6): experiments/gpu/run_cuda_h200.sh checks|measure <bin-dir> <lib-dir> <out-dir>
#   checks : GPU test suite; compute-sanitizer memcheck and racecheck over every grid and graph case
#            (sanitizer.md: one row per case) and the racecheck reproducer; SASS summary
#   measure: benchVerifyCuda sweep (designs, mask layouts, workspace strategies) + PyTorch reference
#   compare: kernel variants side by side: compare <bin-dir> <lib-dir> <out-dir> base v1 [v2 ...]
#            runs <bin-dir>/bench_<name> (designs in CANOPY_COMPARE_DESIGNS, default cuda-sm120) for each name, interleaved, in
#            CANOPY_COMPARE_ROUNDS rounds (default 2; extra bench flags in CANOPY_BENCH_ARGS), and
#            writes compare.md: per shape the base's best median and each variant's change against it
#            (best of the rounds: process-to-process spread on the H200 was about 1%), then per
#            variant the mean change over the P >= 16K shapes and its result lines with bad outputs.
# <bin-dir> holds canopy_Test_VerifyAttentionCuda and canopy_Bench_VerifyCuda, <lib-dir> the
# shared libraries the GPU machine lacks (libtrilinos_kokkoscore). Numbers from an H200 are an
# sm_90 proxy for the sm_120 design target.
set -uo pipefail
mode=$1 bin=$2 lib=$3 out=$4
shift 4
mkdir -p "$out"
cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}"
test_bin=$bin/canopy_Test_VerifyAttentionCuda
bench_bin=$bin/canopy_Bench_VerifyCuda
here=$(cd "$(dirname "$0")/../.." && pwd)

if [ "$mode" = checks ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; echo; } > "$out/run.log"
  timeout 180 "$test_bin" > "$out/tests.log" 2>&1
  echo "tests exit $?" | tee -a "$out/run.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/tests.log" | tee -a "$out/run.log"
  # Every grid and graph case of the GPU suite (all designs, all layouts), one sanitizer run per
  # case and tool; memcheck and racecheck run side by side (two processes on the GPU).
  "$test_bin" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}' | grep -E "^(Shapes|Strategies)/" > "$out/cases.txt"
  sanitize() {  # tool case...: one line per case, "case | summary | exit"
    local tool=$1; shift
    for c in "$@"; do
      local log; log=$(timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$test_bin" --gtest_filter="$c" 2>&1)
      local rc=$?
      printf '%s | %s | %s\n' "$c" "$(grep -E "(ERROR|RACECHECK) SUMMARY" <<<"$log" | sed 's/^========= //')" "$rc"
      [ "$rc" -eq 0 ] || grep -E "Error|hazard|Read|Write" <<<"$log" | head -20 >> "$out/$tool-reports.log"
    done
  }
  mapfile -t cases < "$out/cases.txt"
  sanitize memcheck "${cases[@]}" > "$out/memcheck.txt" &
  sanitize racecheck "${cases[@]}" > "$out/racecheck.txt"
  wait
  # The racecheck false positive that the tile kernels' idle row groups avoid (reproducer).
  for m in balanced unbalanced; do
    log=$(compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/canopy_RacecheckNamedBarrier" $m 2>&1)
    rc=$?
    printf 'reproducer %s | %s; %s | exit %s\n' "$m" "$(grep -E "outputs wrong" <<<"$log")" "$(grep -E "RACECHECK SUMMARY" <<<"$log" | sed 's/^========= //')" "$rc"
  done > "$out/reproducer.txt"
  {
    echo "| case | memcheck | racecheck |"
    echo "|---|---|---|"
    join -t '|' <(sed 's/ | /|/g' "$out/memcheck.txt" | sort) <(sed 's/ | /|/g' "$out/racecheck.txt" | sort) |
      awk -F'|' '{printf "| %s | %s (exit %s) | %s (exit %s) |\n", $1, $2, $3, $4, $5}'
    echo
    sed 's/^/    /' "$out/reproducer.txt"
  } > "$out/sanitizer.md"
  printf 'sanitizers: %d cases; memcheck non-zero exits: %d; racecheck non-zero exits: %d\n' "${#cases[@]}" \
    "$(awk -F' [|] ' '$3 != 0' "$out/memcheck.txt" | wc -l)" "$(awk -F' [|] ' '$3 != 0' "$out/racecheck.txt" | wc -l)" | tee -a "$out/run.log"
  cat "$out/reproducer.txt" | tee -a "$out/run.log"
  for arch in sm_90 sm_120; do
    echo "== SASS $arch: instruction counts per kernel" >> "$out/run.log"
    cuobjdump -sass -arch "$arch" "$bench_bin" 2>/dev/null | awk '/Function :/{f=$3; n[f]=0} /HMMA/{h[f]++} /LDSM/{l[f]++} /LDGSTS/{g[f]++} /LDL/{ll[f]++} /STL/{s[f]++} /HGMMA|UTMALDG/{w[f]++} END{for (k in n) printf "%-90s HMMA=%d LDSM=%d LDGSTS=%d LDL=%d STL=%d wgmma/tma=%d\n", k, h[k], l[k], g[k], ll[k], s[k], w[k]}' >> "$out/run.log"
  done
elif [ "$mode" = measure ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; echo; } > "$out/run.log"
  timeout 300 "$bench_bin" --out "$out/bench.jsonl" >> "$out/run.log" 2>&1; echo "bench exit $?" >> "$out/run.log"
  timeout 120 "$bench_bin" --designs cuda-sm120 --masks tree,parents --out "$out/masks.jsonl" >> "$out/run.log" 2>&1; echo "masks exit $?" >> "$out/run.log"
  timeout 90 "$bench_bin" --designs cuda-sm120 --workspaces per-call,grow --batches 1,8 --trees 33 --prefixes 4096,65536 --out "$out/ws.jsonl" >> "$out/run.log" 2>&1; echo "workspaces exit $?" >> "$out/run.log"
  cat "$out/ws.jsonl" >> "$out/masks.jsonl" 2>/dev/null; rm -f "$out/ws.jsonl"
  PYTHONUNBUFFERED=1 timeout 240 python3 "$here/experiments/peers/torch_reference.py" --out "$out/torch.jsonl" >> "$out/run.log" 2>&1; echo "torch exit $?" >> "$out/run.log"
  python3 "$here/experiments/peers/torch_reference.py" --merge "$out/bench.jsonl" "$out/torch.jsonl" > "$out/table.md" 2>&1
  grep -E "exit|peaks|device" "$out/run.log"; cat "$out/table.md"
elif [ "$mode" = compare ] && [ $# -ge 2 ]; then
  for r in $(seq "${CANOPY_COMPARE_ROUNDS:-2}"); do
    for v in "$@"; do
      echo "== round $r $v"
      # shellcheck disable=SC2086
      timeout 240 "$bin/bench_$v" --designs "${CANOPY_COMPARE_DESIGNS:-cuda-sm120}" ${CANOPY_BENCH_ARGS:-} 2>&1 | grep "B="
    done
  done > "$out/compare.txt"
  python3 - "$out/compare.txt" "$@" > "$out/compare.md" <<'PY'
import collections, re, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
bad = collections.Counter()  # result lines with NaN or unwritten outputs, per variant
variant = None
for line in open(sys.argv[1]):
    m = re.match(r'== round \d+ (\S+)', line)
    if m:
        variant = m.group(1)
        continue
    m = re.search(r'^\| (\S+) .*B=(\d+) T=\s*(\d+) P=\s*(\d+) ns=\s*(\d+) \|\s+([\d.]+) us', line)
    if m:
        rows[m.groups()[:5]][variant].append(float(m.group(6)))
        b = re.search(r'bad (\d+)', line)
        if b and int(b.group(1)):
            bad[variant] += 1
base, others = sys.argv[2], sys.argv[3:]
print('| design | B | T | P | nsplit | %s µs (best median) | %s |' % (base, ' | '.join(others)))
print('|---|---:|---:|---:|---:|---:|' + '---:|' * len(others))
for key, v in rows.items():
    if not v.get(base):
        continue
    b = min(v[base])
    rel = ['%+.1f%%' % (100 * (min(v[o]) / b - 1)) if v.get(o) else 'n/a' for o in others]
    print('| %s | %s | %s | %s | %s | %.1f | %s |' % (*key, b, ' | '.join(rel)))
# One line per variant: the mean change where P >= 16K (the targets' range), and bad result lines.
for o in others:
    ch = [min(v[o]) / min(v[base]) - 1 for k, v in rows.items() if int(k[3]) >= 16384 and v.get(o) and v.get(base)]
    if ch:
        print('\n%s: mean %+.1f%% over %d shapes with P >= 16K; %d result lines with bad outputs'
              % (o, 100 * sum(ch) / len(ch), len(ch), bad[o]))
PY
  cat "$out/compare.md"
else
  echo "usage: $0 checks|measure <bin-dir> <lib-dir> <out-dir> | compare <bin-dir> <lib-dir> <out-dir> base variant..." >&2
  exit 2
fi
