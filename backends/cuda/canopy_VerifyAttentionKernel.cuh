/// \file canopy_VerifyAttentionKernel.cuh
/// \brief The verify-attention tile kernel shared by cuda-sm120 and cuda-flat (included by their
/// .cu files only): Q in registers, K/V tiles in shared memory, mma.sync m16n8k16 bf16 -> fp32,
/// online softmax in log2 units. The two designs differ in structure only (row folding, split-K,
/// whether V is a second load), so the measured gap between them is the structure, not the MMA code.
#pragma once

#include "canopy_SoftmaxState.cuh"
#include "canopy_VerifyAttentionCuda.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace canopy::cuda::Impl
{
constexpr float LOG2E = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_80+ instructions only: the same code is the sm_90 and the sm_120 cubin).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smemAddr(void const *p)
{
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte global->shared copy; with \p pred false nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cpAsync16(uint32_t dst, void const *src, bool pred)
{
  int const n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

/// 8-byte copy (one int64 slot index); zero-filled when \p pred is false.
__device__ __forceinline__ void cpAsync8(uint32_t dst, void const *src, bool pred)
{
  int const n = pred ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cpAsyncWait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// d += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mmaBf16(float (&d)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Barrier for \p count threads on named barrier \p id (0 is __syncthreads).
__device__ __forceinline__ void namedBarrier(int id, int count)
{
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/// Barrier ids of the tile kernels: 0 is __syncthreads (the whole CTA); row group rg exchanges its
/// partial score tiles on kRowGroupBarrier + rg, among its own warps only.
enum BarrierId : int
{
  kCtaBarrier = 0,
  kRowGroupBarrier = 1,
  kComputeBarrier = 15,  ///< the Cfg::THREADS compute threads of a CTA that also runs producer warps
};

/// Threads a tile kernel's CTA runs beside its Cfg::THREADS compute threads: warps that only
/// issue copies (Cfg::PRODUCER_THREADS, numbered after the compute threads). They pass the
/// prologue's CTA barrier and none of the compute stages' barriers.
template <class Cfg, class = void>
struct ProducerThreads
{
  static constexpr int value = 0;
};
template <class Cfg>
struct ProducerThreads<Cfg, std::void_t<decltype(Cfg::PRODUCER_THREADS)>>
{
  static constexpr int value = Cfg::PRODUCER_THREADS;
};
/// Block size of a tile kernel: its compute threads and its producer warps.
template <class Cfg>
constexpr int ctaThreads()
{
  return Cfg::THREADS + ProducerThreads<Cfg>::value;
}
/// The barrier of the compute threads: the whole CTA, or kComputeBarrier when producer warps run
/// beside them (and never arrive there).
template <class Cfg>
__device__ __forceinline__ void computeBarrier()
{
  if constexpr (ProducerThreads<Cfg>::value == 0)
    __syncthreads();
  else
    namedBarrier(kComputeBarrier, Cfg::THREADS);
}

/// Row group \p rg's exchange barrier; \p threads counts its warps' threads.
__device__ __forceinline__ void rowGroupBarrier(int rg, int threads) { namedBarrier(kRowGroupBarrier + rg, threads); }

/// What a row group with no live rows (the last tile of a request) does in place of a tile's
/// compute: its warps arrive at their own exchange barrier, waiting only for each other, so that
/// every warp of the CTA passes the same sequence of barriers. The hardware does not need it (the
/// CTA-wide barriers already order every stage reuse), but compute-sanitizer racecheck (CUDA 13.0)
/// reports WAR hazards between accesses two __syncthreads apart when only some warps pass a named
/// barrier: tests/cuda/racecheck/canopy_RacecheckNamedBarrier.cu reproduces that report, and the
/// cost here is one barrier per tile on warps that are otherwise idle.
__device__ __forceinline__ void idleRowGroupBarrier(int rg, int threads) { rowGroupBarrier(rg, threads); }

__device__ __forceinline__ uint32_t packBf16(float lo, float hi)
{
  __nv_bfloat162 const v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t const *>(&v);
}

template <class PartialT> struct PartialStore;
template <> struct PartialStore<float>
{
  __device__ static void pair(float *dst, float a, float b) { *reinterpret_cast<float2 *>(dst) = make_float2(a, b); }
};
template <> struct PartialStore<__nv_bfloat16>
{
  __device__ static void pair(__nv_bfloat16 *dst, float a, float b)
  {
    *reinterpret_cast<uint32_t *>(dst) = packBf16(a, b);
  }
};

// ---------------------------------------------------------------------------------------------
// Shared-memory plans. Each tile config names its regions as a chain of SmemRegion (`Smem`), each
// starting where the one before ends, rounded up to 16 bytes (cp.async and ldmatrix rows); the
// kernels take every pointer from a region (smemAt), and the plan's end is the launch's dynamic
// shared memory, checked against the sm_120 limit at compile time (fitsSm120).
// ---------------------------------------------------------------------------------------------
struct SmemRegion
{
  int offset;
  int bytes;
  constexpr int end() const { return offset + bytes; }
  /// The region of \p n bytes that follows this one.
  constexpr SmemRegion next(int n) const { return {(end() + 15) / 16 * 16, n}; }
};

/// Pointer to region \p r of the dynamic shared memory at \p base.
template <class T>
__device__ __forceinline__ T *smemAt(unsigned char *base, SmemRegion r)
{
  return reinterpret_cast<T *>(base + r.offset);
}

/// A plan's end within the 99 KB a block may use on sm_120 (opt-in limit, enforced on every GPU).
constexpr bool fitsSm120(SmemRegion last) { return last.end() <= static_cast<int>(SMEM_LIMIT); }

/// What a tile config does with the dead KV tiles of its split (markLiveTiles): run them masked
/// (kRun), or stop after the last live one (kTrim: free in the KV loop, which only gets a smaller
/// tile count). Skipping the dead tiles before it as well cost cuda-sm90 1-3% per tile where nothing
/// was dead (docs/results/dead-tiles.md).
enum class DeadTiles
{
  kRun,
  kTrim,
};

// ---------------------------------------------------------------------------------------------
// Tile configuration. ROW_GROUPS row groups of 16 (node, head) rows; KSPLIT warps per row group:
// warp (rg, kh) holds Q columns [576/KSPLIT kh, +576/KSPLIT) as A fragments and owns a 1/KSPLIT
// share of the 512 output columns as fp32 accumulators. The KSPLIT partial score tiles are summed
// through shared memory, so all warps of a row group hold the same scores and run the same online
// softmax. Q stays out of shared memory: a 64 x 576 bf16 Q tile (72 KB) plus two KV stages would
// not fit the 99 KB sm_120 limit. Registers per thread for KSPLIT = 2: 72 (Q) + 128 (O) + 16
// (scores) of the 255 a thread may hold when the CTA has 8 warps (2 per sub-partition). KSPLIT = 3
// (48 + 88) needs 12 warps for 64 rows, or 9 for 48, which caps a thread at 168 registers (the
// register file is split over 4 sub-partitions): ptxas spilled 508 B there.
// VIS_BYTES is the fixed visibility budget: the tile's nodes share it as equal rows of 64-bit words
// over one window of tree keys (see VisWindow); it does not depend on MAX_TREE.
// ---------------------------------------------------------------------------------------------
template <int ROW_GROUPS_, int KSPLIT_, bool FOLD_HEADS_, bool SEPARATE_V_, int VIS_BYTES_>
struct TileConfig
{
  static constexpr int ROW_GROUPS = ROW_GROUPS_;
  static constexpr int KSPLIT = KSPLIT_;
  static constexpr bool FOLD_HEADS = FOLD_HEADS_;  ///< rows = (node, head) of one request, else nodes of one head
  static constexpr bool SEPARATE_V = SEPARATE_V_;  ///< V tile loaded again, into its own buffer (flat)
  static constexpr int WARPS = KSPLIT * ROW_GROUPS;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int M_TILE = 16 * ROW_GROUPS;
  static constexpr int N_TILE = 32;                 ///< KV rows per tile
  static constexpr int K16_STEPS = D_QK / 16;       ///< k16 steps of a whole Q row (36)
  static constexpr int KSTEPS = K16_STEPS / KSPLIT;  ///< k16 steps of Q per warp
  static constexpr int PAIRS = (D_V / 16 + KSPLIT - 1) / KSPLIT;  ///< 16-column output blocks per warp (max)
  static constexpr int QK_CHUNKS = D_QK * 2 / 16;  ///< 16-byte chunks in a bf16 K row (72)
  static constexpr int LOAD_UNROLL = SEPARATE_V ? 4 : 8;  ///< KV copies unrolled per loop (register budget)
  static constexpr int V_CHUNKS = D_V * 2 / 16;    ///< 16-byte chunks in a bf16 V row (64)
  // Rows padded by 16 bytes: 1168 B = 73 chunks, odd, so the 8 row addresses of an ldmatrix
  // phase land in 8 different 16-byte bank groups (an unpadded 1152 B row puts all 8 in one).
  static constexpr int KV_ROW_BYTES = (D_QK + 8) * 2;
  static constexpr int V_ROW_BYTES = (D_V + 8) * 2;
  static constexpr int KV_STAGES = SEPARATE_V ? 1 : 2;
  /// The pipelined tiles stop after the split's last tile that a row of the CTA sees; the flat
  /// tile (SEPARATE_V, the SGLang-order baseline) runs every tile.
  static constexpr DeadTiles DEAD_TILES = SEPARATE_V ? DeadTiles::kRun : DeadTiles::kTrim;
  static constexpr int KV_STAGE_BYTES = N_TILE * KV_ROW_BYTES;
  static constexpr int Q_STAGE_BYTES = M_TILE * KV_ROW_BYTES;  // Q is staged through the KV stages once
  static constexpr int KV_BYTES = KV_STAGES * KV_STAGE_BYTES > Q_STAGE_BYTES ? KV_STAGES * KV_STAGE_BYTES : Q_STAGE_BYTES;
  static constexpr int V_BYTES = SEPARATE_V ? N_TILE * V_ROW_BYTES : 0;
  static constexpr int X_BYTES = WARPS * 16 * N_TILE * 4;  ///< partial scores exchanged within a row group
  static constexpr int MAX_TILE_NODES = M_TILE;           ///< H = 1 puts M_TILE nodes in a tile
  static constexpr int VIS_BYTES = VIS_BYTES_;            ///< visibility window words of the tile's nodes
  static constexpr int VIS_WORDS = VIS_BYTES / 8;
  static constexpr int RING_BYTES = 2 * N_TILE * 8;
  static constexpr int INFO_BYTES = 128;  ///< TileInfo
  /// The shared-memory plan, in this order.
  struct Smem
  {
    static constexpr SmemRegion kv{0, KV_BYTES};                 ///< K/V stages; the Q tile is staged here once
    static constexpr SmemRegion v = kv.next(V_BYTES);            ///< V tile loaded again (SEPARATE_V)
    static constexpr SmemRegion scores = v.next(X_BYTES);        ///< partial scores exchanged in a row group
    static constexpr SmemRegion vis = scores.next(VIS_BYTES);    ///< visibility window words
    static constexpr SmemRegion ring = vis.next(RING_BYTES);     ///< slot indices of the next two KV tiles
    static constexpr SmemRegion info = ring.next(INFO_BYTES);    ///< TileInfo
  };
  static constexpr int SMEM_BYTES = Smem::info.end();
  /// Byte offset of Q row \p r, 16-byte chunk \p ch in the Q staging (padded rows, as the K/V stages).
  __host__ __device__ static constexpr int qStageOffset(int r, int ch) { return r * KV_ROW_BYTES + ch * 16; }
  static_assert(fitsSm120(Smem::info), "tile exceeds the sm_120 99 KB shared-memory limit");
  static_assert(VIS_WORDS >= MAX_TILE_NODES, "every tile node needs one 64-bit word (a 32-key tile window)");
  static_assert(K16_STEPS % KSPLIT == 0, "KSPLIT must divide the 36 k16 steps of a 576-wide row");
};

/// Visits the 16-byte chunks of \p ROWS rows of \p CHUNKS chunks (72: a 576-wide K row, 64: a
/// 512-wide V row) split over the CTA: thread t takes column chunk t % 64 of rows t / 64 + k *
/// (THREADS / 64), and the 8 rope chunks of rows t / 8 + k * (THREADS / 8). Each thread keeps one
/// column and one base row, so the unrolled copies differ by immediate offsets only (a plain
/// c = tid + i * THREADS split kept ~18 per-copy offsets live across the KV loop).
template <int ROWS, int CHUNKS, int THREADS, int UNROLL = 8, class Fn>
__device__ __forceinline__ void forChunks(int tid, Fn &&fn)
{
  static_assert(THREADS % 64 == 0 && (ROWS * 64) % THREADS == 0 && (ROWS * 8) % THREADS == 0, "chunk split");
  // At most UNROLL copies unrolled: a fully unrolled 32-copy loop (the 64-thread flat CTA) hoisted
  // enough slot loads to push the accumulators into spills.
#pragma unroll UNROLL
  for (int k = 0; k < ROWS * 64 / THREADS; ++k)
    fn(tid / 64 + k * (THREADS / 64), tid % 64);
  if constexpr (CHUNKS == 72)
  {
#pragma unroll
    for (int k = 0; k < ROWS * 8 / THREADS; ++k)
      fn(tid / 8 + k * (THREADS / 8), 64 + tid % 8);
  }
}

/// Per-CTA scalars the KV loop needs now and then (load issue, masked tiles). Kept in shared
/// memory and re-read where used (volatile), so they do not hold registers across the PV loop:
/// with 200 accumulator registers live, such scalars were what pushed ptxas into spills (down
/// from 24 B to none on sm_120 and 8 B on sm_90, see docs/results/cuda-ptxas.md).
struct TileInfo
{
  int64_t qo0;
  int64_t mask0;  ///< mask_indptr[b] (full/tree layouts)
  uint64_t live_bits;  ///< markLiveTiles: bit i set when KV tile first + i holds a key a row of the CTA sees
  int kv0, P, T, s0, s1, node_lo, nodes, tree_too_big, mt, split;
  int vis_lo, vis_end, vis_stride;  ///< the visibility window in place (VisWindow)
};
static_assert(sizeof(TileInfo) <= 128, "TileInfo fits every tile's INFO_BYTES");

/// Shared-memory areas every tile kernel has besides its K/V stages.
struct TileSmem
{
  uint64_t *vis;   ///< visibility words: vis_stride per tile node, bit k = tree key vis_lo + k
  int64_t *ring;   ///< slot indices of the next two KV tiles
  TileInfo *info;
};

/// What the prologue leaves to the tile kernel.
struct TileSetup
{
  int rows_in_req, tile_row0, ntiles;
};

/// The window of tree keys [lo, end) whose visibility a CTA holds: for each of its tile nodes one
/// row of `stride` 64-bit words (bit k: tree key lo + k is the node or one of its ancestors).
/// Chosen as wide as the budget allows for this CTA's node count (all of a 1024-node tree for up to
/// VIS_WORDS / 16 nodes, i.e. H >= 4 in a 64-row tile), never wider than the split's tree keys.
/// When the KV loop reaches a tile whose tree keys end past `end`, the window is rebuilt from that
/// tile's first key (advanceVisibility), so a 32-key tile always lies in one window.
struct VisWindow
{
  int lo, end, stride;
};

/// \p lo: first tree key of the window; \p t_end: end of the split's tree keys (> lo).
template <class Cfg>
__device__ __forceinline__ VisWindow visWindowFor(int lo, int nodes, int t_end)
{
  int const budget = Cfg::VIS_WORDS / nodes;  // >= 1: nodes <= MAX_TILE_NODES <= VIS_WORDS
  int const need = (t_end - lo + 63) / 64;
  int const stride = need < budget ? need : budget;
  return {lo, lo + 64 * stride, stride};
}

/// Fills the window \p w's words of the CTA's \p nodes nodes (node_lo, +nodes) of a request
/// (first node at qo0, mask bytes at mask0); every thread of the CTA calls it. Parents layout: one
/// thread per node walks its ancestors down to w.lo (a parent that is not smaller than its child,
/// malformed input, stops the walk instead of looping), reading tree_parent through L1. Full/tree
/// layouts: one warp ballot per (node, 32 keys) over the node's mask bytes (coalesced byte loads),
/// UNROLL words per warp in flight. The caller's next __syncthreads publishes the words.
template <class Cfg, int UNROLL>
__device__ __forceinline__ void buildVisibility(VerifyParams const &p, uint64_t *vis, int64_t qo0, int64_t mask0,
                                                int P, int T, int node_lo, int nodes, VisWindow const w)
{
  int const tid = threadIdx.x;
  if (p.batch.mask_layout == MaskLayout::kParents)
  {
    int32_t const *parent = p.batch.tree_parent + qo0;
    for (int li = tid; li < nodes; li += Cfg::THREADS)
    {
      uint64_t *row = vis + li * w.stride;
      for (int k = 0; k < w.stride; ++k)
        row[k] = 0;
      for (int k = node_lo + li; k >= w.lo;)
      {
        if (k < w.end)
          row[(k - w.lo) >> 6] |= 1ull << ((k - w.lo) & 63);
        int const up = __ldg(parent + k);
        if (up >= k)
          break;
        k = up;
      }
    }
    return;
  }
  int const warp = tid >> 5, lane = tid & 31;
  int const halves = 2 * w.stride;  // 32-bit words per node row
  int const total = nodes * halves;
  int64_t const row_len = p.batch.mask_layout == MaskLayout::kFull ? static_cast<int64_t>(P) + T : T;
  int64_t const col0 = p.batch.mask_layout == MaskLayout::kFull ? P : 0;
  uint32_t *const words = reinterpret_cast<uint32_t *>(vis);  // little-endian halves of the 64-bit words
  for (int q0 = warp; q0 < total; q0 += Cfg::WARPS * UNROLL)
  {
    bool seen[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
    {
      int const q = q0 + u * Cfg::WARPS;
      int const j = w.lo + (q % halves) * 32 + lane;
      seen[u] = q < total && j < T &&
                p.batch.custom_mask[mask0 + static_cast<int64_t>(node_lo + q / halves) * row_len + col0 + j] != 0;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
    {
      int const q = q0 + u * Cfg::WARPS;
      uint32_t const bits = __ballot_sync(0xffffffffu, seen[u]);
      if (lane == 0 && q < total)
        words[q] = bits;
    }
  }
}

/// A tile config's DEAD_TILES (kRun when it names none).
template <class Cfg, class = void>
struct DeadTilesOf
{
  static constexpr DeadTiles value = DeadTiles::kRun;
};
template <class Cfg>
struct DeadTilesOf<Cfg, std::void_t<decltype(Cfg::DEAD_TILES)>>
{
  static constexpr DeadTiles value = Cfg::DEAD_TILES;
};

/// Dead KV tiles: a tile of tree keys none of which is visible to a node of the CTA. A node sees
/// only itself and its ancestors (parent[i] < i), so the keys past the CTA's last node are dead, and
/// a row tile of a 1024-node DDTree-like tree sees only a few of the tree's 16 tiles of 64 keys
/// (experiments/model/dead_tiles.py: stopping after the last live tile keeps 91% of the dense work
/// at P = 4K and 97% at P = 16K). Marks the tiles from the first visibility window, which must hold
/// every tree key of the split (else, or with more than 64 tree tiles, every tile stays live):
/// thread i < 64 tests tile `first` + i against every node's window row, one ballot per warp, ORed
/// into TileInfo::live_bits. Called by every thread of the CTA after the barrier that published the
/// window; returns the CTA-uniform end of its live tiles (the last live tile + 1, 0 when none is),
/// after a second barrier when it marked any.
template <class Cfg>
__device__ __forceinline__ int markLiveTiles(TileInfo *info, uint64_t const *vis, VisWindow const win, int P, int s0,
                                             int s1, int nodes, int ntiles)
{
  constexpr int N_TILE = Cfg::N_TILE;
  static_assert(N_TILE <= 64 && 64 % N_TILE == 0, "a tile's keys lie in at most two 64-bit window words");
  int const first = (P > s0 ? P - s0 : 0) / N_TILE;  // the first tile with a tree key
  if (win.end < s1 - P || ntiles - first > 64)
    return ntiles;  // every tile live
  int const tid = threadIdx.x;
  if (tid < 64)
  {
    int const j = first + tid;
    int const c0 = s0 + j * N_TILE;
    bool live = j < ntiles && c0 < P;  // a tile with prefix keys
    if (j < ntiles && !live)
    {
      // A tree tile: its first key's window bit (>= 0: the window starts at the split's first tree
      // key) and its keys (<= N_TILE).
      int const a = c0 - P - win.lo;
      int const n = (c0 + N_TILE < s1 ? c0 + N_TILE : s1) - c0;
      int const w = a >> 6, sh = a & 63;
      uint64_t const keep = n >= 64 ? ~0ull : (1ull << n) - 1ull;
      for (int li = 0; li < nodes && !live; ++li)
      {
        uint64_t const *row = vis + li * win.stride;
        uint64_t bits = row[w] >> sh;
        if (sh > 0 && w + 1 < win.stride)
          bits |= row[w + 1] << (64 - sh);
        live = (bits & keep) != 0;
      }
    }
    uint32_t const ballot = __ballot_sync(0xffffffffu, live);
    if ((tid & 31) == 0 && ballot != 0u)  // live_bits was zeroed before the window's barrier
      atomicOr(reinterpret_cast<unsigned long long *>(&info->live_bits), static_cast<unsigned long long>(ballot)
                                                                              << (tid & 32));
  }
  __syncthreads();
  uint64_t const bits = info->live_bits;
  return bits ? first + 64 - __clzll(static_cast<long long>(bits)) : first;
}

/// The key positions [s0, s1) of split \p split of a request's \p L keys: \p nsplit chunks of
/// whole N_TILE-key tiles; s0 >= s1 when the split is empty.
struct SplitKeys
{
  int s0, s1;
};
template <int N_TILE>
__device__ __forceinline__ SplitKeys splitKeys(int L, int nsplit, int split)
{
  int chunk = (L + nsplit - 1) / nsplit;
  chunk = (chunk + N_TILE - 1) / N_TILE * N_TILE;
  int const s0 = split * chunk;
  return {s0, s0 + chunk < L ? s0 + chunk : L};
}

/// beginTile's default first-copies hook: tiles without producer warps copy nothing there.
struct NoFirstCopies
{
  __device__ void operator()(int, int, int, int, int64_t) const {}
};

/// Prologue of the tile kernels: the CTA's rows and KV split, Q rows [tile_row0, +M_TILE) staged
/// at \p q_stage (zero rows past the request), TileInfo, and, where the split reaches the tree
/// columns, the first visibility window of the CTA's nodes (from the mask bytes or the ancestor
/// walk, while the Q copy is in flight), so the score loop tests a shared-memory bit instead of
/// carrying mask pointers and offsets in registers. Ends with one __syncthreads. Returns false
/// (CTA-uniform, before any barrier) when the CTA has nothing to do; an empty split of a live row
/// writes lse = -inf, which the combine weights 0 and reads no O of.
template <class Cfg, class FirstCopies = NoFirstCopies>
__device__ __forceinline__ bool beginTile(VerifyParams const &p, int b, int mt, int split, int head,
                                          uint32_t q_stage, TileSmem const &sm, TileSetup &st,
                                          FirstCopies &&first_copies = {})
{
  constexpr int THREADS = Cfg::THREADS;
  constexpr int M_TILE = Cfg::M_TILE;
  constexpr int N_TILE = Cfg::N_TILE;
  int const tid = threadIdx.x;
  if (b >= p.batch.batch_size)
    return false;
  // Request-local positions, rows and node ids are 32-bit (kv_indptr itself is int32); only
  // global row and slot offsets are 64-bit. Saves the registers the O accumulators need.
  int const H = p.batch.num_heads;
  int64_t const qo0 = p.batch.qo_indptr[b];
  int const T = static_cast<int>(p.batch.qo_indptr[b + 1] - qo0);
  int const rows_in_req = Cfg::FOLD_HEADS ? T * H : T;
  int const tile_row0 = mt * M_TILE;
  if (tile_row0 >= rows_in_req)
    return false;  // padded row or a tile past this request's tree: nothing to write
  int const kv0 = p.batch.kv_indptr[b];
  int const P = p.batch.kv_indptr[b + 1] - kv0;
  int const nsplit = Cfg::FOLD_HEADS ? p.nsplit : 1;
  SplitKeys const keys = splitKeys<N_TILE>(P + T, nsplit, split);
  int const s0 = keys.s0, s1 = keys.s1;
  auto globalRow = [&](int rr) -> int64_t { return Cfg::FOLD_HEADS ? qo0 * H + rr : (qo0 + rr) * H + head; };
  // A split with no key for these rows: lse = -inf, which the combine weights 0.
  auto emptySplit = [&] {
    for (int r = tid; r < M_TILE; r += THREADS)
    {
      int const rr = tile_row0 + r;
      if (rr < rows_in_req && globalRow(rr) < p.partial_rows)
        p.partial_lse[globalRow(rr) * nsplit + split] = NEG_INF;
    }
    return false;
  };
  if (s0 >= s1)
    return emptySplit();

  // Producer warps (numbered after the compute threads) issue the split's first KV tile instead
  // (first_copies(P, s0, s1, kv0, qo0): the split is known before TileInfo is published), so that
  // it lands while the Q copy does.
  bool const computes = ProducerThreads<Cfg>::value == 0 || tid < THREADS;
  if (computes)
  {
    forChunks<M_TILE, Cfg::QK_CHUNKS, THREADS>(tid, [&](int r, int ch) {
      int const rr = tile_row0 + r;
      bool const ok = rr < rows_in_req;
      uint16_t const *src = ok ? p.batch.q + globalRow(rr) * p.q_row_stride + ch * 8 : p.batch.q;
      cpAsync16(q_stage + Cfg::qStageOffset(r, ch), src, ok);
    });
    cpAsyncCommit();
  }
  else
    first_copies(P, s0, s1, kv0, qo0);

  int const node_lo = Cfg::FOLD_HEADS ? tile_row0 / H : tile_row0;
  int node_hi = Cfg::FOLD_HEADS ? (tile_row0 + M_TILE - 1) / H : tile_row0 + M_TILE - 1;
  node_hi = node_hi < T - 1 ? node_hi : T - 1;
  int const nodes = node_hi - node_lo + 1;
  bool const tree_too_big = T > MAX_TREE;  // outside the plan's bounds: outputs NaN, never silent
  // The first window starts at the split's first tree key; a split that never reaches the tree
  // (or a tree past the limit) gets an empty window that no tile runs past.
  bool const build_vis = s1 > P && !tree_too_big;
  VisWindow const win = build_vis ? visWindowFor<Cfg>(s0 > P ? s0 - P : 0, nodes, s1 - P) : VisWindow{0, 1 << 30, 0};
  int64_t const mask0 = build_vis && p.batch.mask_layout != MaskLayout::kParents ? p.batch.mask_indptr[b] : 0;
  if (tid == 0)
  {
    TileInfo *const info = sm.info;
    info->qo0 = qo0;
    info->mask0 = mask0;
    info->kv0 = kv0;
    info->P = P;
    info->T = T;
    info->s0 = s0;
    info->s1 = s1;
    info->node_lo = node_lo;
    info->nodes = nodes;
    info->tree_too_big = tree_too_big;
    info->mt = mt;
    info->split = split;
    info->vis_lo = win.lo;
    info->vis_end = win.end;
    info->vis_stride = win.stride;
    if constexpr (DeadTilesOf<Cfg>::value != DeadTiles::kRun)
      info->live_bits = 0;  // markLiveTiles ORs into it after the barrier below
  }
  // Built while the Q copy is in flight.
  if (build_vis && computes)
    buildVisibility<Cfg, 8>(p, sm.vis, qo0, mask0, P, T, node_lo, nodes, win);
  cpAsyncWait<0>();
  __syncthreads();
  st.rows_in_req = rows_in_req;
  st.tile_row0 = tile_row0;
  st.ntiles = (s1 - s0 + N_TILE - 1) / N_TILE;
  if constexpr (DeadTilesOf<Cfg>::value != DeadTiles::kRun)
    if (build_vis)
    {
      st.ntiles = markLiveTiles<Cfg>(sm.info, sm.vis, win, P, s0, s1, nodes, st.ntiles);
      if (st.ntiles == 0)
        return emptySplit();  // CTA-uniform: every thread read the same bits after the barrier
    }
  return true;
}

/// Whether the first window leaves some of the split's tree keys out, so the KV loop must call
/// advanceVisibility. Read once before the loop and kept as a CTA-uniform predicate: testing the
/// window bounds in shared memory on every tile measured 3.5% slower on the H200 (cuda-sm120, T <=
/// 256, any P: four shared loads and a branch ahead of each tile's MMAs); with the predicate it is
/// within 1.3% (B = 1) and 0.2% (B = 8) of the kernel without windows. Two copies of the loop, one
/// without rebuild code, measured 1.7% (cuda-sm120) and 14% (cuda-flat) slower than that; the w32
/// tile uses them (withWindowLoop). docs/results/cuda-big-trees.md.
__device__ __forceinline__ bool windowMoves(TileInfo const volatile *info)
{
  return info->vis_end < info->s1 - info->P;
}

/// Called by every compute thread at the top of KV tile \p j, after a barrier that ended all reads
/// of the window in place: when the tile's tree keys run past the window, builds the next one from
/// the tile's first key (a tree key: the first window covers every tile that starts in the prefix).
/// CTA-uniform; two more barriers when it rebuilds (words written, then the new bounds published),
/// which only CTAs with more nodes x tree keys than VIS_WORDS x 64 ever do.
template <class Cfg>
__device__ __forceinline__ void advanceVisibility(VerifyParams const &p, TileSmem const &sm, int j)
{
  TileInfo const volatile *info = sm.info;
  int const col0 = info->s0 + j * Cfg::N_TILE;
  int const s1 = info->s1;
  int const P = info->P;
  if ((col0 + Cfg::N_TILE < s1 ? col0 + Cfg::N_TILE : s1) - P <= info->vis_end)
    return;
  int const nodes = info->nodes;
  VisWindow const win = visWindowFor<Cfg>(col0 - P, nodes, s1 - P);
  buildVisibility<Cfg, 1>(p, sm.vis, info->qo0, info->mask0, P, info->T, info->node_lo, nodes, win);
  computeBarrier<Cfg>();  // every thread has tested the old bounds and written its words
  if (threadIdx.x == 0)
  {
    sm.info->vis_lo = win.lo;
    sm.info->vis_end = win.end;
    sm.info->vis_stride = win.stride;
  }
  computeBarrier<Cfg>();
}

/// Bit c set: key (split position) col + c, c < W <= 32, is visible to the row whose window
/// words start at vis[vr] (vr < 0: a row past the request, nothing visible): a prefix key or a
/// visible tree key, inside the split. Needs col < s1 and the window to hold the window's tree keys.
template <int W>
__device__ __forceinline__ uint32_t visibleWindow(TileInfo const volatile *info, uint64_t const *vis, int vr, int col)
{
  if (vr < 0)
    return 0u;
  constexpr uint32_t FULL = W == 32 ? ~0u : (1u << W) - 1u;
  int const pre = info->P - col;  // prefix keys in the window (may be <= 0 or >= W)
  int const lim = info->s1 - col; // keys of the split in the window (>= 1)
  uint32_t const in_split = lim >= W ? FULL : (1u << lim) - 1u;
  uint32_t const prefix = pre >= W ? FULL : pre <= 0 ? 0u : (1u << pre) - 1u;
  uint32_t tree = 0;
  if (pre < W && !info->tree_too_big)
  {
    int const start = -pre - info->vis_lo;  // window bit of key 0 (tree key -pre)
    if (start >= 0)
    {
      int const w = start >> 6, sh = start & 63;
      uint64_t bits = vis[vr + w] >> sh;
      if (sh > 64 - W && w + 1 < info->vis_stride)
        bits |= vis[vr + w + 1] << (64 - sh);
      tree = static_cast<uint32_t>(bits);
    }
    else
      tree = static_cast<uint32_t>(vis[vr] << -start);  // prefix keys first: vis_lo = 0, -start < W
  }
  return (prefix | tree) & in_split;
}

/// Issues the cp.async copies of KV tiles (N_TILE positions of the split) for the calling thread's
/// share. Positions index the concatenation prefix (kv_indices) + tree (out_cache_loc).
template <class Cfg>
struct KvLoader
{
  VerifyParams const &p;
  TileSmem const &sm;

  __device__ __forceinline__ int64_t const *indexPtr(int pos) const
  {
    TileInfo const volatile *info = sm.info;
    int const iP = info->P;
    return pos < iP ? p.batch.kv_indices + info->kv0 + pos : p.batch.out_cache_loc + info->qo0 + (pos - iP);
  }
  /// Slot indices of tile j into ring[j & 1], one iteration before its rows are requested, so the
  /// KV cp.async never waits on a dependent global load.
  __device__ __forceinline__ void issueIndices(int j) const
  {
    TileInfo const volatile *info = sm.info;
    int const tid = threadIdx.x;
    if (tid < Cfg::N_TILE)
    {
      int const pos = info->s0 + j * Cfg::N_TILE + tid;
      bool const ok = pos < info->s1;
      cpAsync8(smemAddr(sm.ring) + ((j & 1) * Cfg::N_TILE + tid) * 8, indexPtr(ok ? pos : info->s0), ok);
    }
  }
  /// Rows of tile j, CHUNKS 16-byte chunks each (72: K, 64: V), to dst with ROW_BYTES per row;
  /// rows past the split are zero-filled.
  template <int CHUNKS, int ROW_BYTES>
  __device__ __forceinline__ void issueRows(int j, uint32_t dst) const
  {
    issueRowsAt<CHUNKS>(j, [dst](int r, int ch) { return dst + r * ROW_BYTES + ch * 16; });
  }
  /// As issueRows, with chunk (r, ch) copied to shared address \p at(r, ch): a stage layout of its
  /// own (the swizzled tiles of cuda-sm90).
  template <int CHUNKS, class At>
  __device__ __forceinline__ void issueRowsAt(int j, At &&at) const
  {
    TileInfo const volatile *info = sm.info;
    int64_t const *slots = sm.ring + (j & 1) * Cfg::N_TILE;
    int const rows = info->s1 - info->s0 - j * Cfg::N_TILE;
    // Slots are < 2^32 (checked on the host), so a row address is one 32 x 32 -> 64-bit
    // multiply-add instead of the 64-bit product (six instructions per copy in the first SASS).
    forChunks<Cfg::N_TILE, CHUNKS, Cfg::THREADS, Cfg::LOAD_UNROLL>(threadIdx.x, [&](int r, int ch) {
      bool const ok = r < rows;
      void const *src = reinterpret_cast<char const *>(p.batch.kv_pool) +
                        static_cast<uint64_t>(static_cast<uint32_t>(ok ? slots[r] : 0)) *
                            static_cast<uint32_t>(2 * p.kv_row_stride) +
                        ch * 16;
      cpAsync16(at(r, ch), src, ok);
    });
  }
  /// Tile 0's slot indices by plain loads (nothing to overlap them with yet).
  __device__ __forceinline__ void loadFirstIndices() const
  {
    TileInfo const volatile *info = sm.info;
    int const tid = threadIdx.x;
    if (tid < Cfg::N_TILE)
    {
      int const pos = info->s0 + tid;
      sm.ring[tid] = pos < info->s1 ? *indexPtr(pos) : 0;
    }
  }
};

/// The 2-stage K/V pipeline of the split-K tiles: tile j + 1's rows (and tile j + 2's slot
/// indices) are in flight while \p compute(j, stage address) runs on tile j. One __syncthreads per
/// tile frees the stage the next copy overwrites.
template <class Cfg, class Compute>
__device__ __forceinline__ void pipelineKV(KvLoader<Cfg> const &ld, int ntiles, uint32_t kv_base, Compute &&compute)
{
  ld.loadFirstIndices();
  __syncthreads();
  ld.template issueRows<Cfg::QK_CHUNKS, Cfg::KV_ROW_BYTES>(0, kv_base);
  if (ntiles > 1)
    ld.issueIndices(1);
  cpAsyncCommit();
  bool const moves = windowMoves(ld.sm.info);
  for (int j = 0; j < ntiles; ++j)
  {
    cpAsyncWait<0>();
    __syncthreads();
    if (j + 1 < ntiles)
    {
      ld.template issueRows<Cfg::QK_CHUNKS, Cfg::KV_ROW_BYTES>(j + 1, kv_base + ((j + 1) & 1) * Cfg::KV_STAGE_BYTES);
      if (j + 2 < ntiles)
        ld.issueIndices(j + 2);
    }
    cpAsyncCommit();
    if (moves)
      advanceVisibility<Cfg>(ld.p, ld.sm, j);
    compute(j, kv_base + (j & 1) * Cfg::KV_STAGE_BYTES);
  }
}

/// Writes the calling thread's share of one output row: 8-column blocks n < \p live (of at most
/// NBLK) at columns col + 8 n, values val(n, 0) and val(n, 1) times \p inv. \p direct: bf16 into
/// `out`; otherwise this split's partial (O normalised by its own sum) and, from \p lse_writer,
/// the row's lse (log2 units, \p row), for the combine kernel.
template <class PartialT, int NBLK, class Val>
__device__ __forceinline__ void storeRow(VerifyParams const &p, bool direct, int64_t gr, int split, int col, int live,
                                         float inv, bool lse_writer, SoftmaxState const &row, Val &&val)
{
  if (direct)
  {
    uint16_t *orow = p.batch.out + gr * p.out_row_stride + col;
#pragma unroll
    for (int n = 0; n < NBLK; ++n)
      if (n < live)
        *reinterpret_cast<uint32_t *>(orow + n * 8) = packBf16(val(n, 0) * inv, val(n, 1) * inv);
  }
  else if (gr < p.partial_rows)
  {
    PartialT *prow = static_cast<PartialT *>(p.partial_o) + (gr * p.nsplit + split) * D_V + col;
#pragma unroll
    for (int n = 0; n < NBLK; ++n)
      if (n < live)
        PartialStore<PartialT>::pair(prow + n * 8, val(n, 0) * inv, val(n, 1) * inv);
    if (lse_writer)
      p.partial_lse[gr * p.nsplit + split] = row.lse();
  }
}

/// The calling thread's row group, K/V share and fragment row, re-read from threadIdx where
/// needed (S2R) rather than kept live.
template <class Cfg>
__device__ __forceinline__ void threadRole(int &rg, int &kh, int &g)
{
  int const warp = threadIdx.x >> 5;
  rg = warp % Cfg::ROW_GROUPS;
  kh = warp / Cfg::ROW_GROUPS;
  g = (threadIdx.x & 31) >> 2;
}

/// One CTA: rows [mt * M_TILE, +M_TILE) of request \p b (of head \p head when rows are not folded),
/// KV positions of split \p split. Positions index the concatenation prefix (kv_indices) + tree
/// (out_cache_loc); a split is a run of whole 32-row tiles.
template <class Cfg, class PartialT>
__device__ __forceinline__ void verifyTile(VerifyParams const &p, int b, int mt, int split, int head)
{
  constexpr int RG = Cfg::ROW_GROUPS;
  constexpr int M_TILE = Cfg::M_TILE;
  constexpr int N_TILE = Cfg::N_TILE;
  constexpr int KVB = Cfg::KV_ROW_BYTES;
  constexpr int VB = Cfg::SEPARATE_V ? Cfg::V_ROW_BYTES : Cfg::KV_ROW_BYTES;

  extern __shared__ __align__(16) unsigned char smem[];
  using Smem = typename Cfg::Smem;
  unsigned char *const v_smem = smemAt<unsigned char>(smem, Smem::v);
  float4 *const xbuf = smemAt<float4>(smem, Smem::scores);
  uint64_t *const vis = smemAt<uint64_t>(smem, Smem::vis);
  int64_t *const ring = smemAt<int64_t>(smem, Smem::ring);
  TileInfo *const info_w = smemAt<TileInfo>(smem, Smem::info);
  TileInfo const volatile *const info = info_w;

  int const tid = threadIdx.x;
  int const warp = tid >> 5, lane = tid & 31, t4 = lane & 3;
  int const rg = warp % RG, kh = warp / RG;
  constexpr int KS = Cfg::KSPLIT;
  constexpr int PAIRS = Cfg::PAIRS;

  TileSmem const sm{vis, ring, info_w};
  TileSetup st;
  uint32_t const kv_base = smemAddr(smemAt<unsigned char>(smem, Smem::kv));
  if (!beginTile<Cfg>(p, b, mt, split, head, kv_base, sm, st))
    return;
  int const tile_row0 = st.tile_row0, rows_in_req = st.rows_in_req;

  uint32_t qf[Cfg::KSTEPS][4];
#pragma unroll
  for (int ks = 0; ks < Cfg::KSTEPS; ++ks)
  {
    int const k0 = (kh * Cfg::KSTEPS + ks) * 16;
    ldmatrixX4(qf[ks], kv_base + (rg * 16 + (lane & 15)) * KVB + (k0 + (lane >> 4) * 8) * 2);
  }
  __syncthreads();  // Q staging is free for KV tiles

  // Per-thread rows: g and g + 8 of the warp's row group.
  bool const rg_valid = tile_row0 + rg * 16 < rows_in_req;
  // Visibility word offset of the thread's row g + 8h; -1 for rows past the request. Recomputed
  // where needed (masked tiles, epilogue) instead of held in registers through the loop.
  auto visRow = [&](int h) -> int {
    int rg_, kh_, g_;
    threadRole<Cfg>(rg_, kh_, g_);
    int const rr = info->mt * M_TILE + rg_ * 16 + g_ + h * 8;
    int const t = info->T;
    int const rows = Cfg::FOLD_HEADS ? t * p.batch.num_heads : t;
    return rr < rows ? ((Cfg::FOLD_HEADS ? rr / p.batch.num_heads : rr) - info->node_lo) * info->vis_stride : -1;
  };
  float const scale = p.batch.sm_scale * LOG2E;

  // Output columns of this warp: 16-column blocks [kh * PAIRS, kh * PAIRS + npairs).
  int const pair0 = kh * PAIRS;
  int const npairs = 32 - pair0 < PAIRS ? 32 - pair0 : PAIRS;
  float o[2 * PAIRS][4];
#pragma unroll
  for (int n = 0; n < 2 * PAIRS; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  SoftmaxState row[2];  // rows g and g + 8

  int const ntiles = st.ntiles;
  KvLoader<Cfg> const ld{p, sm};

  uint32_t pa[2][4];  // probabilities as bf16 A fragments (k = 32 KV rows = 2 k-steps)

  // The tile's stages for one row group (the pipelined loop and the separate-V loop run them in
  // this order): scores (this warp's KSTEPS k-steps of the 16 x 32 scores), exchange (the KSPLIT
  // warps' partial scores summed), mask (tree and split-end columns), softmax (online, -> pa), then
  // PV (accumulatePV, into o) and, after the KV loop, the store (storeRow).
  auto scores = [&](uint32_t kbuf, float (&s)[4][4]) {
#pragma unroll
    for (int n = 0; n < 4; ++n)
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Cfg::KSTEPS; ++ks)
    {
      int const k0 = (kh * Cfg::KSTEPS + ks) * 16;
#pragma unroll
      for (int np = 0; np < 2; ++np)
      {
        uint32_t bf[4];
        ldmatrixX4(bf, kbuf + ((np * 2 + (lane >> 4)) * 8 + (lane & 7)) * KVB + (k0 + ((lane >> 3) & 1) * 8) * 2);
        mmaBf16(s[np * 2], qf[ks], bf[0], bf[1]);
        mmaBf16(s[np * 2 + 1], qf[ks], bf[2], bf[3]);
      }
    }
  };
  auto exchangeScores = [&](float (&s)[4][4]) {
    // Sum the KSPLIT partial scores in the same order (warp 0's + warp 1's + ...) in every warp of
    // the row group, so all of them hold bit-identical scores and softmax state.
    float4 *mine = xbuf + warp * 4 * 32;
#pragma unroll
    for (int n = 0; n < 4; ++n)
      mine[n * 32 + lane] = make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
    rowGroupBarrier(rg, 32 * KS);
#pragma unroll
    for (int n = 0; n < 4; ++n)
    {
      // The warp's own term comes from its registers (the same value it stored).
      float4 acc = kh == 0 ? make_float4(s[n][0], s[n][1], s[n][2], s[n][3]) : xbuf[rg * 4 * 32 + n * 32 + lane];
#pragma unroll
      for (int k = 1; k < KS; ++k)
      {
        float4 const x =
            kh == k ? make_float4(s[n][0], s[n][1], s[n][2], s[n][3]) : xbuf[(k * RG + rg) * 4 * 32 + n * 32 + lane];
        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
      }
      s[n][0] = acc.x, s[n][1] = acc.y, s[n][2] = acc.z, s[n][3] = acc.w;
    }
  };
  auto maskScores = [&](int j, float (&s)[4][4]) {
    int const col0 = info->s0 + j * N_TILE;
    // Masks only where the tile reaches the tree columns or the split's end.
    if (info->P - col0 < N_TILE || info->s1 - col0 < N_TILE)
    {
      // One 32-bit window per row, shifted by this thread's column offset once, so each score
      // tests a constant bit. Two shared loads per row instead of one per score keep the
      // temporaries of the masked tiles from pushing the 200 accumulator registers into spills.
      uint32_t const vm[2] = {visibleWindow<32>(info, vis, visRow(0), col0) >> (t4 * 2),
                              visibleWindow<32>(info, vis, visRow(1), col0) >> (t4 * 2)};
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[n][e] = (vm[e >> 1] >> (n * 8 + (e & 1))) & 1u ? s[n][e] : NEG_INF;
    }
  };
  auto softmaxToP = [&](float (&s)[4][4]) {
    // Scores stay unscaled: scale > 0 keeps the max where it is, and the scale is folded into
    // the exponent's FFMA below (16 multiplies per tile fewer).
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int n = 0; n < 4; ++n)
    {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float alpha[2], msub[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
    {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      mx[h] *= scale;  // log2 units from here on (-inf stays -inf)
      alpha[h] = row[h].advance(mx[h], msub[h]);
      row[h].l *= alpha[h];
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
    {
      s[n][0] = fastExp2(fmaf(s[n][0], scale, -msub[0]));
      s[n][1] = fastExp2(fmaf(s[n][1], scale, -msub[0]));
      s[n][2] = fastExp2(fmaf(s[n][2], scale, -msub[1]));
      s[n][3] = fastExp2(fmaf(s[n][3], scale, -msub[1]));
      row[0].l += s[n][0] + s[n][1];
      row[1].l += s[n][2] + s[n][3];
    }
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
    {
#pragma unroll
      for (int n = 0; n < 2 * PAIRS; ++n)
      {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
    {
      pa[kk][0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };
  auto scoresAndSoftmax = [&](int j, uint32_t kbuf) {
    float s[4][4];
    scores(kbuf, s);
    exchangeScores(s);
    maskScores(j, s);
    softmaxToP(s);
  };

  auto accumulatePV = [&](uint32_t vbuf) {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int np = 0; np < PAIRS; ++np)
      {
        // With KSPLIT dividing 32 every warp owns exactly PAIRS blocks: no run-time guard (a guard
        // here put a predicated WARPSYNC and an address rebuild around every pair in the SASS).
        if (32 % KS == 0 || np < npairs)
        {
          uint32_t vb[4];
          ldmatrixX4Trans(vb, vbuf + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * VB +
                                  ((pair0 + np) * 16 + (lane >> 4) * 8) * 2);
          mmaBf16(o[np * 2], pa[kk], vb[0], vb[1]);
          mmaBf16(o[np * 2 + 1], pa[kk], vb[2], vb[3]);
        }
      }
  };

  if constexpr (!Cfg::SEPARATE_V)
  {
    // Idle row groups run their own copy of the pipeline (same copies and barriers, no compute),
    // so the compute loop has no branch around its body: a branch there measured 0.8% slower.
    if (rg_valid)
      pipelineKV<Cfg>(ld, ntiles, kv_base, [&](int j, uint32_t buf) {
        scoresAndSoftmax(j, buf);
        accumulatePV(buf);
      });
    else
      pipelineKV<Cfg>(ld, ntiles, kv_base, [&](int, uint32_t) { idleRowGroupBarrier(rg, 32 * KS); });
  }
  else
  {
    // SGLang extend-kernel order: load this tile's slot indices, then K, then V as a second read of
    // the same rows; no prefetch across tiles.
    uint32_t const v_base = smemAddr(v_smem);
    bool const moves = windowMoves(info);
    for (int j = 0; j < ntiles; ++j)
    {
      __syncthreads();  // previous tile fully consumed
      if (moves)
        advanceVisibility<Cfg>(p, sm, j);
      if (tid < N_TILE)
      {
        int const pos = info->s0 + j * N_TILE + tid;
        ring[(j & 1) * N_TILE + tid] = pos < info->s1 ? *ld.indexPtr(pos) : 0;
      }
      __syncthreads();
      ld.template issueRows<Cfg::QK_CHUNKS, KVB>(j, kv_base);
      cpAsyncCommit();
      ld.template issueRows<Cfg::V_CHUNKS, Cfg::V_ROW_BYTES>(j, v_base);
      cpAsyncCommit();
      cpAsyncWait<1>();
      __syncthreads();
      if (rg_valid)
        scoresAndSoftmax(j, kv_base);
      else
        idleRowGroupBarrier(rg, 32 * KS);
      cpAsyncWait<0>();
      __syncthreads();
      if (rg_valid)
        accumulatePV(v_base);
    }
  }

  if (!rg_valid)
    return;
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    row[h].l += __shfl_xor_sync(0xffffffffu, row[h].l, 1);
    row[h].l += __shfl_xor_sync(0xffffffffu, row[h].l, 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    if (visRow(h) < 0)
      continue;  // row past the request
    // Row and flags re-derived from the block index and TileInfo rather than kept live in
    // registers through the KV loop.
    int rg_, kh_, g_;
    threadRole<Cfg>(rg_, kh_, g_);
    int const rr = info->mt * M_TILE + rg_ * 16 + g_ + h * 8;
    int64_t const qo = info->qo0;
    int64_t const gr = Cfg::FOLD_HEADS ? qo * p.batch.num_heads + rr : (qo + rr) * p.batch.num_heads + head;
    float const inv = info->tree_too_big ? __int_as_float(0x7fc00000) : 1.f / row[h].l;
    storeRow<PartialT, 2 * PAIRS>(p, p.nsplit == 1 || !Cfg::FOLD_HEADS, gr, info->split, kh_ * PAIRS * 16 + t4 * 2,
                                  32 % KS == 0 ? 2 * PAIRS : 2 * npairs, inv, kh_ == 0 && t4 == 0, row[h],
                                  [&](int n, int e) { return o[n][h * 2 + e]; });
  }
}
} // namespace canopy::cuda::Impl
