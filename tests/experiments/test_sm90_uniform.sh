#!/usr/bin/env bash
# cuda-sm90's kernels as ptxas compiles them, counted from the cubin (experiments/gpu/cubin_classes.py):
# the wgmma per tile loop, no spills, and the wgmma descriptors on the uniform datapath: at most 8
# R2UR from a kernel's first wgmma to its last (--span: the tile loop, 1 today; with the shared base
# in a vector register the producer kernel had ~150, four per score wgmma; the prologue's are not
# counted, as they move with any change there), and the score loop at 5 instructions per wgmma.
# - canopy_VerifyAttentionSm90.cu: cuda-sm90's kernels per pool dtype (bf16, fp8-e4m3, fp8-e5m2,
#   fp8-e4m3-blockscaled) and partial dtype, and cuda-sm90-sync's per partial dtype: 10 kernels,
#   40 HGMMA each (36 score k-steps, 4 P.V k-steps), a run of at least 33 gaps of 5.
# - canopy_VerifyAttentionSm90Fp8Mma.cu: fp8-mma's per pool dtype (e4m3, e5m2) and partial dtype: 4
#   kernels, 20 QGMMA (FP8 wgmma) each (18 score k-steps, 2 P.V k-steps), a run of at least 14
#   (the 16 latent k-steps; the two rope k-steps read another block, 4 apart).
# Also: the tool refuses a file that is not an sm_90 cubin.
# Usage: test_sm90_uniform.sh <nvcc> <source-dir>
set -euo pipefail
nvcc=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
classes() { /usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$@"; }

# check <source> <kernel regex> <kernels> <wgmma class> <wgmma per loop> <min run of 5-gaps>
# (columns of cubin_classes' table: 4 HGMMA, 8 R2UR, 9 LDL, 11 QGMMA; the other wgmma class must be 0)
check() {
  local name=$1 regex=$2 kernels=$3 class=$4 per_loop=$5 fives_min=$6 col other
  if [ "$class" = HGMMA ]; then col=4 other=11; else col=11 other=4; fi
  "$nvcc" -I"$src/backends/cuda" -I"$src/core" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr \
    -gencode=arch=compute_90a,code=sm_90a -x cu -cubin "$src/backends/cuda/$name" -o "$work/k.cubin"
  classes "$work/k.cubin" --kernel "$regex" > "$work/table.md"
  classes "$work/k.cubin" --kernel "$regex" --span > "$work/span.md"
  cat "$work/table.md" "$work/span.md"
  awk -F'|' -v col="$col" -v other="$other" -v want="$per_loop" -v class="$class" -v n_want="$kernels" 'NR > 2 { n++
    if ($col + 0 != want) { print "FAIL: " $2 " has " $col + 0 " " class ", expected " want; bad = 1 }
    if ($other + 0 != 0) { print "FAIL: " $2 " has " $other + 0 " wgmma of the other kind, expected none"; bad = 1 }
    if ($9 + 0 != 0) { print "FAIL: " $2 " loads from local memory (" $9 + 0 " LDL): spills"; bad = 1 } }
    END { if (n != n_want) { print "FAIL: " n + 0 " kernels of " class ", expected " n_want; bad = 1 }; exit bad }' "$work/table.md"
  awk -F'|' 'NR > 2 && $8 + 0 > 8 { print "FAIL: " $2 " has " $8 + 0 " R2UR in its tile loop: wgmma descriptors built in vector registers"; bad = 1 }
    END { exit bad }' "$work/span.md"
  # --gaps: one row of gaps per kernel, whose runs account for its per_loop - 1 gaps.
  classes "$work/k.cubin" --kernel "$regex" --gaps |
    awk -F'|' -v gaps="$((per_loop - 1))" -v fives_min="$fives_min" -v n_want="$kernels" '
      /instructions between/ { on = 1; next }
      on && /sm90/ { n++; split($3, runs, ","); t = 0; fives = 0
        for (i in runs) { m = split(runs[i], gx, "x"); gsub(/ /, "", gx[1]); t += (m == 2 ? gx[2] : 1)
          if (m == 2 && gx[1] == "5" && gx[2] + 0 > fives) fives = gx[2] + 0 }
        if (t != gaps) { print "FAIL: " $2 " has " t " wgmma gaps, expected " gaps; bad = 1 }
        if (fives < fives_min) { print "FAIL: " $2 " score loop: " $3 ", expected a run of >= " fives_min " gaps of 5"; bad = 1 } }
      END { if (n != n_want) { print "FAIL: " n + 0 " gap rows, expected " n_want; bad = 1 }; exit bad }'
}

check canopy_VerifyAttentionSm90.cu 'sm90(Sync)?Kernel' 10 HGMMA 40 33
check canopy_VerifyAttentionSm90Fp8Mma.cu 'sm90Fp8MmaKernel' 4 QGMMA 20 14
if classes "$src/README.md" > /dev/null 2>&1; then
  echo "FAIL: a README accepted as a cubin"; exit 1
fi
echo "ok"
