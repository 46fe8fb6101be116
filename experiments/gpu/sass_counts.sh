# Sourced by run_cuda_h200.sh (checks, compare) and tests/experiments/test_sass_counts.sh.
# sass_counts <binary> <arch>: one markdown row per kernel of the binary's cubin for <arch>: SASS
# instructions, wgmma on 16-bit operands (HGMMA) and mma.sync (HMMA), ldmatrix, cp.async, the R2UR
# moves from vector to uniform registers (four per wgmma where its descriptors live in vector
# registers), local loads / stores (spills), and wgmma on FP8 operands (QGMMA, cuda-sm90's fp8-mma).
# Nothing when cuobjdump is missing.
sass_counts() {
  command -v cuobjdump > /dev/null || return 0
  echo "| kernel | instructions | HGMMA | HMMA | LDSM | LDGSTS | R2UR | LDL | STL | QGMMA |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  cuobjdump -sass -arch "$2" "$1" 2>/dev/null | awk '
    /Function :/ { f = $3; order[++nf] = f; next }
    f != "" && /\/\*[0-9a-f]+\*\/ / {
      n[f]++
      if (/ HGMMA/) wg[f]++; else if (/ HMMA/) mma[f]++; else if (/ QGMMA/) qg[f]++
      if (/ LDSM/) ldsm[f]++
      if (/ LDGSTS/) gsts[f]++
      if (/ R2UR /) r2ur[f]++
      if (/ LDL/) ldl[f]++
      if (/ STL/) stl[f]++ }
    END { for (i = 1; i <= nf; i++) { k = order[i]
      printf "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", k, n[k], wg[k], mma[k], ldsm[k], gsts[k], r2ur[k], ldl[k], stl[k], qg[k] } }'
}
