#!/usr/bin/env bash
# sass_counts (experiments/gpu/sass_counts.sh) against a fixed cuobjdump listing: two kernels, every
# counted opcode, the encoding lines that are not instructions, a predicated instruction; and no
# output at all without cuobjdump.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
source "$here/experiments/gpu/sass_counts.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/cuobjdump" <<'X'
#!/bin/sh
cat <<'L'
	code for sm_90
		Function : _Z3fooPf
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                             /* 0x000fe20000000800 */
        /*0010*/                   R2UR UR4, R2 ;
        /*0020*/                   HGMMA.64x32x16.F32.BF16 R152, gdesc[UR4], RZ, !UPT ;
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0038*/                   QGMMA.64x32x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, gsb0 ;
        /*0040*/              @!P0 LDL R3, [R1] ;
		Function : _Z3barv
        /*0000*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0010*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0020*/                   STL [R1], R2 ;
L
X
chmod +x "$work/cuobjdump"
got=$(PATH="$work:$PATH" sass_counts any.bin sm_90)
want='| kernel | instructions | HGMMA | HMMA | LDSM | LDGSTS | R2UR | LDL | STL | QGMMA |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| _Z3fooPf | 6 | 1 | 1 | 0 | 0 | 1 | 1 | 0 | 1 |
| _Z3barv | 3 | 0 | 0 | 1 | 1 | 0 | 0 | 1 | 0 |'
if [ "$got" != "$want" ]; then
  printf 'sass_counts gave\n%s\nexpected\n%s\n' "$got" "$want" >&2
  exit 1
fi
none=$(PATH=/nonexistent sass_counts any.bin sm_90)
[ -z "$none" ] || { echo "sass_counts wrote '$none' without cuobjdump" >&2; exit 1; }
echo "sass_counts: ok"
