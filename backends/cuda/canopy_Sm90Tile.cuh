/// \file canopy_Sm90Tile.cuh
/// \brief What cuda-sm90's tiles share (canopy_VerifyAttentionSm90.cu: bf16 products on bf16 or
/// dequantised FP8 stages; canopy_VerifyAttentionSm90Fp8Mma.cu: FP8 products): the 64 x 64 tile's
/// config, the producer warpgroup's register split, the named barriers and stage mbarriers, the
/// producer's row gather, the shared-memory window, where a compute thread sits, and the compute
/// warpgroups' mask + softmax and store stages. Compiled for sm_90a only.
#pragma once

#include "canopy_Sm90Ptx.cuh"
#include "canopy_VerifyAttentionKernel.cuh"

namespace canopy::cuda::Impl
{
struct Sm90Config
{
  static constexpr int WARPGROUPS = 2;
  static constexpr int THREADS = 128 * WARPGROUPS;
  static constexpr int WARPS = THREADS / 32;
  static constexpr int M_TILE = 64;                     ///< (node, head) rows: one wgmma M
  static constexpr int N_TILE = 64;                     ///< keys per K/V stage
  static constexpr int S_KEYS = N_TILE / WARPGROUPS;    ///< score columns per warpgroup (32)
  static constexpr int O_COLS = D_V / WARPGROUPS;       ///< output columns per warpgroup (256)
  static constexpr int O_REGS = O_COLS / 2;             ///< fp32 accumulators per thread (128)
  static constexpr int S_REGS = S_KEYS / 2;             ///< score accumulators per thread (16)
  static constexpr bool FOLD_HEADS = true;
  static constexpr int QK_CHUNKS = D_QK * 2 / 16;       ///< 16-byte chunks of a 576-wide row (72)
  static constexpr int K16_STEPS = D_QK / 16;           ///< wgmma k-steps of Q.K^T (36)
  static constexpr int PV_STEPS = N_TILE / 16;          ///< wgmma k-steps of P.V (4)
  static constexpr int LOAD_UNROLL = 8;
  static constexpr int BLOCK_BYTES = M_TILE * sm90::SWIZZLE_ROW_BYTES;  ///< one 64-column block of 64 rows
  static constexpr int ROWS_BYTES = (D_QK / 64) * BLOCK_BYTES;          ///< a 64 x 576 tile (72 KB)
  static constexpr int KV_STAGES = 2;
  static constexpr int P_BYTES = M_TILE * N_TILE * 2;   ///< P, bf16, one swizzled 64-column block
  static constexpr int XROW_BYTES = WARPGROUPS * M_TILE * 4;  ///< a float per (warpgroup, row)
  // 1 KB of visibility words: a 1024-node tree whole for H >= 8 (8 nodes x 16 words); H = 1 keeps a
  // 128-key window. What is left of the 227 KB after Q, two K/V stages and P.
  static constexpr int VIS_BYTES = 1024;
  static constexpr int VIS_WORDS = VIS_BYTES / 8;
  static constexpr int MAX_TILE_NODES = M_TILE;
  static constexpr int RING_BYTES = 2 * N_TILE * 8;
  static constexpr int INFO_BYTES = 128;
  static constexpr int BAR_BYTES = 3 * KV_STAGES * 8;  ///< mbarriers full, empty, half per stage (producer schedules only)
  /// The shared-memory plan, in this order. The wgmma operands start on 1024-byte swizzle atoms.
  struct Smem
  {
    static constexpr SmemRegion q{0, ROWS_BYTES};                     ///< Q tile, 9 swizzled blocks
    static constexpr SmemRegion kv = q.next(KV_STAGES * ROWS_BYTES);  ///< K/V stages (V = first 512 columns)
    static constexpr SmemRegion p = kv.next(P_BYTES);                 ///< P of the tile, both halves
    static constexpr SmemRegion xrow = p.next(XROW_BYTES);            ///< row maxima, then row sums
    static constexpr SmemRegion vis = xrow.next(VIS_BYTES);           ///< visibility window words
    static constexpr SmemRegion ring = vis.next(RING_BYTES);          ///< slot indices of the next two tiles
    static constexpr SmemRegion info = ring.next(INFO_BYTES);         ///< TileInfo
    static constexpr SmemRegion bars = info.next(BAR_BYTES);          ///< the producer hand-off's mbarriers
  };
  static constexpr int SMEM_BYTES = Smem::bars.end();
  /// Byte offset of row \p r, 16-byte chunk \p ch (0..71) in a swizzled 64 x 576 tile.
  __host__ __device__ static constexpr int qStageOffset(int r, int ch)
  {
    return (ch >> 3) * BLOCK_BYTES + sm90::swizzled(r, ch & 7);
  }
  static_assert(Smem::q.offset % 1024 == 0 && Smem::kv.offset % 1024 == 0 && Smem::p.offset % 1024 == 0 &&
                    ROWS_BYTES % 1024 == 0,
                "wgmma operands must start on 1024-byte swizzle atoms");
  static_assert(SMEM_BYTES <= 227 * 1024, "sm_90 opt-in shared-memory limit per block (227 KB)");
  static_assert(VIS_WORDS >= MAX_TILE_NODES, "every tile node needs one 64-bit word");
  static_assert(M_TILE == SM90_M_TILE && N_TILE == SM90_N_TILE, "suggestNsplit counts in this tile");
};

/// cuda-sm90's schedule: the same tile with a producer warpgroup beside the two compute ones. The
/// producer issues every K/V copy (and loads the slot indices), so the compute loop is wgmma,
/// softmax and exchanges only; the stages are handed over by mbarriers instead of a CTA barrier per
/// tile: full[s] (each producer thread arrives once its copies into stage s have landed and are
/// fenced for wgmma) and empty[s] (each of the 8 compute warps arrives after its P.V of stage s).
/// Registers: 384 threads launch with 168 each (64K / 384); the producer gives all but
/// PRODUCER_REGS back (setmaxnreg) and the compute warpgroups take COMPUTE_REGS, above the 196
/// cuda-sm90 needs: 128 x 72 + 256 x 216 = 64,512 of 65,536 (a producer at 40 or 56 spilled its
/// unrolled row addresses).
struct Sm90ProducerConfig : Sm90Config
{
  static constexpr int PRODUCER_THREADS = 128;
  static constexpr bool READS_FP8 = true;  ///< its producer converts FP8 pools (Fp8TileWriter)
  static constexpr int PRODUCER_REGS = 72;
  static constexpr int COMPUTE_REGS = 216;
  /// An FP8 pool's producer holds its rows in registers (Fp8TileWriter), fp8-mma's the pieces of its
  /// V^T transpose: they take 16 more (at 72 a batch of 4 spilled, and the transpose unrolled by 2;
  /// the compute warpgroups need 196, docs/results/cuda-sm90.md).
  static constexpr int FP8_PRODUCER_REGS = 88;
  static constexpr int FP8_COMPUTE_REGS = 208;
  static constexpr int FULL_ARRIVALS = PRODUCER_THREADS;
  static constexpr int EMPTY_ARRIVALS = THREADS / 32;
  static constexpr int ROWS_PER_WARP = N_TILE / (PRODUCER_THREADS / 32);  ///< 16 rows of a stage per producer warp
  /// setmaxnreg moves registers within what the CTA was launched with (384 x 168): the compute
  /// warpgroups can take only what the producer gives back (a producer at 80 left them waiting forever).
  static constexpr int LAUNCH_REGS = 65536 / (THREADS + PRODUCER_THREADS) / 8 * 8;
  static_assert(PRODUCER_REGS * PRODUCER_THREADS + COMPUTE_REGS * THREADS <= LAUNCH_REGS * (THREADS + PRODUCER_THREADS),
                "register file");
  static_assert(FP8_PRODUCER_REGS * PRODUCER_THREADS + FP8_COMPUTE_REGS * THREADS <=
                    LAUNCH_REGS * (THREADS + PRODUCER_THREADS),
                "register file");
};

/// Named barriers of the tile loop (0 is __syncthreads); each counts the compute threads.
enum Sm90Barrier : int
{
  kRowMaxReady = 1,  ///< both warpgroups' row maxima of the tile are in xrow
  kProbsReady = 2,   ///< both halves of P are in shared memory (and fenced for wgmma)
};

/// Shared addresses of the hand-off's mbarriers: full[s] at 2 s, empty[s] at 2 s + 1, then half[s]
/// (cuda-sm90-c2: this CTA's half of stage s has landed) at 2 KV_STAGES + s.
struct StageBarriers
{
  uint32_t base;
  __device__ __forceinline__ uint32_t full(int s) const { return base + s * 16; }
  __device__ __forceinline__ uint32_t empty(int s) const { return base + s * 16 + 8; }
  __device__ __forceinline__ uint32_t half(int s) const { return base + 2 * 16 + s * 8; }
};

/// What a producer thread copies of the split positions [s0, s1): the slot of position pos
/// (prefix: kv_indices, tree: out_cache_loc; < 2^32, a host check) and the copies of its warp's
/// ROWS_PER_WARP rows of a tile (warp w: rows 16 w .. 16 w + 15; lane l: chunks l and l + 32 of each
/// row, and rope chunk 64 + l for l < 8; a row's slot comes by shuffle from the lane that loaded it).
struct ProducerCopies
{
  using Cfg = Sm90ProducerConfig;
  static constexpr int ROWS = Cfg::ROWS_PER_WARP;
  VerifyParams const &p;
  int P, s0, s1, kv0;
  int64_t qo0;
  int lane = threadIdx.x & 31;
  int row0 = ((threadIdx.x - Cfg::THREADS) >> 5) * ROWS;

  /// The slot of row row0 + lane of tile j (lanes >= ROWS repeat a row), 0 past the split.
  __device__ __forceinline__ uint32_t slotOf(int j) const
  {
    int const pos = s0 + j * Cfg::N_TILE + row0 + (lane & (ROWS - 1));
    if (pos >= s1)
      return 0u;
    return static_cast<uint32_t>(pos < P ? p.batch.kv_indices[kv0 + pos] : p.batch.out_cache_loc[qo0 + (pos - P)]);
  }
  /// This warp's rows of tile j into \p stage (rows past the split zero-filled), one commit group.
  __device__ __forceinline__ void issue(int j, uint32_t stage, uint32_t slot_l) const
  {
    char const *const pool = reinterpret_cast<char const *>(p.batch.kv_pool);
    uint32_t const row_bytes = static_cast<uint32_t>(2 * p.kv_row_stride);
    int const rows = s1 - s0 - j * Cfg::N_TILE - row0;
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
    {
      int const r = row0 + i;
      uint32_t const slot = __shfl_sync(0xffffffffu, slot_l, i);
      bool const ok = i < rows;
      char const *const src = pool + static_cast<uint64_t>(slot) * row_bytes;
      cpAsync16(stage + Cfg::qStageOffset(r, lane), src + lane * 16, ok);
      cpAsync16(stage + Cfg::qStageOffset(r, lane + 32), src + (lane + 32) * 16, ok);
      if (lane < Cfg::QK_CHUNKS - 64)
        cpAsync16(stage + Cfg::qStageOffset(r, lane + 64), src + (lane + 64) * 16, ok);
    }
    cpAsyncCommit();
  }
};

/// The shared-memory window of a tile kernel with config \p Cfg (its Cfg::Smem plan): the base
/// address in a uniform register (warpUniform: every wgmma descriptor derives from it, so the
/// score loop builds them on the uniform datapath), the row-exchange floats, TileInfo and the
/// prologue's views. Traps unless the window starts on a 1024-byte swizzle atom, as the
/// descriptors assume (the dynamic shared window starts aligned).
template <class Cfg>
struct Sm90Window
{
  uint32_t base;
  float *xrow;
  TileInfo *info;
  TileSmem sm;
  __device__ explicit Sm90Window(unsigned char *smem)
      : base(sm90::warpUniform(smemAddr(smem))), xrow(smemAt<float>(smem, Cfg::Smem::xrow)),
        info(smemAt<TileInfo>(smem, Cfg::Smem::info)),
        sm{smemAt<uint64_t>(smem, Cfg::Smem::vis), smemAt<int64_t>(smem, Cfg::Smem::ring), info}
  {
    if (base % sm90::SWIZZLE_ATOM_BYTES != 0)
      __trap();
  }
  /// The shared address of region \p r.
  __device__ uint32_t at(SmemRegion r) const { return base + r.offset; }
};

/// Where a compute thread sits in the tile: warpgroup wg (score keys [32 wg, +32) of a KV tile,
/// output columns [256 wg, +256); through warpUniform, so that what derives from it stays
/// uniform), its warp's 16 rows from wrow, and its lane's accumulator rows wrow + g and
/// wrow + g + 8 (g = lane / 4) and column pairs t4 (lane % 4).
struct ComputeLane
{
  int wg, wrow, lane, g, t4;
  __device__ static ComputeLane of(int tid)
  {
    int const lane = tid & 31;
    return {sm90::warpUniform(tid >> 7), ((tid >> 5) & 3) * 16, lane, lane >> 2, lane & 3};
  }
  /// The visibility word offset of the thread's row wrow + g + 8 h of row tile info->mt, -1 for a
  /// row past the request.
  template <class Cfg>
  __device__ int visRow(VerifyParams const &p, TileInfo const volatile *info, int h) const
  {
    int const rr = info->mt * Cfg::M_TILE + wrow + g + h * 8;
    return rr < info->T * p.batch.num_heads ? (rr / p.batch.num_heads - info->node_lo) * info->vis_stride : -1;
  }
};

/// Stages mask and softmax of one warpgroup's 32 scores \p s of KV tile \p j (the m64n32 wgmma
/// layout). Mask, where the tile reaches the tree columns or the split's end: keys past the split
/// or outside the node's visible set get -inf. Softmax: row maxima over both warpgroups' keys
/// through \p xrow (max is exact, so both warpgroups derive the same state), \p s becomes this
/// warpgroup's weights exp2(s scale - m), \p row's sums take them, and \p o is rescaled when the
/// max moved.
template <class Cfg>
__device__ __forceinline__ void maskAndSoftmax(VerifyParams const &p, TileInfo const volatile *info, TileSmem const &sm,
                                               float *xrow, int j, ComputeLane const &me, float scale,
                                               float (&s)[Cfg::S_REGS], SoftmaxState (&row)[2],
                                               float (&o)[Cfg::O_REGS])
{
  int const col0 = info->s0 + j * Cfg::N_TILE;
  if (info->P - col0 < Cfg::N_TILE || info->s1 - col0 < Cfg::N_TILE)
  {
    int const col = col0 + me.wg * Cfg::S_KEYS;
    uint32_t vm[2] = {0u, 0u};
    if (col < info->s1)
    {
      vm[0] = visibleWindow<32>(info, sm.vis, me.visRow<Cfg>(p, info, 0), col) >> (me.t4 * 2);
      vm[1] = visibleWindow<32>(info, sm.vis, me.visRow<Cfg>(p, info, 1), col) >> (me.t4 * 2);
    }
#pragma unroll
    for (int i = 0; i < Cfg::S_REGS; ++i)
      s[i] = (vm[(i >> 1) & 1] >> ((i >> 2) * 8 + (i & 1))) & 1u ? s[i] : NEG_INF;
  }

  float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
  for (int i = 0; i < Cfg::S_REGS; ++i)
    mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    if (me.t4 == 0)
      xrow[me.wg * Cfg::M_TILE + me.wrow + me.g + 8 * h] = mx[h];
  }
  namedBarrier(kRowMaxReady, Cfg::THREADS);
  float alpha[2], msub[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    mx[h] = fmaxf(mx[h], xrow[(1 - me.wg) * Cfg::M_TILE + me.wrow + me.g + 8 * h]) * scale;
    alpha[h] = row[h].advance(mx[h], msub[h]);
    row[h].l *= alpha[h];
  }
#pragma unroll
  for (int i = 0; i < Cfg::S_REGS; ++i)
  {
    int const h = (i >> 1) & 1;
    s[i] = fastExp2(fmaf(s[i], scale, -msub[h]));
    row[h].l += s[i];
  }
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
  {
#pragma unroll
    for (int i = 0; i < Cfg::O_REGS; ++i)
      o[i] *= alpha[(i >> 1) & 1];
  }
}

/// Stage store, after the last KV tile: row sums over both warpgroups' keys (added in the same
/// order by both), then each warpgroup's 256 output columns of its rows, O / l times \p kv_scale (a
/// one-scale FP8 pool's scale, else 1), as a split's partial or, with one split, the output.
template <class Cfg, class PartialT>
__device__ __forceinline__ void storeTile(VerifyParams const &p, TileInfo const volatile *info, float *xrow,
                                          ComputeLane const &me, float kv_scale, SoftmaxState (&row)[2],
                                          float const (&o)[Cfg::O_REGS])
{
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    row[h].l += __shfl_xor_sync(0xffffffffu, row[h].l, 1);
    row[h].l += __shfl_xor_sync(0xffffffffu, row[h].l, 2);
    if (me.t4 == 0)
      xrow[me.wg * Cfg::M_TILE + me.wrow + me.g + 8 * h] = row[h].l;
  }
  computeBarrier<Cfg>();
#pragma unroll
  for (int h = 0; h < 2; ++h)
  {
    if (me.visRow<Cfg>(p, info, h) < 0)
      continue;  // row past the request
    int const r = me.wrow + me.g + 8 * h;
    row[h].l = xrow[r] + xrow[Cfg::M_TILE + r];
    int64_t const gr = info->qo0 * p.batch.num_heads + info->mt * Cfg::M_TILE + r;
    float const inv = info->tree_too_big ? __int_as_float(0x7fc00000) : kv_scale / row[h].l;
    storeRow<PartialT, Cfg::O_COLS / 8>(p, p.nsplit == 1, gr, info->split, me.wg * Cfg::O_COLS + me.t4 * 2,
                                        Cfg::O_COLS / 8, inv, me.wg == 0 && me.t4 == 0, row[h],
                                        [&](int n, int e) { return o[n * 4 + h * 2 + e]; });
  }
}
} // namespace canopy::cuda::Impl
