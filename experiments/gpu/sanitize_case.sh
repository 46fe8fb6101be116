# Sourced by run_cuda_h200.sh and run_kokkos_h200.sh: the cases of a gtest binary, and one
# compute-sanitizer run of one case.
#   gtest_cases <test-binary>: one "Suite.case" per line
gtest_cases() {
  "$1" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}'
}
#   sanitize_case <tool> <timeout-s> <reports-file> <test-binary> <gtest-filter> [sanitizer args...]
# prints "summary | exit | seconds". The summary is the tool's SUMMARY line, "host-only, no CUDA
# call" for a case that makes no CUDA call (the tool has nothing to instrument), or "none (cut)".
# A non-zero exit appends the case and its first 20 report lines to <reports-file>.
sanitize_case() {
  local tool=$1 limit=$2 reports=$3 bin=$4 filter=$5 t0=$SECONDS log rc summary
  shift 5
  log=$(timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" "$bin" --gtest_filter="$filter" 2>&1)
  rc=$?
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" <<<"$log" | sed 's/^========= //')
  grep -q "terminated before first instrumented API call" <<<"$log" && summary="host-only, no CUDA call"
  printf '%s | %s | %s\n' "${summary:-none (cut)}" "$rc" "$((SECONDS - t0))"
  # One write per case, so that the reports of processes side by side do not interleave.
  [ "$rc" -eq 0 ] || printf '== %s %s\n%s\n' "$filter" "$*" \
    "$(grep -E "Error|hazard|Race reported|Read|Write|FAILED" <<<"$log" | head -20)" >> "$reports"
}
