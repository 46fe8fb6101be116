#!/usr/bin/env bash
# cuda-sm90's kernels as ptxas compiles them, counted from the cubin (experiments/gpu/cubin_classes.py):
# 40 wgmma per tile loop (36 score k-steps, 4 P.V k-steps), no spills, and the wgmma descriptors on
# the uniform datapath: at most 8 R2UR from a kernel's first wgmma to its last (--span: the tile loop,
# 1 today; with the shared base in a vector register the producer kernel had ~150, four per score
# wgmma; the prologue's are not counted, as they move with any change there), and the score loop at
# 5 instructions per wgmma (a run of at least 33 gaps of 5).
# The kernels: cuda-sm90's per pool dtype (bf16, fp8-e4m3, fp8-e5m2, fp8-e4m3-blockscaled) and
# partial dtype, and cuda-sm90-sync's per partial dtype: 10. Then fp8-mma's (below).
# Also: the tool refuses a file that is not an sm_90 cubin.
# Usage: test_sm90_uniform.sh <nvcc> <source-dir>
set -euo pipefail
nvcc=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$nvcc" -I"$src/backends/cuda" -I"$src/core" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr \
  -gencode=arch=compute_90a,code=sm_90a -x cu -cubin "$src/backends/cuda/canopy_VerifyAttentionSm90.cu" -o "$work/sm90.cubin"
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/sm90.cubin" --kernel 'sm90(Sync)?Kernel' > "$work/table.md"
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/sm90.cubin" --kernel 'sm90(Sync)?Kernel' --span > "$work/span.md"
cat "$work/table.md" "$work/span.md"
awk -F'|' 'NR > 2 { n++
  if ($4 + 0 != 40) { print "FAIL: " $2 " has " $4 + 0 " HGMMA, expected 40"; bad = 1 }
  if ($9 + 0 != 0) { print "FAIL: " $2 " loads from local memory (" $9 + 0 " LDL): spills"; bad = 1 } }
  END { if (n != 10) { print "FAIL: " n + 0 " sm90 kernels, expected 10"; bad = 1 }; exit bad }' "$work/table.md"
awk -F'|' 'NR > 2 && $8 + 0 > 8 { print "FAIL: " $2 " has " $8 + 0 " R2UR in its tile loop: wgmma descriptors built in vector registers"; bad = 1 }
  END { exit bad }' "$work/span.md"
# --gaps: one row of HGMMA gaps per sm90 kernel, whose runs account for its 39 gaps (40 HGMMA).
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/sm90.cubin" --kernel 'sm90(Sync)?Kernel' --gaps |
  awk -F'|' '/instructions between/ { on = 1; next } on && /sm90/ { n++; split($3, runs, ","); t = 0; fives = 0
    for (i in runs) { m = split(runs[i], gx, "x"); gsub(/ /, "", gx[1]); t += (m == 2 ? gx[2] : 1)
      if (m == 2 && gx[1] == "5" && gx[2] + 0 > fives) fives = gx[2] + 0 }
    if (t != 39) { print "FAIL: " $2 " has " t " HGMMA gaps, expected 39"; bad = 1 }
    if (fives < 33) { print "FAIL: " $2 " score loop: " $3 ", expected a run of >= 33 gaps of 5"; bad = 1 } }
    END { if (n != 10) { print "FAIL: " n + 0 " gap rows, expected 10"; bad = 1 }; exit bad }'
# fp8-mma's kernels (per pool dtype e4m3 / e5m2 and partial dtype: 4): 20 FP8 wgmma (QGMMA) per
# tile loop (18 score k-steps, 2 P.V k-steps), no spills, at most 8 R2UR in the loop, and the score
# loop at 5 instructions per wgmma (a run of at least 16 gaps of 5).
"$nvcc" -I"$src/backends/cuda" -I"$src/core" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr \
  -gencode=arch=compute_90a,code=sm_90a -x cu -cubin "$src/backends/cuda/canopy_VerifyAttentionSm90Fp8Mma.cu" -o "$work/mma.cubin"
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/mma.cubin" --kernel 'sm90Fp8MmaKernel' > "$work/mma.md"
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/mma.cubin" --kernel 'sm90Fp8MmaKernel' --span > "$work/mma-span.md"
cat "$work/mma.md" "$work/mma-span.md"
awk -F'|' 'NR > 2 { n++
  if ($11 + 0 != 20) { print "FAIL: " $2 " has " $11 + 0 " QGMMA, expected 20"; bad = 1 }
  if ($4 + 0 != 0) { print "FAIL: " $2 " has " $4 + 0 " HGMMA, expected none"; bad = 1 }
  if ($9 + 0 != 0) { print "FAIL: " $2 " loads from local memory (" $9 + 0 " LDL): spills"; bad = 1 } }
  END { if (n != 4) { print "FAIL: " n + 0 " fp8-mma kernels, expected 4"; bad = 1 }; exit bad }' "$work/mma.md"
awk -F'|' 'NR > 2 && $8 + 0 > 8 { print "FAIL: " $2 " has " $8 + 0 " R2UR in its tile loop"; bad = 1 }
  END { exit bad }' "$work/mma-span.md"
/usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$work/mma.cubin" --kernel 'sm90Fp8MmaKernel' --gaps |
  awk -F'|' '/instructions between/ { on = 1; next } on && /sm90/ { n++; split($3, runs, ","); fives = 0
    for (i in runs) { m = split(runs[i], gx, "x"); gsub(/ /, "", gx[1])
      if (m == 2 && gx[1] == "5" && gx[2] + 0 > fives) fives = gx[2] + 0 }
    if (fives < 16) { print "FAIL: " $2 " score loop: " $3 ", expected a run of >= 16 gaps of 5"; bad = 1 } }
    END { if (n != 4) { print "FAIL: " n + 0 " gap rows, expected 4"; bad = 1 }; exit bad }'
if /usr/bin/python3 "$src/experiments/gpu/cubin_classes.py" "$src/README.md" > /dev/null 2>&1; then
  echo "FAIL: a README accepted as a cubin"; exit 1
fi
echo "ok"
