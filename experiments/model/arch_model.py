#!/usr/bin/python3
"""Per-architecture model of the CUDA verify designs: stages per KV tile, chips as data, time per shape.

    experiments/model/arch_model.py [--chips] [--stages] [--validate] [--predict] [--candidates]
                                    [--fit] [--markdown] [--self-test]

For each design (cuda-sm120, cuda-sm120-w32, cuda-flat, cuda-sm90) the model writes one KV tile of
one CTA as named stages (load, scores, exchange, mask + softmax, P.V, store) with their FLOPs and
shared-memory bytes (operand bytes by the warp-tile rule (r + c) / (r * c) bytes per FLOP), takes
registers and shared memory from the tile configs (backends/cuda/, docs/results/cuda-ptxas.md) to get
the blocks per SM, replicates the launcher's plan (suggestNsplit in canopy_CudaDesigns.cpp, the
grid of canopy_VerifyAttentionLaunch.cuh), and predicts the time of a verify step per chip:

  tile cycles   = sum over the serialised stages of max(FLOPs / MMA rate, shared bytes / feed rate)
                  + SERIAL[design] (mask, softmax, barriers and copy issue: fitted on the H200)
  block time    = START + tiles x tile cycles / clock       (cuda-flat adds its exposed load per tile)
  kernel time   = the blocks list-scheduled over SMs x blocks-per-SM, in launch order
  step time     = LAUNCH + max(kernel time, DRAM bytes / DRAM rate) + combine (splits > 1)
  combine       = LAUNCH + splits x MERGE cycles (one L2 round trip per split in its merge loop)

Chips are the CHIPS table (one place, each number with its source); the H200 is validated against
the measured rows in docs/results/ (read with experiments/plots/data.py), the sm_120 cards are
predictions. With no option, --validate and --predict. --markdown prints the tables of
docs/results/arch-model.md; --fit refits the H200 constants (FIT_PLAN) before printing. Standard
library only.
"""
import argparse
import dataclasses
import heapq
import json
import math
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from plots.data import Run  # noqa: E402  (the one reader of results.json rows)

D_QK, D_V = 576, 512          # absorbed-MLA row widths (K row, V = its first 512 columns)
ROW_BYTES = 2 * D_QK          # a bf16 K/V row
HEADS = 8

# ---------------------------------------------------------------------------------------------
# Chips. One place for every number; SOURCES says where each comes from (the page prints it).
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Chip:
    key: str
    name: str
    arch: str
    sms: int
    clock_ghz: float          # SM clock the rates are taken at
    mma_flop_clk: float       # mma.sync m16n8k16 bf16, fp32 accumulate, FLOP per clock per SM
    wgmma_flop_clk: float     # 0 where the chip has no wgmma
    ldsm_b_clk: float         # shared-memory bytes per clock per SM an ldmatrix-fed mma loop gets (8 warps/SM)
    smem_b_clk: float         # nominal shared-memory bandwidth per SM (wgmma operands, copies)
    smem_block: int           # opt-in shared memory per block, bytes
    smem_sm: int              # shared memory per SM, bytes
    regs_sm: int              # 32-bit registers per SM
    threads_sm: int           # resident threads per SM
    blocks_sm: int            # resident blocks per SM
    dram_tbs: float           # DRAM bandwidth the model uses, TB/s
    l2_mb: int
    measured: bool            # whether the model is validated on it


def _per_sm_clk(tflops, sms, ghz):
    return tflops * 1e12 / (sms * ghz * 1e9)


H200_SMS, H200_GHZ = 132, 1.98
H200_MMA_TFLOPS = 645.0     # canopy peaks, mma.sync from registers, median of the runs in docs/results
H200_GEMM_TFLOPS = 803.6    # canopy peaks, cuBLAS bf16 GEMM 8192^3 (wgmma), docs/results/cuda-h200.md
H200_LDSM_TFLOPS = 375.0    # canopy peaks, 1 ldmatrix.x4 (512 B) per 2 mma (8192 FLOP), 8 warps/SM
H200_COPY_TBS = 4.25        # canopy peaks, device-to-device copy (read + write)

CHIPS = {
    "h200": Chip("h200", "NVIDIA H200", "sm_90", H200_SMS, H200_GHZ,
                 _per_sm_clk(H200_MMA_TFLOPS, H200_SMS, H200_GHZ),
                 _per_sm_clk(H200_GEMM_TFLOPS, H200_SMS, H200_GHZ),
                 _per_sm_clk(H200_LDSM_TFLOPS, H200_SMS, H200_GHZ) / 16.0, 128.0,
                 227 * 1024, 228 * 1024, 65536, 2048, 32, H200_COPY_TBS, 60, True),
    "rtx-pro-6000": Chip("rtx-pro-6000", "RTX PRO 6000 Blackwell", "sm_120", 188, 2.617, 1024.0, 0.0,
                         _per_sm_clk(H200_LDSM_TFLOPS, H200_SMS, H200_GHZ) / 16.0, 128.0,
                         99 * 1024, 100 * 1024, 65536, 1536, 32, 1.792, 128, False),
    "rtx-5090": Chip("rtx-5090", "RTX 5090", "sm_120", 170, 2.407, 512.0, 0.0,
                     _per_sm_clk(H200_LDSM_TFLOPS, H200_SMS, H200_GHZ) / 16.0, 128.0,
                     99 * 1024, 100 * 1024, 65536, 1536, 32, 1.792, 96, False),
}

SOURCES = {
    "h200": {
        "sms": "132 (`gpu_sms` of every results.json; vendor spec)",
        "clock_ghz": "1.98 GHz, the max SM clock the runs record (`gpu_sm_clock_mhz`; settings untouched)",
        "mma_flop_clk": f"{H200_MMA_TFLOPS:.0f} TFLOP/s measured by `canopy peaks` (mma.sync from registers; "
                        "631-653 over the runs in docs/results/*/results.json, environment `peaks`)",
        "wgmma_flop_clk": f"{H200_GEMM_TFLOPS} TFLOP/s, cuBLAS bf16 GEMM measured by `canopy peaks` "
                          "(docs/results/cuda-h200.md)",
        "ldsm_b_clk": f"measured: `canopy peaks` mma.sync fed by 1 ldmatrix.x4 per 2 mma at 8 warps/SM, "
                      f"{H200_LDSM_TFLOPS:.0f} TFLOP/s (368-377 over the runs) at 1/16 B per FLOP",
        "smem_b_clk": "128 B/clk/SM (32 banks x 4 B; vendor architecture documents)",
        "smem_block": "227 KB opt-in per block, 228 KB per SM (CUDA programming guide, cc 9.0)",
        "regs_sm": "65,536 32-bit registers and 2,048 threads per SM (CUDA programming guide, cc 9.0)",
        "dram_tbs": f"{H200_COPY_TBS} TB/s measured copy (`canopy peaks`); vendor spec 4.8 TB/s HBM3e",
        "l2_mb": "60 MB (`device` field of the runs)",
    },
    "rtx-pro-6000": {
        "sms": "188 SMs (NVIDIA RTX PRO 6000 Blackwell datasheet; GB202)",
        "clock_ghz": "2.617 GHz boost (vendor spec; sustained clocks under load may be lower)",
        "mma_flop_clk": "1,024 FLOP/clk/SM: 503.8 TFLOP/s dense FP16/BF16 tensor with FP32 accumulate "
                        "(vendor spec) / (188 SMs x 2.617 GHz)",
        "ldsm_b_clk": "assumed equal to the H200's measured ldmatrix feed (not measured on sm_120)",
        "smem_b_clk": "128 B/clk/SM (same shared-memory banks as the H200)",
        "smem_block": "99 KB opt-in per block, 100 KB per SM (CUDA programming guide, cc 12.0)",
        "regs_sm": "65,536 32-bit registers and 1,536 threads per SM (CUDA programming guide, cc 12.0)",
        "dram_tbs": "1.792 TB/s GDDR7, 512-bit at 28 Gbps (vendor spec)",
        "l2_mb": "128 MB (vendor spec)",
    },
    "rtx-5090": {
        "sms": "170 SMs (NVIDIA RTX Blackwell architecture whitepaper; GB202)",
        "clock_ghz": "2.407 GHz boost (vendor spec)",
        "mma_flop_clk": "512 FLOP/clk/SM: 209.5 TFLOP/s dense FP16/BF16 tensor with FP32 accumulate "
                        "(whitepaper; GeForce runs FP32 accumulate at half rate) / (170 x 2.407 GHz)",
        "ldsm_b_clk": "assumed equal to the H200's measured ldmatrix feed (not measured on sm_120)",
        "smem_b_clk": "128 B/clk/SM",
        "smem_block": "99 KB opt-in per block, 100 KB per SM (cc 12.0)",
        "regs_sm": "65,536 32-bit registers and 1,536 threads per SM (cc 12.0)",
        "dram_tbs": "1.792 TB/s GDDR7, 512-bit at 28 Gbps (vendor spec)",
        "l2_mb": "96 MB (vendor spec)",
    },
}

# ---------------------------------------------------------------------------------------------
# Constants fitted on the H200 (--fit reproduces them; the page gives the fit and its sets).
# Cycles are SM clocks (carried to sm_120 as cycles: latency and issue work on the same 4-scheduler
# SM); microseconds are wall time (launch and memory latency, carried as they are).
# ---------------------------------------------------------------------------------------------
FIT = {
    "LAUNCH_US": 5.45,        # per kernel of the graph (the combine is a second one)
    "START_US": 6.98,         # per block: Q tile load, first slot indices and K/V tile, visibility, store
    "MERGE_CLK": 232.0,      # combine, per split: the merge loop's dependent L2 round trip
    "SERIAL_SM120": 1179.0,  # cuda-sm120 (and cuda-flat, the same tile code): softmax, exchange barrier, copies
    "SERIAL_W32": 2421.0,    # cuda-sm120-w32: two softmax steps and four barriers per 32 keys
    "SERIAL_SM90": 2909.0,   # cuda-sm90: copy issue between the score wgmma, softmax, 3 barriers per 64 keys
    "FLAT_LOAD_US": 1.365,     # cuda-flat: slot indices, then K, then V per tile, nothing prefetched
    "FLAT_LOAD_BUSY_US": 0.647,  # cuda-flat: the same latency's growth with every SM streaming
}

# ---------------------------------------------------------------------------------------------
# Designs: tile configuration and the stages of one KV tile of one block.
# ---------------------------------------------------------------------------------------------


def smem_end(*sizes):
    """End of a shared-memory plan: regions chained as SmemRegion::next does (each starts at the
    previous end rounded up to 16 bytes)."""
    end = 0
    for n in sizes:
        end = (end + 15) // 16 * 16 + n
    return end


KV_PAD_ROW = (D_QK + 8) * 2   # 1168 B: the padded K/V row of the mma.sync tiles (conflict-free ldmatrix)
# The plans of the four kernels, region by region as their configs declare them.
SMEM_SM120 = smem_end(2 * 32 * KV_PAD_ROW, 0, 8 * 16 * 32 * 4, 4096, 2 * 32 * 8, 128)
SMEM_W32 = smem_end(2 * 32 * KV_PAD_ROW, 8 * 4 * 32 * 16, 2 * 2 * 32 * 16, 2 * 4 * 32 * 4, 64 * 8, 4096,
                    2 * 32 * 8, 128)
SMEM_FLAT = smem_end(32 * KV_PAD_ROW, 32 * (D_V + 8) * 2, 4 * 16 * 32 * 4, 2048, 2 * 32 * 8, 128)
SMEM_SM90 = smem_end(64 * D_QK * 2, 2 * 64 * D_QK * 2, 64 * 64 * 2, 2 * 64 * 4, 1024, 2 * 64 * 8, 128)


def operand_bytes(flops, r, c, a_shared=True, b_shared=True):
    """Shared-memory bytes an r x c warp (or warpgroup) tile reads for \\p flops of bf16 MMA: per
    16-deep k step it does 2 r c 16 FLOP and reads r x 16 (A) and 16 x c (B) bf16 elements, so
    (r [A from shared] + c [B from shared]) / (r c) bytes per FLOP; an operand held in registers
    costs nothing here."""
    return flops * ((r if a_shared else 0) + (c if b_shared else 0)) / (r * c)


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    flops: float = 0.0
    smem: float = 0.0         # shared-memory bytes read or written by the stage
    feed: str = "ldsm"        # which shared-memory rate feeds it: "ldsm" (ldmatrix-fed mma) or "smem"
    mma: str = "mma"          # which MMA rate: "mma" (mma.sync) or "wgmma"
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Design:
    name: str
    rows: int                 # (node, head) rows per block (M tile); nodes of one head for cuda-flat
    keys: int                 # keys per KV tile (N tile)
    warps: int
    regs: int                 # registers per thread (ptxas, docs/results/cuda-ptxas.md)
    smem: int                 # dynamic shared memory per block (the config's shared-memory plan)
    splits: bool              # split-K with a combine kernel (else one block walks the whole prefix)
    fold_heads: bool          # rows are (node, head) of one request, else nodes of one head
    serial: str               # the FIT key of its serial cycles per tile
    stages: tuple             # one KV tile of one block
    prefetch: bool = True     # next tile's copies in flight during this tile's compute
    plan_tile_s: float = 2e-6  # SplitTile.seconds of suggestNsplit
    serial_scale: float = 1.0  # SERIAL cycles are per 32 keys; a 64-key tile pays them twice
    overlap: bool = False     # softmax, exchange and copies hidden behind MMAs (seesaw): see tile_cycles
    smem_plan: tuple = ()     # (region, bytes) of a candidate tile's shared-memory plan
    note: str = ""


def _sm120():
    m, n = 64, 32
    f_qk, f_pv = 2.0 * m * n * D_QK, 2.0 * m * n * D_V
    return Design(
        "cuda-sm120", m, n, 8, 255, SMEM_SM120, True, True, "SERIAL_SM120",
        (Stage("load", smem=n * ROW_BYTES, feed="smem", note="cp.async of the next tile: 32 rows x 1152 B written"),
         Stage("scores", f_qk, operand_bytes(f_qk, 16, 32, a_shared=False),
               note="8 warps x 72 mma; warp tile 16 rows x 32 keys over 288 dims, Q in registers"),
         Stage("exchange", smem=8 * 2 * 2048, feed="smem", note="partial scores: 2 KB written + 2 KB read per warp"),
         Stage("softmax", note="mask (tree tiles), max, exp2, sums: in SERIAL"),
         Stage("pv", f_pv, operand_bytes(f_pv, 16, 256, a_shared=False),
               note="8 warps x 64 mma; warp tile 16 rows x 256 columns, P in registers")),
        note="Q (72) + O (128) registers: 8 warps, 1 block per SM")


def _w32():
    m, n = 64, 32
    f_qk, f_pv = 2.0 * m * n * D_QK, 2.0 * m * n * D_V
    # per 16-key half: partials 2 KB written and 2 KB read per warp, P 256 B written per warp
    x = 2 * 8 * (2048 + 2048 + 256)
    return Design(
        "cuda-sm120-w32", m, n, 8, 255, SMEM_W32, True, True, "SERIAL_W32",
        (Stage("load", smem=n * ROW_BYTES, feed="smem", note="cp.async, as cuda-sm120"),
         Stage("scores", f_qk, operand_bytes(f_qk, 32, 16, a_shared=False),
               note="warp tile 32 rows x 16 keys over 144 dims (1 ldmatrix : 4 mma), Q in registers"),
         Stage("exchange", smem=x, feed="smem", note="4 partials per row summed once, P as A fragments"),
         Stage("softmax", note="two steps per 32 keys: in SERIAL"),
         Stage("pv", f_pv, operand_bytes(f_pv, 32, 128), note="warp tile 32 rows x 128 columns, P and V from shared")),
        note="same registers as cuda-sm120")


def _flat():
    m, n = 32, 32
    f_qk, f_pv = 2.0 * m * n * D_QK, 2.0 * m * n * D_V
    return Design(
        "cuda-flat", m, n, 4, 255, SMEM_FLAT, False, False, "SERIAL_SM120",
        (Stage("load", smem=n * ROW_BYTES + n * 2 * D_V, feed="smem", note="K rows, then V rows again (exposed)"),
         Stage("scores", f_qk, operand_bytes(f_qk, 16, 32, a_shared=False), note="the cuda-sm120 warp code"),
         Stage("exchange", smem=4 * 2 * 2048, feed="smem"),
         Stage("softmax", note="in SERIAL (the cuda-sm120 tile code)"),
         Stage("pv", f_pv, operand_bytes(f_pv, 16, 256, a_shared=False))),
        prefetch=False, note="4 warps, 2 blocks per SM where shared memory allows")


def _sm90():
    m, n = 64, 64
    f_qk, f_pv = 2.0 * m * n * D_QK, 2.0 * m * n * D_V
    return Design(
        "cuda-sm90", m, n, 8, 196, SMEM_SM90, True, True, "SERIAL_SM90",
        (Stage("load", smem=n * ROW_BYTES, feed="smem", note="cp.async, 64 rows x 1152 B, swizzled"),
         Stage("scores", f_qk, operand_bytes(f_qk, 64, 32), feed="smem", mma="wgmma",
               note="2 warpgroups x 36 wgmma m64n32k16, Q and K from shared"),
         Stage("exchange", smem=m * n * 2 + 2 * 2 * m * 4, feed="smem", note="P (8 KB) and row maxima"),
         Stage("softmax", note="in SERIAL"),
         Stage("pv", f_pv, operand_bytes(f_pv, 64, 256), feed="smem", mma="wgmma",
               note="2 warpgroups x 4 wgmma m64n256k16, P and V from shared")),
        plan_tile_s=2.4e-6, note="wgmma: H200 only")


DESIGNS = {d.name: d for d in (_sm120(), _w32(), _flat(), _sm90())}


def _sm120_pv32():
    """cuda-sm120 with P.V over row pairs (measured, not kept: docs/results/cuda-schedules.md, "P.V
    over row pairs"): the same score stages; P (4 KB) and the rescale factors published in shared
    memory; a 32 x 128 P.V warp tile with P and V from shared (1 ldmatrix.x4 of V : 4 mma)."""
    d = _sm120()
    m, n = 64, 32
    f_pv = 2.0 * m * n * D_V
    exchange = next(s for s in d.stages if s.name == "exchange")
    changed = {
        "exchange": Stage("exchange", smem=exchange.smem + m * n * 2 + m * 4, feed="smem",
                          note="partial scores as cuda-sm120, plus P (4 KB, bf16) and the rows' rescale factors written"),
        "pv": Stage("pv", f_pv, operand_bytes(f_pv, 32, 128), note="warp tile 32 rows x 128 columns, P and V from shared"),
    }
    stages = tuple(changed.get(s.name, s) for s in d.stages)
    return dataclasses.replace(d, name="cuda-sm120-pv32", smem=100480, stages=stages,
                               note="same registers as cuda-sm120, one more barrier per tile")


# Changes built from the model's advice and measured against it: (design, the same-run compare of
# docs/results that measured it against cuda-sm120, as compare_builds.py --json writes it, and the
# variant whose change counts).
TESTED = ((_sm120_pv32(), "h200-cuda-schedules/pv32/compare.json", "pv32b"),)

# ---------------------------------------------------------------------------------------------
# Occupancy and per-tile cycles.
# ---------------------------------------------------------------------------------------------


def blocks_per_sm(d, chip):
    """Resident blocks per SM: registers (allocated per warp in 256-register units), shared memory
    (plus the 1 KB per block the runtime reserves), threads and the block limit."""
    if d.smem > chip.smem_block:
        return 0
    regs_warp = math.ceil(d.regs * 32 / 256) * 256
    by_regs = chip.regs_sm // (regs_warp * d.warps)
    by_smem = chip.smem_sm // (d.smem + 1024)
    by_threads = chip.threads_sm // (32 * d.warps)
    return max(0, min(by_regs, by_smem, by_threads, chip.blocks_sm))


def stage_parts(stage, chip):
    """(FLOPs / MMA rate, shared bytes / feed rate) of a stage on one SM, in cycles."""
    t_mma = 0.0
    if stage.flops:
        rate = chip.wgmma_flop_clk if stage.mma == "wgmma" else chip.mma_flop_clk
        t_mma = stage.flops / rate if rate > 0 else math.inf
    feed = chip.ldsm_b_clk if stage.feed == "ldsm" else chip.smem_b_clk
    return t_mma, stage.smem / feed


def stage_cycles(stage, chip):
    """max(FLOPs / MMA rate, shared bytes / feed rate): the stage's own throughput bound on one SM."""
    return max(stage_parts(stage, chip))


def tile_work(d, chip):
    """Throughput cycles of one KV tile: the stages' own bounds, added. The designs run their warps
    in lockstep (a CTA-wide barrier per tile, every warp in the same stage), so the stages add; the
    copies of the next tile land while the scores run and add their shared-memory writes."""
    by = {s.name: stage_cycles(s, chip) for s in d.stages}
    return by["scores"] + by["exchange"] + by["pv"] + by["load"]


def tile_cycles(d, chip, fit=FIT):
    """Cycles of one KV tile of one block alone on its SM: throughput work + the serial cycles. A
    tile with overlap (a seesaw of two row groups, not built yet) is bounded by the busier of the
    tensor pipe and the shared-memory feed over the whole tile, its serial work hidden."""
    if d.overlap:
        parts = [stage_parts(s, chip) for s in d.stages]
        return max(sum(p[0] for p in parts), sum(p[1] for p in parts))
    return tile_work(d, chip) + fit[d.serial] * d.serial_scale


# ---------------------------------------------------------------------------------------------
# The launcher's plan, replicated: suggestNsplit (canopy_CudaDesigns.cpp) and the grid
# (canopy_VerifyAttentionLaunch.cuh: x = split * m_tiles + m_tile, y = request).
# ---------------------------------------------------------------------------------------------


def suggest_nsplit(batch, tree, prefix, sms, rows=64, keys=32, tile_s=2e-6, heads=HEADS, partial_bytes=4):
    """The C++ suggestNsplit, line for line: waves of (m-tile, split) blocks over the SMs, each
    paying its tiles plus 2 for its start, plus 1 + the partials' combine traffic per split."""
    start_tiles, partial_bw = 2.0, 3e12
    m_tiles = (tree * heads + rows - 1) // rows
    per_split = max(1, batch * m_tiles)
    length = max(1, prefix + tree)
    split_cost = batch * tree * heads * D_V * partial_bytes * 2 / partial_bw / tile_s
    best, best_cost = 1, 1e300
    for ns in range(1, max(1, min(64, (length + keys - 1) // keys)) + 1):
        waves = (per_split * ns + max(1, sms) - 1) // max(1, sms)
        tiles = ((length + ns - 1) // ns + keys - 1) // keys
        cost = waves * (tiles + start_tiles) + (1.0 + ns * split_cost if ns > 1 else 0.0)
        if cost < best_cost - 1e-9:
            best, best_cost = ns, cost
    return best


def block_tiles(d, batch, tree, prefix, nsplit, heads=HEADS):
    """KV tiles of every block in launch order (0: the block exits at once)."""
    length = prefix + tree
    if not d.splits:
        m_tiles = (tree + d.rows - 1) // d.rows
        n = (length + d.keys - 1) // d.keys
        return [n] * (m_tiles * heads * batch)
    rows = tree * heads
    m_tiles = (rows + d.rows - 1) // d.rows
    chunk = (length + nsplit - 1) // nsplit
    chunk = (chunk + d.keys - 1) // d.keys * d.keys
    out = []
    for _ in range(batch):
        for split in range(nsplit):
            s0, s1 = split * chunk, min(split * chunk + chunk, length)
            n = (s1 - s0 + d.keys - 1) // d.keys if s1 > s0 else 0
            out.extend([n] * m_tiles)
    return out


def makespan(durations, slots):
    """Blocks handed in launch order to the first free slot (the block scheduler's order)."""
    free = [0.0] * max(1, slots)
    heapq.heapify(free)
    end = 0.0
    for t in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + t)
        end = max(end, start + t)
    return end


@dataclasses.dataclass
class Prediction:
    seconds: float
    kernel_s: float
    combine_s: float
    nsplit: int
    blocks: int
    per_sm: int
    tile_cycles: float
    dram_s: float
    limit: str


def dram_bytes(batch, tree, prefix, heads=HEADS):
    """Bytes a step must move at least: every K/V row once, q in, out back (bf16)."""
    return batch * ((prefix + tree) * ROW_BYTES + tree * heads * (ROW_BYTES + 2 * D_V))


def predict(d, chip, batch, tree, prefix, nsplit=None, fit=FIT):
    per_sm = blocks_per_sm(d, chip)
    if per_sm == 0:
        raise ValueError(f"{d.name} does not fit {chip.name} ({d.smem} B of shared memory per block)")
    if d.splits and nsplit is None:
        nsplit = suggest_nsplit(batch, tree, prefix, chip.sms, d.rows, d.keys, d.plan_tile_s)
    nsplit = nsplit if d.splits else 1
    tiles = block_tiles(d, batch, tree, prefix, nsplit)
    live = [n for n in tiles if n]
    hz = chip.clock_ghz * 1e9
    tc = tile_cycles(d, chip, fit)
    tile_s = tc / hz
    if not d.prefetch:
        # The tile's copies are exposed: slot indices, then K, then V, one after the other. Their
        # latency grows with the SMs that stream at once (LOAD_US at an idle GPU, + LOAD_BUSY_US
        # with every SM streaming). A second block on the SM overlaps its own latency with this
        # block's tile; its throughput work collides with this one's in the fraction of the tile
        # that the work fills.
        busy = min(1.0, len(live) / chip.sms)
        tile_s += (fit["FLAT_LOAD_US"] + fit["FLAT_LOAD_BUSY_US"] * busy) * 1e-6
        share = max(1, min(per_sm, math.ceil(len(live) / chip.sms)))
        work_s = tile_work(d, chip) / hz
        tile_s += (share - 1) * work_s * work_s / tile_s
    start = fit["START_US"] * 1e-6
    kernel = makespan([start + n * tile_s for n in live], chip.sms * per_sm)
    dram = dram_bytes(batch, tree, prefix) / (chip.dram_tbs * 1e12)
    combine = 0.0
    if nsplit > 1:
        combine = fit["LAUNCH_US"] * 1e-6 + nsplit * fit["MERGE_CLK"] / (chip.clock_ghz * 1e9)
    total = fit["LAUNCH_US"] * 1e-6 + max(kernel, dram) + combine
    limit = "DRAM" if dram > kernel else ("latency" if not d.prefetch else "tiles")
    return Prediction(total, kernel, combine, nsplit, len(tiles), per_sm, tc, dram, limit)


# ---------------------------------------------------------------------------------------------
# Measurements: the H200 rows committed under docs/results/.
# ---------------------------------------------------------------------------------------------

MEASURED = (
    # (results.json under docs/results, what it is, designs the model reads from it)
    ("h200-budget-study/results.json", "budget study (traces, T 16..1024)", ("cuda-sm120", "cuda-flat")),
    ("h200-replay/designs-w32/results.json", "designs table (P up to 128K)",
     ("cuda-sm120", "cuda-sm120-w32", "cuda-flat")),
    ("h200-sm90/run2-score-split/results.json", "cuda-sm90 run", ("cuda-sm120", "cuda-sm90")),
)


@dataclasses.dataclass
class Point:
    source: str
    role: str                 # "fit" where FIT_PLAN fits a constant on it, else "held out"
    design: str
    batch: int
    tree: int
    prefix: int
    measured_s: float
    nsplit: int               # what the launcher chose (the row's `splits`), 0 when none


def measured_points(root=ROOT):
    out = []
    for rel, _, designs in MEASURED:
        with open(os.path.join(root, "docs", "results", rel), encoding="utf-8") as f:
            run = Run(json.load(f))
        for r in run.rows:
            if r.design not in designs or r.dims.get("H") != HEADS or r.variant:
                continue
            out.append(Point(rel.split("/")[0], "held out", r.design, r.dims["B"], r.dims["T"], r.dims["P"],
                             r.median, int(r.raw.get("splits") or 0)))
    for _, design, which in FIT_PLAN:
        for p in _fit_points(out, design, which):
            p.role = "fit"
    return out


def point_prediction(p, fit=FIT):
    d = DESIGNS[p.design]
    return predict(d, CHIPS["h200"], p.batch, p.tree, p.prefix, p.nsplit or None, fit)


def errors(points, fit=FIT):
    return [(p, point_prediction(p, fit).seconds / p.measured_s - 1.0) for p in points]


# ---------------------------------------------------------------------------------------------
# Fitting (--fit): coordinate search on the squared log error, per the sets in FIT_PLAN.
# ---------------------------------------------------------------------------------------------

FIT_PLAN = (
    # (constants, design, which measured points)
    (("LAUNCH_US", "START_US", "MERGE_CLK", "SERIAL_SM120"), "cuda-sm120", "h200-budget-study"),
    (("FLAT_LOAD_US", "FLAT_LOAD_BUSY_US"), "cuda-flat", "h200-budget-study"),
    (("SERIAL_W32",), "cuda-sm120-w32", ("h200-replay", 8, 65, 131072)),
    (("SERIAL_SM90",), "cuda-sm90", ("h200-sm90", 8, 256, 16384)),
)


def _fit_points(points, design, which):
    if isinstance(which, str):
        return [p for p in points if p.design == design and p.source == which]
    src, b, t, pre = which
    return [p for p in points if p.design == design and p.source == src and (p.batch, p.tree, p.prefix) == (b, t, pre)]


# Where --fit starts (a coordinate search finds a local minimum, and LAUNCH_US and START_US trade
# against each other on single-wave shapes): FIT is the search's result from here.
FIT_START = {"LAUNCH_US": 4.0, "START_US": 4.0, "MERGE_CLK": 320.0, "SERIAL_SM120": 1700.0, "SERIAL_W32": 2600.0,
             "SERIAL_SM90": 3600.0, "FLAT_LOAD_US": 1.5, "FLAT_LOAD_BUSY_US": 0.3}


def fit_constants(points, fit=None):
    fit = dict(FIT_START if fit is None else fit)
    for names, design, which in FIT_PLAN:
        pts = _fit_points(points, design, which)

        def loss(f):
            return sum(math.log(point_prediction(p, f).seconds / p.measured_s) ** 2 for p in pts)

        for _ in range(40):
            moved = False
            for k in names:
                for step in (0.2, 0.05, 0.01):
                    for sgn in (1, -1):
                        trial = dict(fit)
                        trial[k] = max(0.0, fit[k] * (1 + sgn * step))
                        if loss(trial) < loss(fit) - 1e-12:
                            fit, moved = trial, True
            if not moved:
                break
    return fit


# ---------------------------------------------------------------------------------------------
# The restructured sm_120 tile of issue 25, as designs of the same stage model (predictions only).
# ---------------------------------------------------------------------------------------------


def _candidate(name, keys, qk, pv, q_shared, copies_rows, partial_split, plan, regs, overlap, note):
    """A 64-row, 8-warp tile of \\p keys keys per step. qk, pv: warp tiles (r, c); Q and K/V operands
    from shared memory where q_shared (else Q in registers, as today); P from shared memory when the
    P.V warp tile spans more rows than one softmax warp holds. copies_rows: K/V rows copied into
    shared memory per key (2 when V is read again for P.V). partial_split: warps that share one score
    warp tile by splitting its dims (their fp32 partials cross shared memory)."""
    m = 64
    f_qk, f_pv = 2.0 * m * keys * D_QK, 2.0 * m * keys * D_V
    x = 2 * 8 * qk[0] * qk[1] * 4 if partial_split > 1 else 0   # partials written and read
    x += 2 * m * keys * 2 if pv[0] > 16 else 0                   # P written and read as bf16
    stages = (Stage("load", smem=copies_rows * keys * ROW_BYTES, feed="smem"),
              Stage("scores", f_qk, operand_bytes(f_qk, qk[0], qk[1], a_shared=q_shared)),
              Stage("exchange", smem=x, feed="smem"),
              Stage("softmax"),
              Stage("pv", f_pv, operand_bytes(f_pv, pv[0], pv[1], a_shared=pv[0] > 16)))
    return Design(name, m, keys, 8, regs, sum(v for _, v in plan), True, True, "SERIAL_SM120", stages,
                  serial_scale=keys / 32, overlap=overlap, smem_plan=plan,
                  note=note)


def candidates():
    q64 = 64 * ROW_BYTES
    ring, info = 2 * 64 * 8, 128
    stages32 = ("K/V stages 2 x 32 keys", 2 * 32 * KV_PAD_ROW)
    out = []
    for overlap in (False, True):
        tag = "seesaw" if overlap else "lockstep"
        out += [
            _candidate(f"today's tile, {tag}", 32, (16, 32), (16, 256), False, 1, 2,
                       (stages32, ("partial scores", 8 * 16 * 32 * 4), ("visibility", 4096),
                        ("ring, info", 512 + info)),
                       255, overlap, "cuda-sm120: Q (72) + O (128) registers, 8 warps"),
            _candidate(f"32-row warps (w32), {tag}", 32, (32, 16), (32, 128), False, 1, 4,
                       (stages32, ("partials, P, rescale", 16384 + 2048 + 1024 + 512), ("visibility", 4096),
                        ("ring, info", 512 + info)),
                       255, overlap, "cuda-sm120-w32 idealised: its exchange at the rule's bytes and cuda-sm120's serial "
                       "cycles (the kernel as measured pays 2,421: 35% / 57% / 73% of the peaks)"),
        ]
    out += [
        _candidate("Q in shared, 32x32 / 32x128, 32-key stages, seesaw", 32, (32, 32), (32, 128), True, 1, 4,
                   (("Q", q64), ("K/V stages 2 x 32 keys", 2 * 32 * ROW_BYTES), ("P", 64 * 32 * 2),
                    ("partial scores", 8 * 32 * 32 * 4), ("visibility", 1024), ("ring, info", ring + info)),
                   200, True, "Q (72 KB) and two 32-key stages (72 KB) alone exceed 99 KB"),
        _candidate("Q in shared, 32x64 / 32x128, 64-key steps, K by 64-column parts, seesaw", 64, (32, 64),
                   (32, 128), True, 2, 4,
                   (("Q", q64), ("K/V ring 2 x 64 keys x 64 columns", 2 * 64 * 128), ("P", 64 * 64 * 2),
                    ("partial scores", 8 * 32 * 64 * 4), ("visibility", 1024), ("ring, info", ring + info)),
                   232, True, "64 x 64 scores are 2 warp tiles of 32 x 64: 8 warps split their dims and "
                   "exchange 64 KB of partials; V read again for P.V"),
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Reports.
# ---------------------------------------------------------------------------------------------


def _us(s):
    return f"{s * 1e6:.1f}"


def validation_rows(points, fit=FIT):
    rows = []
    for p, e in errors(points, fit):
        pr = point_prediction(p, fit)
        rows.append((p, pr, e))
    return rows


def summary_by_design(rows):
    out = {}
    for p, _, e in rows:
        out.setdefault((p.design, p.role), []).append(e)
    return out


def print_validation(points, fit=FIT, markdown=False):
    rows = validation_rows(points, fit)
    if markdown:
        # one table per measured run: a row per shape, a column per design (measured / model, error)
        for rel, what, designs in MEASURED:
            src = rel.split("/")[0]
            mine = [(p, pr, e) for p, pr, e in rows if p.source == src]
            shapes = sorted({(p.batch, p.tree, p.prefix) for p, _, _ in mine})
            names = [d for d in designs if any(p.design == d for p, _, _ in mine)]
            print(f"`{rel}` ({what}): measured µs / model µs (error); * = a point a constant was fitted on")
            print()
            print("| B | T | P | splits | " + " | ".join(names) + " |")
            print("|---:|---:|---:|---:|" + "---:|" * len(names))
            for shape in shapes:
                cells, ns = [], ""
                for name in names:
                    hit = [(p, pr, e) for p, pr, e in mine if p.design == name and (p.batch, p.tree, p.prefix) == shape]
                    if not hit:
                        cells.append("")
                        continue
                    p, pr, e = hit[0]
                    ns = ns or (str(pr.nsplit) if DESIGNS[name].splits else "")
                    star = "*" if p.role == "fit" and src != "h200-budget-study" else ""
                    cells.append(f"{_us(p.measured_s)} / {_us(pr.seconds)} ({e * 100:+.1f}%){star}")
                print(f"| {shape[0]} | {shape[1]} | {shape[2]} | {ns} | " + " | ".join(cells) + " |")
            print()
    else:
        for p, pr, e in rows:
            print(f"{p.design:15s} {p.source:18s} B={p.batch} T={p.tree:<4d} P={p.prefix:<6d} ns={pr.nsplit:<3d} "
                  f"measured {_us(p.measured_s):>8s} us  model {_us(pr.seconds):>8s} us  {e * 100:+6.1f}%")
        print()
    print("| design | points | set | median abs error | worst error | within 15% |" if markdown else "summary:")
    if markdown:
        print("|---|---:|---|---:|---:|---:|")
    for (design, role), es in sorted(summary_by_design(rows).items()):
        worst = max(es, key=abs)
        within = sum(abs(e) <= 0.15 for e in es)
        med = statistics.median(abs(e) for e in es)
        if markdown:
            print(f"| {design} | {len(es)} | {role} | {med * 100:.1f}% | {worst * 100:+.1f}% | {within} of {len(es)} |")
        else:
            print(f"  {design:15s} {role:9s} n={len(es):3d} median |err| {med * 100:5.1f}%  "
                  f"worst {worst * 100:+6.1f}%  "
                  f"within 15%: {within}/{len(es)}")
    return rows


def plan_agreement(points):
    """The replicated suggestNsplit against the splits each measured row records."""
    agree = total = 0
    for p in points:
        d = DESIGNS[p.design]
        if not d.splits or not p.nsplit:
            continue
        total += 1
        agree += suggest_nsplit(p.batch, p.tree, p.prefix, CHIPS["h200"].sms, d.rows, d.keys, d.plan_tile_s) == p.nsplit
    return agree, total


PREDICT_SHAPES = [(1, 17, 16384), (1, 65, 16384), (1, 256, 16384), (1, 1024, 16384), (8, 65, 16384),
                  (8, 256, 16384), (8, 65, 65536), (8, 256, 65536), (1, 17, 65536)]


def flops(batch, tree, prefix, heads=HEADS):
    return 2.0 * batch * heads * tree * (prefix + tree) * (D_QK + D_V)


def print_predictions(markdown=False, fit=FIT):
    chips = [CHIPS[k] for k in ("h200", "rtx-pro-6000", "rtx-5090")]
    if markdown:
        print("| design | B | T | P | " + " | ".join(f"{c.name} µs (TFLOP/s, % of mma.sync)" for c in chips) + " |")
        print("|---|---:|---:|---:|" + "---:|" * len(chips))
    for name in ("cuda-sm120", "cuda-sm120-w32", "cuda-flat"):
        d = DESIGNS[name]
        for b, t, pre in PREDICT_SHAPES:
            cells = []
            for c in chips:
                pr = predict(d, c, b, t, pre, fit=fit)
                tf = flops(b, t, pre) / pr.seconds / 1e12
                peak = c.mma_flop_clk * c.sms * c.clock_ghz * 1e9 / 1e12
                cells.append(f"{_us(pr.seconds)} ({tf:.0f}, {tf / peak * 100:.0f}%)")
            if markdown:
                print(f"| {name} | {b} | {t} | {pre} | " + " | ".join(cells) + " |")
            else:
                print(f"{name:15s} B={b} T={t:<4d} P={pre:<6d} " +
                      "  ".join(f"{c.key}: {x}" for c, x in zip(chips, cells)))


def print_stages(markdown=False, fit=FIT):
    chips = [CHIPS[k] for k in ("h200", "rtx-pro-6000", "rtx-5090")]
    if markdown:
        print("| design | stage | MFLOP | shared KB | " + " | ".join(f"{c.name} cycles" for c in chips) + " | what |")
        print("|---|---|---:|---:|" + "---:|" * len(chips) + "---|")
    for d in DESIGNS.values():
        for s in d.stages:
            cyc = []
            for c in chips:
                if s.name == "softmax":
                    cyc.append(f"{fit[d.serial]:.0f} (SERIAL)")
                elif s.mma == "wgmma" and not c.wgmma_flop_clk:
                    cyc.append("-")
                else:
                    cyc.append(f"{stage_cycles(s, c):.0f}")
            if markdown:
                print(f"| {d.name} | {s.name} | {s.flops / 1e6:.2f} | {s.smem / 1024:.1f} | " + " | ".join(cyc) +
                      f" | {s.note} |")
            else:
                print(f"{d.name:15s} {s.name:9s} {s.flops / 1e6:6.2f} MFLOP {s.smem / 1024:7.1f} KB  " + "  ".join(cyc))
        tiles = []
        for c in chips:
            per = blocks_per_sm(d, c)
            tiles.append(f"{tile_cycles(d, c, fit):.0f} ({per}/SM)" if per and not
                         (d.name == "cuda-sm90" and not c.wgmma_flop_clk) else "-")
        if markdown:
            print(f"| {d.name} | **tile** | {sum(s.flops for s in d.stages) / 1e6:.2f} | "
                  f"{sum(s.smem for s in d.stages) / 1024:.1f} | " + " | ".join(tiles) +
                  f" | {d.warps} warps, {d.regs} registers, {d.smem} B shared: {d.note} |")
        else:
            print(f"{d.name:15s} tile: " + "  ".join(tiles))


def tile_tflops(d, chip, fit=FIT):
    """TFLOP/s of the tile loop alone (every SM busy, no start, combine or launch)."""
    f = sum(st.flops for st in d.stages)
    return f / tile_cycles(d, chip, fit) * chip.sms * chip.clock_ghz * 1e9 / 1e12


def mma_peak_tflops(chip):
    return chip.mma_flop_clk * chip.sms * chip.clock_ghz * 1e9 / 1e12


def bound_of(d, chip, fit=FIT):
    parts = [stage_parts(s, chip) for s in d.stages]
    mma, smem = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if d.overlap:
        return "MMA" if mma >= smem else "shared memory"
    serial = fit[d.serial] * d.serial_scale
    by = {s.name: stage_parts(s, chip) for s in d.stages}
    stage_mma = sum(max(v) for k, v in by.items() if v[0] >= v[1] and v[0] > 0)
    stage_smem = sum(max(v) for k, v in by.items() if v[1] > v[0])
    top = max((stage_mma, "MMA"), (stage_smem, "shared memory"), (serial, "serial"))
    return f"{top[1]} ({top[0] / tile_cycles(d, chip, fit) * 100:.0f}%)"


def fits_sm120(d):
    return d.smem <= CHIPS["rtx-pro-6000"].smem_block


def print_candidates(markdown=False, fit=FIT):
    chips = [CHIPS[k] for k in ("h200", "rtx-pro-6000", "rtx-5090")]
    if markdown:
        print("| tile | shared memory | fits 99 KB | shared B per FLOP | " +
              " | ".join(f"{c.name}: tile loop TFLOP/s (% of mma.sync), largest part" for c in chips) + " | note |")
        print("|---|---:|---|---:|" + "---:|" * len(chips) + "---|")
    for d in candidates():
        cells = []
        for c in chips:
            if not blocks_per_sm(d, c):
                cells.append("does not fit")
                continue
            tf = tile_tflops(d, c, fit)
            cells.append(f"{tf:.0f} ({tf / mma_peak_tflops(c) * 100:.0f}%), {bound_of(d, c, fit)}")
        bpf = sum(st.smem for st in d.stages) / sum(st.flops for st in d.stages)
        fits = "yes" if fits_sm120(d) else "**no**"
        if markdown:
            print(f"| {d.name} | {d.smem / 1024:.1f} KB | {fits} | {bpf:.4f} | " + " | ".join(cells) + f" | {d.note} |")
        else:
            print(f"{d.name:62s} {d.smem / 1024:6.1f} KB fits={fits:6s} {bpf:.4f} B/FLOP  " + "  |  ".join(cells))


RESTRUCTURED = ("today's tile, seesaw", "32-row warps (w32), seesaw")
QSHARED_64 = "Q in shared, 32x64 / 32x128, 64-key steps, K by 64-column parts, seesaw"


def print_restructured(markdown=False, fit=FIT):
    """Whole-step predictions of the seesaw tiles (the launcher's plan, start, combine, launch)."""
    chips = [CHIPS[k] for k in ("h200", "rtx-pro-6000", "rtx-5090")]
    by = {d.name: d for d in candidates()}
    designs = [DESIGNS["cuda-sm120"]] + [by[n] for n in RESTRUCTURED]
    if markdown:
        print("| tile | B | T | P | " + " | ".join(f"{c.name} µs (% of mma.sync)" for c in chips) + " |")
        print("|---|---:|---:|---:|" + "---:|" * len(chips))
    for d in designs:
        for b, t, pre in PREDICT_SHAPES:
            cells = []
            for c in chips:
                if not blocks_per_sm(d, c):
                    cells.append("-")
                    continue
                pr = predict(d, c, b, t, pre, fit=fit)
                tf = flops(b, t, pre) / pr.seconds / 1e12
                cells.append(f"{_us(pr.seconds)} ({tf / mma_peak_tflops(c) * 100:.0f}%)")
            if markdown:
                print(f"| {d.name} | {b} | {t} | {pre} | " + " | ".join(cells) + " |")
            else:
                print(f"{d.name:62s} B={b} T={t:<4d} P={pre:<6d} " + "  ".join(cells))


def tested_rows(root=ROOT):
    """Per tested change and compare row: (design, B, T, P, predicted change, measured change), the
    prediction the model's ratio of the two designs' step times (each with the replicated plan) on
    the H200, the measurement the compare's change against cuda-sm120 in the same run. The shapes
    come from the compare's row fields (compare_builds.py --json), never from its labels."""
    h200, base = CHIPS["h200"], DESIGNS["cuda-sm120"]
    rows = []
    for d, rel, column in TESTED:
        with open(os.path.join(root, "docs", "results", rel), encoding="utf-8") as f:
            compare = json.load(f)
        for r in compare["rows"]:
            b, t, p = r["dims"]["B"], r["dims"]["T"], r["dims"]["P"]
            predicted = predict(d, h200, b, t, p).seconds / predict(base, h200, b, t, p).seconds - 1
            rows.append((d.name, b, t, p, predicted, r["change"][column]))
    return rows


def print_tested(markdown=False):
    rows = tested_rows()
    head = ("design", "B", "T", "P", "predicted change in step time", "measured change (same run)")
    body = [(n, b, t, f"{p // 1024}K", f"{pr * 100:+.1f}%", f"{me * 100:+.1f}%") for n, b, t, p, pr, me in rows]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in body:
            print("| " + " | ".join(str(x) for x in r) + " |")
    else:
        for r in body:
            print(*r)
    for name in sorted({r[0] for r in rows}):
        pr = [r[4] for r in rows if r[0] == name]
        me = [r[5] for r in rows if r[0] == name]
        print(f"\n{name}: predicted {min(pr) * 100:+.1f}..{max(pr) * 100:+.1f}%, "
              f"measured {min(me) * 100:+.1f}..{max(me) * 100:+.1f}% over {len(me)} shapes")


def print_chips(markdown=False):
    keys = ("sms", "clock_ghz", "mma_flop_clk", "wgmma_flop_clk", "ldsm_b_clk", "smem_b_clk", "smem_block",
            "regs_sm", "threads_sm", "dram_tbs", "l2_mb")
    if markdown:
        print("| chip | " + " | ".join(keys) + " |")
        print("|---|" + "---:|" * len(keys))
    for c in CHIPS.values():
        vals = []
        for k in keys:
            v = getattr(c, k)
            vals.append("-" if v == 0 else f"{v:.0f}" if isinstance(v, float) and v > 100 else
                        f"{v:.1f}" if k == "ldsm_b_clk" else f"{v:g}" if isinstance(v, float) else str(v))
        print(f"| {c.name} ({c.arch}) | " + " | ".join(vals) + " |" if markdown else f"{c.name}: " + ", ".join(
            f"{k}={v}" for k, v in zip(keys, vals)))


def write_figures(out_dir, fit=FIT, formats=("png",)):
    """Two figures (matplotlib, through experiments/plots/style.py): the model against every H200
    measurement, and cuda-sm120's tile split into its parts on each chip."""
    from plots import style
    points = measured_points()
    rows = validation_rows(points, fit)
    fig, axes, legend_ax = style.figure(1, 1, style.ONE_COLUMN_IN, 3.0, legend_rows=2)
    ax = axes[0][0]
    designs = [d for d in DESIGNS if any(p.design == d for p, _, _ in rows)]
    handles = []
    for name in designs:
        xs = [p.measured_s * 1e6 for p, _, _ in rows if p.design == name]
        ys = [pr.seconds * 1e6 for p, pr, _ in rows if p.design == name]
        handles.append(ax.scatter(xs, ys, s=14, color=style.design_colour(name), marker=style.design_marker(name),
                                  label=name, linewidths=0.4, edgecolors="white"))
    lo = min(p.measured_s for p, _, _ in rows) * 1e6 / 1.5
    hi = max(p.measured_s for p, _, _ in rows) * 1e6 * 1.5
    ax.plot([lo, hi], [lo, hi], color="#333333", linewidth=0.8)
    for k in (0.85, 1.15):
        ax.plot([lo, hi], [lo * k, hi * k], color="#999999", linewidth=0.6, linestyle="--")
    style.log_axis(ax, "x", [lo, hi])
    style.log_axis(ax, "y", [lo, hi])
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    style.panel_labels(fig, axes, "measured µs (H200)", "model µs")
    style.legend_strip(legend_ax, handles, designs, 2)
    out = style.save(fig, out_dir, "arch-model_validation", formats,
                     "Model against 138 committed H200 measurements; dashed: ±15%.")
    chips = [CHIPS[k] for k in ("h200", "rtx-pro-6000", "rtx-5090")]
    parts = (("tensor pipe", "#0072B2"), ("shared-memory feed beyond it", "#E69F00"),
             ("exchange + copies", "#009E73"), ("serial (softmax, barriers)", "#D55E00"))
    fig, axes, legend_ax = style.figure(1, 1, style.ONE_COLUMN_IN, 2.4, legend_rows=2)
    ax = axes[0][0]
    d = DESIGNS["cuda-sm120"]
    bars = []
    for i, c in enumerate(chips):
        by = {s.name: stage_parts(s, c) for s in d.stages}
        mma = by["scores"][0] + by["pv"][0]
        feed = max(by["scores"]) + max(by["pv"]) - mma
        other = sum(max(by[k]) for k in ("exchange", "load"))
        vals = (mma, feed, other, fit[d.serial])
        bottom = 0.0
        for (label, colour), v in zip(parts, vals):
            bars.append(ax.bar(i, v, bottom=bottom, color=colour, width=0.6, label=label))
            bottom += v
    ax.set_xticks(range(len(chips)))
    ax.set_xticklabels([c.name.replace("NVIDIA ", "").replace(" Blackwell", "") for c in chips])
    ax.set_ylabel("cycles per 32-key tile")
    style.legend_strip(legend_ax, bars[:len(parts)], [p[0] for p in parts], 2)
    out += style.save(fig, out_dir, "arch-model_sm120-tile", formats,
                      "cuda-sm120's KV tile per chip: H200 measured rates; RTX PRO 6000 and RTX 5090 predicted.")
    return out


# ---------------------------------------------------------------------------------------------
# Self-test: the arithmetic, checked against numbers worked out by hand from the kernels.
# ---------------------------------------------------------------------------------------------


def self_test():
    failures = []

    def check(what, got, want, tol=1e-9):
        if abs(got - want) > tol * max(1.0, abs(want)):
            failures.append(f"{what}: got {got}, want {want}")

    sm120, h200 = DESIGNS["cuda-sm120"], CHIPS["h200"]
    stages = {s.name: s for s in sm120.stages}
    # 8 warps x (72 + 64) mma m16n8k16 (4096 FLOP each) per 32-key tile: docs/results/cuda-ptxas.md
    check("cuda-sm120 tile FLOPs", stages["scores"].flops + stages["pv"].flops, 8 * 136 * 4096)
    # ldmatrix bytes: 36 (scores) + 32 (P.V) x4 loads of 512 B per warp, 8 warps
    check("cuda-sm120 scores ldmatrix bytes", stages["scores"].smem, 8 * 36 * 512)
    check("cuda-sm120 P.V ldmatrix bytes", stages["pv"].smem, 8 * 32 * 512)
    # the bytes-per-FLOP rule: a 32 x 64 tile with both operands from shared reads 96 / 2048 B per FLOP
    check("rule 32x64", operand_bytes(2048.0, 32, 64), 96.0)
    check("rule 32x128", operand_bytes(4096.0, 32, 128), 160.0)
    # cuda-sm90: 216 KB of score operands per 64-key tile (its header), 80 KB for P.V
    s90 = {s.name: s for s in DESIGNS["cuda-sm90"].stages}
    check("cuda-sm90 score operand KB", s90["scores"].smem / 1024, 216.0, 0.03)
    check("cuda-sm90 P.V operand KB", s90["pv"].smem / 1024, 80.0, 0.03)
    # cuda-sm120-w32: 260 KB of shared traffic per 32 keys (its header)
    check("cuda-sm120-w32 shared KB", sum(s.smem for s in DESIGNS["cuda-sm120-w32"].stages) / 1024, 260.0, 0.02)
    # the measured ldmatrix feed: 375 TFLOP/s at 1/16 B per FLOP over 132 SMs at 1.98 GHz
    check("H200 ldmatrix feed B/clk", h200.ldsm_b_clk, 375e12 / 16 / (132 * 1.98e9))
    # occupancy: 255 registers x 256 threads fill the register file; cuda-flat fits twice on the H200
    check("cuda-sm120 blocks/SM H200", blocks_per_sm(sm120, h200), 1)
    check("cuda-flat blocks/SM H200", blocks_per_sm(DESIGNS["cuda-flat"], h200), 2)
    check("cuda-flat blocks/SM sm_120", blocks_per_sm(DESIGNS["cuda-flat"], CHIPS["rtx-pro-6000"]), 1)
    check("cuda-sm90 blocks/SM sm_120", blocks_per_sm(DESIGNS["cuda-sm90"], CHIPS["rtx-pro-6000"]), 0)
    # suggestNsplit, replicated: splits recorded by the launcher in docs/results (designs table)
    for (b, t, p), ns in {(1, 17, 4096): 43, (1, 17, 65536): 44, (1, 65, 131072): 29, (8, 17, 4096): 5,
                          (8, 33, 65536): 13, (8, 65, 16384): 7, (8, 256, 16384): 1}.items():
        check(f"suggest_nsplit B={b} T={t} P={p}", suggest_nsplit(b, t, p, 132), ns)
    check("suggest_nsplit cuda-sm90 B=1 T=256", suggest_nsplit(1, 256, 16384, 132, 64, 64, 2.4e-6), 4)
    # the grid: B=1 T=17 (136 rows, 3 m-tiles), P=4096, 43 splits: chunk 96 keys = 3 tiles
    tiles = block_tiles(sm120, 1, 17, 4096, 43)
    check("blocks B=1 T=17 ns=43", len(tiles), 3 * 43)
    check("tiles of the first block", tiles[0], 3)
    check("tiles in all", sum(tiles), 3 * math.ceil(4113 / 32))  # every key of every m-tile once
    # list scheduling: 3 blocks of 1 s on 2 slots end at 2 s; in launch order
    check("makespan", makespan([1.0, 1.0, 1.0], 2), 2.0)
    check("makespan order", makespan([3.0, 1.0, 1.0, 1.0], 2), 3.0)
    # the candidates' footprints: the 32-key-stage one must be reported as not fitting 99 KB
    cands = candidates()
    by = {d.name: d for d in cands}
    check("candidate today fits", fits_sm120(by["today's tile, lockstep"]), True)
    check("candidate Q + 2 stages does not fit",
          fits_sm120(by["Q in shared, 32x32 / 32x128, 32-key stages, seesaw"]), False)
    check("candidate 32x64 does not fit", fits_sm120(by[QSHARED_64]), False)
    for name in RESTRUCTURED:
        check(f"{name} fits", fits_sm120(by[name]), True)
    # today's tile written as a candidate is the cuda-sm120 design, cycle for cycle, on every chip
    for c in CHIPS.values():
        check(f"today's tile = cuda-sm120 on {c.key}", tile_cycles(by["today's tile, lockstep"], c),
              tile_cycles(sm120, c))
    # the seesaw bound: a tile can go no faster than its MMAs at the chip's rate
    for d in cands:
        for c in CHIPS.values():
            if blocks_per_sm(d, c) and tile_tflops(d, c) > mma_peak_tflops(c) * (1 + 1e-9):
                failures.append(f"{d.name} on {c.key} beats the mma.sync peak")
    # the chip table against the measurements it cites: every run's mma.sync and ldmatrix peaks
    peaks = []
    for rel, _, _ in MEASURED:
        with open(os.path.join(ROOT, "docs", "results", rel), encoding="utf-8") as f:
            text = Run(json.load(f)).env.get("peaks", "")
        m = re.search(r"mma\.sync bf16 ([\d.]+) TFLOP/s.*?([\d.]+) TFLOP/s fed by ldmatrix\.x4 per 2 mma", text)
        if m:
            peaks.append((float(m.group(1)), float(m.group(2))))
    if not peaks:
        failures.append("no run states its mma.sync peaks")
    for mma, ldsm in peaks:
        if abs(mma / H200_MMA_TFLOPS - 1) > 0.03 or abs(ldsm / H200_LDSM_TFLOPS - 1) > 0.03:
            failures.append(f"chip table off a run's peaks: mma {mma}, ldmatrix {ldsm}")
    # one prediction by hand: B=8 T=256 P=16K, direct (1 split), 256 blocks of 520 tiles on 132 SMs
    pr = predict(sm120, h200, 8, 256, 16384, nsplit=1)
    tc = tile_cycles(sm120, h200)
    want = FIT["LAUNCH_US"] * 1e-6 + 2 * (FIT["START_US"] * 1e-6 + 520 * tc / 1.98e9)
    check("prediction B=8 T=256 P=16K", pr.seconds, want, 1e-9)
    # the validation the page reports: cuda-sm120, -w32 and cuda-sm90 within 15% of every H200 point,
    # cuda-flat (the baseline) within 15% at the median; the replicated plan gives the recorded splits
    points = measured_points()
    for (design, role), es in summary_by_design(validation_rows(points)).items():
        worst = max(abs(e) for e in es)
        if design != "cuda-flat" and worst > 0.15:
            failures.append(f"{design} ({role}): worst error {worst * 100:.1f}% over 15%")
        if statistics.median(abs(e) for e in es) > 0.15:
            failures.append(f"{design} ({role}): median error over 15%")
    # every tested change's compare is read (a reader that silently found no rows would hide it)
    read = {r[0] for r in tested_rows()}
    for d, rel, _ in TESTED:
        if d.name not in read:
            failures.append(f"{d.name}: no rows read from {rel}")
    agree, total = plan_agreement(points)
    if total < 90 or agree < total - 2:
        failures.append(f"suggest_nsplit replica: {agree} of {total} recorded splits")
    for f in failures:
        print("FAIL", f)
    print("self-test:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--validate", action="store_true", help="predicted vs measured on the H200 (docs/results)")
    ap.add_argument("--predict", action="store_true", help="predictions per chip (H200, RTX PRO 6000, RTX 5090)")
    ap.add_argument("--stages", action="store_true", help="per-stage FLOPs, shared bytes and cycles per chip")
    ap.add_argument("--candidates", action="store_true", help="the restructured sm_120 tiles of issue 25")
    ap.add_argument("--chips", action="store_true", help="the chip table")
    ap.add_argument("--tested", action="store_true",
                    help="changes built from the model and measured: predicted vs measured change")
    ap.add_argument("--fit", action="store_true", help="refit the H200 constants and print them")
    ap.add_argument("--markdown", action="store_true", help="tables as markdown (docs/results/arch-model.md)")
    ap.add_argument("--figures", metavar="DIR", help="write the page's figures (PNG) into DIR (needs matplotlib)")
    ap.add_argument("--self-test", action="store_true", help="check the model's arithmetic; exit 1 on a failure")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    fit = FIT
    points = measured_points()
    if a.fit:
        fit = fit_constants(points)
        print("fitted:", json.dumps({k: round(v, 3) for k, v in fit.items()}))
    if a.figures:
        for path in write_figures(a.figures, fit):
            print("wrote", path)
        return 0
    if not (a.validate or a.predict or a.stages or a.candidates or a.chips or a.tested):
        a.validate = a.predict = True
    if a.chips:
        print_chips(a.markdown)
    if a.stages:
        print_stages(a.markdown, fit)
    if a.validate:
        agree, total = plan_agreement(points)
        print(f"plan: the replicated suggestNsplit gives the recorded splits on {agree} of {total} rows\n")
        print_validation(points, fit, a.markdown)
    if a.predict:
        print_predictions(a.markdown, fit)
    if a.candidates:
        print_candidates(a.markdown, fit)
        print()
        print_restructured(a.markdown, fit)
    if a.tested:
        print_tested(a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
