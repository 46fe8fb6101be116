#!/usr/bin/env bash
# The Kokkos 4 builds on a GPU machine, from binaries built on another machine:
#   experiments/gpu/run_kokkos_h200.sh <cuda-bin-dir> <omp-bin-dir> <lib-dir> <out-dir> [steps]
# <cuda-bin-dir>: the kokkos-cuda build's canopy and test binaries; <omp-bin-dir>: the kokkos-openmp
# build's canopy; <lib-dir>: shared libraries the GPU machine lacks (toml++, cudart, ...).
# steps (default: tests check portability scaling; sanitize on request)
#   tests       : the Kokkos and CUDA test binaries on the CUDA Kokkos (typed over Serial, OpenMP,
#                 Cuda; the CUDA suite runs the Kokkos designs on Cuda, eager and graph-captured)
#   check       : canopy check of every design on a bundled trace (eager, both value modes), and
#                 the bundled traces replayed under graph capture with every step checked
#                 (experiments/configs/kokkos-gpu-trace.toml)
#   portability : canopy run experiments/configs/portability-gpu.toml (graph replay, L2 flushed,
#                 the fp32 FMA, mma.sync and GEMM ceilings measured in the same run)
#   scaling     : kokkos-team on the OpenMP build, 1..16 threads (experiments/configs/openmp-scaling.toml)
#   sanitize    : compute-sanitizer racecheck and memcheck, one process per tool and case (every
#                 Cuda-typed Kokkos test, Kokkos design test and Kokkos graph case of the CUDA
#                 suite), CANOPY_SANITIZER_JOBS side by side (14, no more than one per 24 GiB of
#                 GPU memory: sanitizer_jobs), CANOPY_SANITIZER_TIMEOUT s each (130), the whole
#                 sweep within CANOPY_SANITIZER_BUDGET s if set; racecheck.txt, memcheck.txt:
#                 binary case | summary | exit | seconds
#   serial      : the scaling config on the default build's canopy (CANOPY_SERIAL_BIN, Serial only)
# Numbers from an H200 are an sm_90 proxy for the sm_120 design target.
set -uo pipefail
cuda_bin=$1 omp_bin=$2 lib=$3 out=$4
steps=${5:-"tests check portability scaling"}
mkdir -p "$out"
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|Flags" | cut -c1-400; } > "$out/machine.txt" 2>&1

for step in $steps; do
  case $step in
    tests)
      for t in canopy_Test_VerifyAttentionKokkos canopy_Test_KokkosDesigns canopy_Test_VerifyAttentionCuda; do
        timeout 300 "$cuda_bin/$t" > "$out/$t.log" 2>&1
        echo "$t exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.log" | tr '\n' ' ')"
      done | tee "$out/tests.txt"
      ;;
    check)
      timeout 300 "$cuda_bin/canopy" check --trace data/ddtree_values_h8.h5 --designs all > "$out/check.log" 2>&1
      echo "check exit $?" | tee -a "$out/check.log"
      timeout 300 "$cuda_bin/canopy" run experiments/configs/kokkos-gpu-trace.toml --out "$out/trace" > "$out/trace.log" 2>&1
      echo "trace replay exit $?" | tee -a "$out/check.log"
      ;;
    portability)
      timeout 420 "$cuda_bin/canopy" run experiments/configs/portability-gpu.toml --out "$out/portability-gpu" > "$out/portability.log" 2>&1
      echo "portability exit $?"
      ;;
    sanitize)
      # One process per (tool, case), all in one pool: racecheck and memcheck of every Cuda-typed
      # Kokkos test, every Kokkos design test and the Kokkos graph cases of the CUDA suite.
      export cuda_bin out here limit=${CANOPY_SANITIZER_TIMEOUT:-130}
      rc() {  # tool binary case: one line, "tool binary case | summary | exit | seconds"
        source "$here/experiments/gpu/sanitize_case.sh"
        printf '%s %s %s | %s\n' "$1" "$2" "$3" "$(sanitize_case "$1" "$limit" "$out/$1-reports.log" "$cuda_bin/$2" "$3")"
      }
      export -f rc
      source "$here/experiments/gpu/sanitize_case.sh"
      sanitizer_deadline  # CANOPY_SANITIZER_BUDGET, as in run_cuda_h200.sh checks
      list() { gtest_cases "$cuda_bin/$1" "${3:-}" | grep -E "$2" | sed "s|^|$1 |"; }
      # The Kokkos::Cuda instance of the typed suite, by its TypeParam (its index depends on which
      # host spaces the Kokkos build has).
      { list canopy_Test_VerifyAttentionKokkos . 'TypeParam = Kokkos::Cuda$'
        list canopy_Test_KokkosDesigns .
        list canopy_Test_VerifyAttentionCuda kokkos; } > "$out/cases.txt"
      { sed 's/^/racecheck /' "$out/cases.txt"; sed 's/^/memcheck /' "$out/cases.txt"; } |
        xargs -P "$(sanitizer_jobs 14 24)" -L 1 bash -c 'rc "$0" "$1" "$2"' |
        tee "$out/sanitize-as-finished.txt" | sort > "$out/sanitize.txt"  # the first survives a cut
      for tool in racecheck memcheck; do
        grep "^$tool " "$out/sanitize.txt" | cut -d' ' -f2- > "$out/$tool.txt"
        echo "$tool: $(grep -cE ' 0 (hazards|errors)' "$out/$tool.txt") of $(wc -l < "$out/$tool.txt") processes clean"
      done
      ;;
    serial)
      # The same config on the default build's canopy (Debian's Kokkos, Serial only): the Serial
      # row next to the OpenMP thread counts. CANOPY_SERIAL_BIN: that canopy.
      timeout 300 "${CANOPY_SERIAL_BIN:?canopy of the default build}" run experiments/configs/openmp-scaling.toml \
        --out "$out/serial" > "$out/serial.log" 2>&1
      echo "serial exit $?" | tee "$out/serial.txt"
      ;;
    scaling)
      for n in 1 2 4 8 16; do
        OMP_NUM_THREADS=$n OMP_PROC_BIND=spread OMP_PLACES=threads timeout 300 \
          "$omp_bin/canopy" run experiments/configs/openmp-scaling.toml --out "$out/omp-$n" > "$out/omp-$n.log" 2>&1
        echo "threads $n exit $?"
      done | tee "$out/scaling.txt"
      ;;
  esac
done
