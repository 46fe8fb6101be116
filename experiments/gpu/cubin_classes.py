#!/usr/bin/env python3
"""SASS instruction classes per kernel of an sm_90 cubin, without a disassembler.

The CPU machine has nvcc and ptxas but no cuobjdump or nvdisasm, so `sass_counts.sh` (which reads
cuobjdump's listing) runs only on the GPU machine. An sm_90 instruction is 16 bytes, and the low 12
bits of its first 64-bit word name its opcode: over the 78,000 instructions of two cuobjdump
listings of canopy's kernels (138 opcodes), no value of those bits stood for two mnemonics. So the
classes sass_counts.sh reports can be counted from the cubin's `.text.<kernel>` sections directly,
and they match cuobjdump's counts for every kernel of canopy's sm_90 and sm_90a cubins.

Usage: cubin_classes.py <file.cubin> [--kernel REGEX] [--gaps] [--span]
  (make the cubin with `nvcc -cubin -gencode=arch=compute_90a,code=sm_90a ...`)
Prints the markdown table of sass_counts.sh: instructions, HGMMA, HMMA, LDSM, LDGSTS, R2UR, LDL, STL,
QGMMA (wgmma on FP8 operands, whose opcode was read off cuda-sm90's fp8-mma kernels: the one opcode
they have 20 of, one per k-step of a tile, and the bf16 kernels none). --span and --gaps count
between wgmma of either kind.
Exit 2 for a file that is not an sm_90 cubin.
"""
import argparse
import re
import struct
import sys

# Opcode (low 12 bits of the first word) -> class, sm_90 only, as cuobjdump names them.
SM90_OPCODES = {0x9F0: "HGMMA", 0x23C: "HMMA", 0x83B: "LDSM", 0xFAE: "LDGSTS", 0x2CA: "R2UR",
                0x983: "LDL", 0x387: "STL", 0x9F3: "QGMMA"}
CLASSES = ["HGMMA", "HMMA", "LDSM", "LDGSTS", "R2UR", "LDL", "STL", "QGMMA"]
WGMMA = ("HGMMA", "QGMMA")


def sections(data):
    """(name, bytes) of every section of a 64-bit little-endian ELF."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for h in headers:
        start = names + h[0]
        yield data[start:data.index(b"\0", start)].decode(), data[h[4]:h[4] + h[5]]


def sm_version(data):
    """The SM a cubin was built for: bits 8-15 of e_flags (0 for anything else)."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return 0
    (flags,) = struct.unpack_from("<I", data, 0x30)
    return (flags >> 8) & 0xFF


def kernels(data, kernel=None):
    """[(kernel, [class or None per instruction])] in section order, for the kernels matching \p kernel."""
    out = []
    for name, body in sections(data):
        if not name.startswith(".text."):
            continue
        k = name[len(".text."):]
        if kernel and not re.search(kernel, k):
            continue
        out.append((k, [SM90_OPCODES.get(struct.unpack_from("<Q", body, off)[0] & 0xFFF)
                        for off in range(0, len(body) - 15, 16)]))
    return out


def wgmma_at(classes):
    """Indices of one kernel's wgmma instructions (either operand kind)."""
    return [i for i, c in enumerate(classes) if c in WGMMA]


def wgmma_gaps(classes):
    """Instructions between consecutive wgmma of one kernel (the issue cost around each wgmma)."""
    at = wgmma_at(classes)
    return [b - a - 1 for a, b in zip(at, at[1:])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--kernel", help="only kernels whose mangled name matches this regex")
    ap.add_argument("--gaps", action="store_true",
                    help="also the instructions between consecutive wgmma per kernel (a run of equal gaps is a "
                         "wgmma loop; e.g. cuda-sm90's score loop: 5x35)")
    ap.add_argument("--span", action="store_true",
                    help="count only the instructions from a kernel's first wgmma to its last (its wgmma tile "
                         "loop; kernels without wgmma count whole)")
    a = ap.parse_args()
    try:
        data = open(a.cubin, "rb").read()
    except OSError as e:
        print(f"cubin_classes: {a.cubin}: {e.strerror}", file=sys.stderr)
        return 2
    sm = sm_version(data)
    if sm != 90:
        print(f"cubin_classes: {a.cubin}: not an sm_90 cubin (ELF e_flags say sm {sm}); the opcode table is sm_90's",
              file=sys.stderr)
        return 2
    rows = kernels(data, a.kernel)
    print("| kernel | instructions | " + " | ".join(CLASSES) + " |")
    print("|---|" + "---:|" * (len(CLASSES) + 1))
    for k, classes in rows:
        at = wgmma_at(classes)
        if a.span and at:
            classes = classes[at[0]:at[-1] + 1]
        print(f"| {k} | {len(classes)} | " + " | ".join(str(classes.count(x)) for x in CLASSES) + " |")
    if a.gaps:
        print()
        print("| kernel | instructions between consecutive wgmma (run-length: gap x count) |")
        print("|---|---|")
        for k, classes in rows:
            if not wgmma_at(classes):
                continue
            runs = []
            for g in wgmma_gaps(classes):
                if runs and runs[-1][0] == g:
                    runs[-1][1] += 1
                else:
                    runs.append([g, 1])
            print(f"| {k} | " + ", ".join(f"{g}x{m}" if m > 1 else str(g) for g, m in runs) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
