#!/usr/bin/env bash
# sanitizer_jobs (experiments/gpu/sanitize_case.sh) with a stand-in nvidia-smi: the default capped by
# the GPU's memory at the given GiB per process, never below 1; CANOPY_SANITIZER_JOBS as given; the
# default where nvidia-smi fails (no driver) or is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
source "$here/experiments/gpu/sanitize_case.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
smi() {  # a stand-in that reports $1 MiB of GPU memory
  printf '#!/bin/sh\necho %s\n' "$1" > "$work/nvidia-smi"
  chmod +x "$work/nvidia-smi"
}
expect() {  # want, got, what
  [ "$1" = "$2" ] || { echo "sanitizer_jobs $3: got '$2', expected '$1'" >&2; exit 1; }
}
unset CANOPY_SANITIZER_JOBS
smi 143771  # an H200: 140 GiB
expect 5 "$(PATH="$work:$PATH" sanitizer_jobs 14 24)" "on 140 GiB at 24 GiB each"
expect 4 "$(PATH="$work:$PATH" sanitizer_jobs 4 24)" "below the memory cap"
smi 8192
expect 1 "$(PATH="$work:$PATH" sanitizer_jobs 14 16)" "on 8 GiB at 16 GiB each"
expect 3 "$(CANOPY_SANITIZER_JOBS=3 PATH="$work:$PATH" sanitizer_jobs 14 16)" "with CANOPY_SANITIZER_JOBS=3"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' > "$work/nvidia-smi"
expect 14 "$(PATH="$work:$PATH" sanitizer_jobs 14 16)" "where nvidia-smi fails"
mkdir "$work/none"
expect 14 "$(PATH="$work/none" sanitizer_jobs 14 16)" "without nvidia-smi (nor anything else on PATH)"
echo "sanitizer_jobs: ok"
