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
# its reports, each with the 4 after it (a gtest failure's own message), to <reports-file>, a failed
# test's assertion among them (a test can fail under a tool that reports nothing).
# CANOPY_SANITIZER_DEADLINE (epoch seconds, optional; see sanitizer_deadline) ends every run by
# then, so a sweep inside a time-limited job still finishes its tables.
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
    "$(grep -E -A4 "Error|hazard|Race reported|Read|Write|FAILED|Failure|exception" <<<"$log" | head -40)" >> "$reports"
}
#   sanitizer_jobs <default> <GiB per process>: how many sanitizer processes run side by side:
# CANOPY_SANITIZER_JOBS when set, else <default> but no more than the GPU's memory holds at <GiB per
# process> each (at least 1; <default> when nvidia-smi is missing or fails). racecheck held 12-22 GiB per
# process of the Kokkos edge-case tests on the H200: 12 sanitizer processes and the two Kokkos suites
# side by side filled its 141 GiB, and four racecheck runs failed their fp64 checks on all-zero
# outputs (a kernel that never launched) with no hazard reported (docs/results/kokkos4.md,
# "compute-sanitizer on Cuda").
sanitizer_jobs() {
  local jobs=${CANOPY_SANITIZER_JOBS:-$1} mib
  if [ -z "${CANOPY_SANITIZER_JOBS:-}" ]; then
    mib=$({ nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -dc 0-9; } 2>/dev/null)
    if [ -n "$mib" ]; then
      local fit=$((mib / 1024 / $2))
      [ "$fit" -lt 1 ] && fit=1
      [ "$fit" -lt "$jobs" ] && jobs=$fit
    fi
  fi
  echo "$jobs"
}
#   sanitizer_deadline: exports CANOPY_SANITIZER_DEADLINE = now + CANOPY_SANITIZER_BUDGET seconds
# when that budget is set (the whole sweep's time, leaving the caller time to write its tables).
sanitizer_deadline() {
  [ -n "${CANOPY_SANITIZER_BUDGET:-}" ] && export CANOPY_SANITIZER_DEADLINE=$(($(date +%s) + CANOPY_SANITIZER_BUDGET))
  return 0
}
