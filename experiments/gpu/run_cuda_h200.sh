#!/usr/bin/env bash
# Checks and measurements of the CUDA designs on a GPU machine, from binaries built on another
# machine (docs/design.md §6): experiments/gpu/run_cuda_h200.sh checks|measure|fp8 <bin-dir> <lib-dir> <out-dir>
#   checks : GPU test suite; compute-sanitizer memcheck and racecheck over every case of the suite
#            (sanitizer.md: one row per case, with seconds) and the racecheck reproducer; SASS summary
#   measure: `canopy peaks` (ceilings, mma.sync per feed over warps per SM), then `canopy run` of
#            experiments/configs/{cuda-kernels,cuda-masks,workspace,nsplit}.toml (one folder each
#            under <out-dir>) and the PyTorch reference, joined into table.md; FlashMLA's dense
#            kernel (CANOPY_FLASHMLA, default <bin-dir>/flashmla_peer) where it was built
#   compare: kernel variants side by side: compare <bin-dir> <lib-dir> <out-dir> base v1 [v2 ...]
#            runs `<bin-dir>/canopy_<name> run CONFIG` (CANOPY_COMPARE_CONFIG, default
#            experiments/configs/cuda-compare.toml) for each name, interleaved, in
#            CANOPY_COMPARE_ROUNDS rounds (default 2), and writes compare.md from the runs'
#            results.json (experiments/gpu/compare_builds.py): per (design, shape) the base's best
#            median and each variant's change against it, then per variant the mean change over
#            the P >= 16K shapes and its rows that failed; compare.json holds the same rows with
#            their fields (design, B, H, T, P, options), for readers that must not parse labels.
#            Beside it sass.md: per build, its kernels' SASS counts (experiments/gpu/sass_counts.sh).
#   fp8    : the FP8 acceptance run (docs/design.md §8): the suite's FP8 cases (fp8-tests.log), then
#            experiments/configs/fp8-mma.toml (cuda-sm90 on bf16 and on fp8-e4m3 in dequant and
#            fp8-mma numerics, one run: fp8-mma/) and fp8.toml with the PyTorch peer (fp8/,
#            fp8-torch.jsonl, merged into fp8-all/ and fp8-table.md), each plotted where matplotlib
#            is installed (plot.py's *_kv_dtype.md tables; else run plot.py on the fetched results).
# <bin-dir> holds canopy, canopy_Test_VerifyAttentionCuda and canopy_RacecheckNamedBarrier, <lib-dir>
# the shared libraries the GPU machine lacks (e.g. libtrilinos_kokkoscore, libtomlplusplus). Numbers
# from an H200 are an sm_90 proxy for the sm_120 design target.
set -uo pipefail
mode=$1 bin=$2 lib=$3 out=$4
shift 4
mkdir -p "$out"
cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$lib:${cublas:+$(dirname "$cublas"):}${LD_LIBRARY_PATH:-}"
test_bin=$bin/canopy_Test_VerifyAttentionCuda
canopy_bin=$bin/canopy
here=$(cd "$(dirname "$0")/../.." && pwd)
configs=$here/experiments/configs

source "$here/experiments/gpu/sass_counts.sh"

if [ "$mode" = checks ]; then
  export LC_ALL=C  # one collation for sort and join
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; echo; } > "$out/run.log"
  timeout 180 "$test_bin" > "$out/tests.log" 2>&1
  echo "tests exit $?" | tee -a "$out/run.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/tests.log" | tee -a "$out/run.log"
  # Every case of the GPU suite (grid, graph and big-tree cases of all designs and layouts, and the
  # runtime cases). memcheck: one process per case. racecheck: one process per case, and for the
  # big trees one per case and kernel family (--kernel-name; "others" is every other kernel),
  # because one process on a 1024-node case ran past 480 s and its family parts take 20-420 s. CANOPY_SANITIZER_JOBS processes run side
  # by side (default 12, the GPU machine has 16 cores; no more than one per 24 GiB of GPU memory, see
  # sanitizer_jobs), each under CANOPY_SANITIZER_TIMEOUT seconds
  # (default 500); CANOPY_SANITIZER_CASES (an extended regex, default all) picks a subset and
  # CANOPY_SANITIZER_EXCLUDE (an extended regex, default none) drops cases from it, so that a sweep
  # longer than one call splits into calls with disjoint cases;
  # CANOPY_SANITIZER_BUDGET (seconds, optional) bounds the whole sweep: parts still running then
  # are cut, parts not started are listed as such, and the tables are written either way.
  source "$here/experiments/gpu/sanitize_case.sh"
  sanitizer_deadline
  gtest_cases "$test_bin" | grep -E "${CANOPY_SANITIZER_CASES:-.}" |
    { if [ -n "${CANOPY_SANITIZER_EXCLUDE:-}" ]; then grep -vE "$CANOPY_SANITIZER_EXCLUDE"; else cat; fi; } > "$out/cases.txt"
  export test_bin out here
  export families="sm120Kernel sm120WideKernel sm90Kernel sm90SyncKernel sm90PairKernel sm90Fp8MmaKernel flatKernel combineKernel"
  sanitize() {  # tool case [family]: one line, "case | family | summary | exit | seconds"
    source "$here/experiments/gpu/sanitize_case.sh"
    local tool=$1 c=$2 fam=${3:-all} filter=()
    if [ "$fam" = others ]; then
      for f in $families; do filter+=(--kernel-name-exclude "kns=$f"); done
    elif [ "$fam" != all ]; then
      filter=(--kernel-name "kns=$fam")
    fi
    printf '%s | %s | %s\n' "$c" "$fam" "$(sanitize_case "$tool" "${CANOPY_SANITIZER_TIMEOUT:-500}" \
      "$out/$tool-reports.log" "$test_bin" "$c" "${filter[@]}")"
  }
  export -f sanitize
  mapfile -t cases < "$out/cases.txt"
  # memcheck first (seconds per case), then racecheck, its longest parts (the big trees) first. Only
  # the cases matching CANOPY_SANITIZER_SPLIT are split by kernel family: every part repeats the
  # case's host work (inputs, fp64 reference), and splitting all 50 cases into 7 parts each left 303
  # of 350 parts unstarted in a 450 s sweep. The default splits the cases whose racecheck takes
  # longest whole: the big trees (690-1,470 s of process time over their parts),
  # repeatedRunsAreBitIdentical (1,670 s) and the grid's LongP (980 s); whole, the last two were
  # still running when a 430 s sweep of the other cases ended (docs/results/cuda-sanitizer.md).
  split=${CANOPY_SANITIZER_SPLIT:-^BigTrees/|repeatedRunsAreBitIdentical|/LongP\$}
  # CANOPY_SANITIZER_FAMILIES (kernel families, space-separated; default none) narrows racecheck to
  # those families, one part per case and family, for a change that touches only their kernels
  # (memcheck still runs every case whole): the sm90 families alone took 250 s of one call.
  { sed 's/^/memcheck /' "$out/cases.txt"
    if [ -n "${CANOPY_SANITIZER_FAMILIES:-}" ]; then
      for f in $CANOPY_SANITIZER_FAMILIES; do sed "s/^/racecheck /; s/\$/ $f/" "$out/cases.txt"; done
    else
      for c in $(grep -E "$split" "$out/cases.txt"); do
        for f in $families others; do echo "racecheck $c $f"; done
      done
      grep -vE "$split" "$out/cases.txt" | sed 's/^/racecheck /'
    fi; } |
    xargs -P "$(sanitizer_jobs 12 24)" -L 1 bash -c 'sanitize "$0" "$1" "$2" >> "$out/$0-parts.txt"'
  cut -d'|' -f1,3- "$out/memcheck-parts.txt" | sed 's/  */ /g' | sort > "$out/memcheck.txt"
  # One racecheck row per case: the parts' hazards added up, the worst exit, the seconds added up.
  sort "$out/racecheck-parts.txt" | awk -F' [|] ' '
    function flush() { if (c == "") return
      s = cut != "" ? "cut: " cut : host == n ? "host-only, no CUDA call" : \
          sprintf("RACECHECK SUMMARY: %d hazards displayed (%d errors, %d warnings) in %d kernel filters", hz, er, wa, n)
      printf "%s | %s | %d | %d\n", c, s, rc, sec }
    $1 != c { flush(); c = $1; n = hz = er = wa = rc = sec = host = 0; cut = "" }
    { n++; sec += $5; if ($4 + 0 > rc) rc = $4 + 0
      if ($3 ~ /^host-only/) host++
      else if (match($3, /[0-9]+ hazards displayed \([0-9]+ errors, [0-9]+ warnings\)/)) {
        split(substr($3, RSTART, RLENGTH), v, /[^0-9]+/); hz += v[1]; er += v[2]; wa += v[3] }
      else cut = cut (cut == "" ? "" : ", ") $2 ($4 == "-" ? " (not started)" : " (exit " $4 ")") }
    END { flush() }' > "$out/racecheck.txt"
  # The racecheck false positive that the tile kernels' idle row groups avoid (reproducer).
  for m in balanced unbalanced; do
    log=$(compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/canopy_RacecheckNamedBarrier" $m 2>&1)
    rc=$?
    printf 'reproducer %s | %s; %s | exit %s\n' "$m" "$(grep -E "outputs wrong" <<<"$log")" "$(grep -E "RACECHECK SUMMARY" <<<"$log" | sed 's/^========= //')" "$rc"
  done > "$out/reproducer.txt"
  {
    echo "| case | memcheck | racecheck |"
    echo "|---|---|---|"
    join -t '|' <(sed 's/ | /|/g' "$out/memcheck.txt") <(sed 's/ | /|/g' "$out/racecheck.txt") |
      awk -F'|' '{printf "| %s | %s (exit %s, %s s) | %s (exit %s, %s s) |\n", $1, $2, $3, $4, $5, $6, $7}'
    echo
    sed 's/^/    /' "$out/reproducer.txt"
  } > "$out/sanitizer.md"
  # A row is unfinished when a part was cut or not started (budget); its exit may still be 0.
  printf 'sanitizers: %d cases; memcheck rows %d, non-zero exits (host-only cases aside): %d, unfinished: %d; racecheck rows %d, non-zero exits: %d, unfinished: %d\n' "${#cases[@]}" \
    "$(wc -l < "$out/memcheck.txt")" "$(awk -F' [|] ' '$3 != 0 && $2 !~ /^host-only/' "$out/memcheck.txt" | wc -l)" \
    "$(grep -cE '\| (none \(cut\)|not started)' "$out/memcheck.txt")" \
    "$(wc -l < "$out/racecheck.txt")" "$(awk -F' [|] ' '$3 != 0 && $2 !~ /^host-only/' "$out/racecheck.txt" | wc -l)" \
    "$(grep -cE '\| cut: ' "$out/racecheck.txt")" | tee -a "$out/run.log"
  cat "$out/reproducer.txt" | tee -a "$out/run.log"
  for arch in sm_90 sm_120; do
    echo "== SASS $arch: instruction counts per kernel" >> "$out/run.log"
    sass_counts "$canopy_bin" "$arch" >> "$out/run.log"
  done
elif [ "$mode" = measure ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; echo; } > "$out/run.log"
  timeout 120 "$canopy_bin" peaks --out "$out/peaks.json" > "$out/peaks.md" 2>&1; echo "peaks exit $?" >> "$out/run.log"
  for cfg in cuda-kernels cuda-masks workspace nsplit; do
    timeout 600 "$canopy_bin" run "$configs/$cfg.toml" --out "$out/$cfg" --quiet >> "$out/run.log" 2>&1
    echo "$cfg exit $?" >> "$out/run.log"
  done
  PYTHONUNBUFFERED=1 timeout 240 python3 "$here/experiments/peers/torch_reference.py" --out "$out/torch.jsonl" >> "$out/run.log" 2>&1; echo "torch exit $?" >> "$out/run.log"
  python3 "$here/experiments/peers/torch_reference.py" --merge "$out/cuda-kernels/results.json" "$out/torch.jsonl" > "$out/table.md" 2>&1
  # FlashMLA's dense Hopper kernel on the prefix part (optional: scripts/build-flashmla builds it).
  flashmla=${CANOPY_FLASHMLA:-$bin/flashmla_peer}
  if [ -x "$flashmla" ]; then
    timeout 120 "$flashmla" --out "$out/flashmla.jsonl" >> "$out/run.log" 2>&1; echo "flashmla exit $?" >> "$out/run.log"
  else
    echo "flashmla: skipped (no $flashmla; scripts/build-flashmla builds it)" >> "$out/run.log"
  fi
  grep -E "exit" "$out/run.log"; cat "$out/peaks.md" "$out/table.md"
elif [ "$mode" = compare ] && [ $# -ge 2 ]; then
  config=${CANOPY_COMPARE_CONFIG:-$configs/cuda-compare.toml}
  # compare.md is rewritten after every run (runs still to come count as missing), so a call that
  # ends early keeps the table of the runs it finished.
  for r in $(seq "${CANOPY_COMPARE_ROUNDS:-2}"); do
    for v in "$@"; do
      timeout 600 "$bin/canopy_$v" run "$config" --out "$out/$v-round$r" --quiet > "$out/$v-round$r.log" 2>&1
      echo "round $r $v exit $?"
      python3 "$here/experiments/gpu/compare_builds.py" --json "$out/compare.json" "$out" "${CANOPY_COMPARE_ROUNDS:-2}" "$@" \
        > "$out/compare.md"
    done
  done | tee "$out/compare.log"
  cat "$out/compare.md"
  # What each build's kernels compiled to, beside their times (CANOPY_COMPARE_ARCH, default sm_90).
  for v in "$@"; do
    printf '\n## %s\n\n' "$v"
    sass_counts "$bin/canopy_$v" "${CANOPY_COMPARE_ARCH:-sm_90}"
  done > "$out/sass.md"
elif [ "$mode" = fp8 ]; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; echo; } > "$out/run.log"
  timeout 240 "$test_bin" --gtest_filter='*Fp8*' > "$out/fp8-tests.log" 2>&1
  echo "fp8 tests exit $?" | tee -a "$out/run.log"
  grep -E "^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ tests?|^\[  FAILED  \] [A-Z]" "$out/fp8-tests.log" | tee -a "$out/run.log"
  for cfg in fp8-mma fp8; do
    timeout 420 "$canopy_bin" run "$configs/$cfg.toml" --out "$out/$cfg" --quiet >> "$out/run.log" 2>&1
    echo "$cfg exit $?" | tee -a "$out/run.log"
  done
  PYTHONUNBUFFERED=1 timeout 240 python3 "$here/experiments/peers/torch_reference.py" --config "$configs/fp8.toml" \
    --out "$out/fp8-torch.jsonl" >> "$out/run.log" 2>&1
  echo "torch exit $?" | tee -a "$out/run.log"
  python3 "$here/experiments/peers/peer_merge.py" "$out/fp8/results.json" "$out/fp8-torch.jsonl" \
    --results-out "$out/fp8-all/results.json" > "$out/fp8-table.md" 2>> "$out/run.log"
  echo "peer_merge exit $?" | tee -a "$out/run.log"
  for r in "$out/fp8-mma/results.json" "$out/fp8-all/results.json"; do
    python3 "$here/experiments/plot.py" "$r" >> "$out/run.log" 2>&1 || echo "plot.py $r: not drawn here" | tee -a "$out/run.log"
  done
  cat "$out/fp8-mma"/*_kv_dtype.md "$out/fp8-table.md" 2>/dev/null
else
  echo "usage: $0 checks|measure|fp8 <bin-dir> <lib-dir> <out-dir> | compare <bin-dir> <lib-dir> <out-dir> base variant..." >&2
  exit 2
fi
