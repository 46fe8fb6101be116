# Sourced by run_cuda_h200.sh and run_kokkos_h200.sh: the cases of a gtest binary, and one
# compute-sanitizer run of one case.
#   gtest_cases <test-binary> [suite-regex]: one "Suite.case" per line; with suite-regex, only the
#   cases of suites whose listing line matches it (e.g. a typed suite's "TypeParam = Kokkos::Cuda")
gtest_cases() {
  "$1" --gtest_list_tests | awk -v want="${2:-}" '/^[^ ]/{s=$1; on = $0 ~ want} /^  / && on {print s $1}'
}
#   sanitize_case <tool> <timeout-s> <reports-file> <test-binary> <gtest-filter> [sanitizer args...]
# prints "summary | exit | seconds". The summary is the tool's SUMMARY line, "host-only, no CUDA
# call" for a case that makes no CUDA call (the tool has nothing to instrument), "none (cut)", or
# "not started (deadline)" (exit "-"). A non-zero exit appends the case and the first 40 lines of
# its reports, each with the 3 after it, to <reports-file>, a failed test's assertion among them (a
# test can fail under a tool that reports nothing). CANOPY_SANITIZER_DEADLINE (epoch seconds, optional; see
# sanitizer_deadline) ends every run by then, so a sweep inside a time-limited job still finishes
# its tables.
sanitize_case() {
  local tool=$1 limit=$2 reports=$3 bin=$4 filter=$5 t0=$SECONDS log rc summary
  shift 5
  if [ -n "${CANOPY_SANITIZER_DEADLINE:-}" ]; then
    local left=$((CANOPY_SANITIZER_DEADLINE - $(date +%s)))
    if [ "$left" -lt 5 ]; then
      printf 'not started (deadline) | - | 0\n'
      return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  log=$(timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" "$bin" --gtest_filter="$filter" 2>&1)
  rc=$?
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" <<<"$log" | sed 's/^========= //')
  grep -q "terminated before first instrumented API call" <<<"$log" && summary="host-only, no CUDA call"
  printf '%s | %s | %s\n' "${summary:-none (cut)}" "$rc" "$((SECONDS - t0))"
  # One write per case, so that the reports of processes side by side do not interleave.
  [ "$rc" -eq 0 ] || printf '== %s %s\n%s\n' "$filter" "$*" \
    "$(grep -E -A3 "Error|hazard|Race reported|Read|Write|FAILED|Failure|exception" <<<"$log" | head -40)" >> "$reports"
}
#   sanitizer_deadline: exports CANOPY_SANITIZER_DEADLINE = now + CANOPY_SANITIZER_BUDGET seconds
# when that budget is set (the whole sweep's time, leaving the caller time to write its tables).
sanitizer_deadline() {
  [ -n "${CANOPY_SANITIZER_BUDGET:-}" ] && export CANOPY_SANITIZER_DEADLINE=$(($(date +%s) + CANOPY_SANITIZER_BUDGET))
  return 0
}
