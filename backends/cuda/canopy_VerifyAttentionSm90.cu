/// \file canopy_VerifyAttentionSm90.cu
/// \brief cuda-sm90: the split-K verify tile for Hopper. Q, K/V and P live in 128-byte-swizzled
/// shared memory and feed wgmma directly (no ldmatrix, no Q fragments in registers); two compute
/// warpgroups share one 64-row tile: each computes the scores of half the keys of a 64-key tile,
/// they exchange row maxima, each writes its half of P, and each accumulates 256 of the 512 output
/// columns over all 64 keys. A third, producer warpgroup issues every K/V copy and hands the two
/// stages over through mbarriers (cuda-sm90-sync, kept for the ablation, has the compute warps
/// issue them between their score wgmma, with a CTA barrier per tile). Compiled for sm_90a only;
/// the split bookkeeping, visibility windows, partial stores and the combine are cuda-sm120's; the
/// tile's config, producer gather and mask, softmax and store stages are in canopy_Sm90Tile.cuh,
/// shared with the fp8-mma kernel (canopy_VerifyAttentionSm90Fp8Mma.cu).
///
/// Model per 64-row x 64-key tile (docs/results/cuda-sm90.md): 8.9 MFLOP (Q.K^T 4.7, P.V 4.2);
/// shared-memory reads by wgmma 216 KB for the scores (each warpgroup re-reads the 72 KB Q tile
/// against its 32 keys: m64n32 is operand-bound at 3 KB per 16 cycles) + 80 KB for P.V, plus 72 KB
/// of cp.async writes: ~2,900 cycles at 128 B/clk, against 2,180 at the dense wgmma rate, so the
/// tile is shared-memory bound near 75% of the GEMM peak if copies and softmax overlap perfectly.
/// Measured on the H200 (B=8 T=256 P=16K): ~5,100 cycles per tile (55% of the GEMM roofline);
/// without the producer ~6,700, of which an ablation put ~1,800 in the copies' issue. What is left
/// is the score wgmma (~2,300) and the softmax and exchanges serialised with it (~1,800).
#include "canopy_Fp8Convert.cuh"
#include "canopy_Sm90Tile.cuh"
#include "canopy_VerifyAttentionLaunch.cuh"

#include <mutex>
#include <type_traits>

namespace canopy::cuda
{
namespace Impl
{
/// cuda-sm90-c2: the same tile in clusters of two CTAs over consecutive row tiles of one request
/// and one split (the same KV rows). Where both have work, each CTA's producer gathers half of every
/// KV tile's rows with cp.async (warps 0-1, the 16-row pieces of cuda-sm90's producer), and once
/// they have landed one thread forwards them to the peer's stage with 9 bulk shared-to-shared copies
/// of 4 KB (rows of a 64-column block are contiguous), completed on the peer's full[s] by byte
/// count. So each SM gathers 36 KB from L2 per tile instead of 72 KB, at the price of 36 KB read and
/// 36 KB received through distributed shared memory. full[s] then completes on the forwarding
/// thread's expect_tx arrival (its own half landed) and the peer's bytes; half[s] collects the 64
/// gathering threads; empty[s] counts the compute warps of both CTAs, since either CTA's copies
/// overwrite both stages. Model and measurement: docs/results/cuda-sm90.md, "Cluster sharing".
struct Sm90PairConfig : Sm90ProducerConfig
{
  static constexpr bool READS_FP8 = false;
  static constexpr int MAX_CLUSTER = 2;
  static constexpr int HALF_ROWS = N_TILE / MAX_CLUSTER;             ///< rows of a tile each CTA gathers
  static constexpr int HALF_WARPS = HALF_ROWS / ROWS_PER_WARP;        ///< producer warps that gather them
  static constexpr int HALF_ARRIVALS = HALF_WARPS * 32;
  static constexpr int PIECE_BYTES = HALF_ROWS * sm90::SWIZZLE_ROW_BYTES;  ///< a block's half: one bulk copy
  static constexpr int HALF_BYTES = (D_QK / 64) * PIECE_BYTES;
  static_assert(HALF_ROWS % ROWS_PER_WARP == 0, "whole producer warps per half");
};

/// Whether the CTA pair of row tiles (mt & ~1, mt | 1) of request b has work in split \p split for
/// both: then they share their KV tiles; otherwise each CTA that has rows gathers alone.
__device__ __forceinline__ bool pairServes(VerifyParams const &p, int b, int mt, int split)
{
  using Cfg = Sm90PairConfig;
  if (b >= p.batch.batch_size)
    return false;
  int64_t const qo0 = p.batch.qo_indptr[b];
  int const T = static_cast<int>(p.batch.qo_indptr[b + 1] - qo0);
  if ((mt | 1) * Cfg::M_TILE >= T * p.batch.num_heads)
    return false;
  int const P = p.batch.kv_indptr[b + 1] - p.batch.kv_indptr[b];
  SplitKeys const keys = splitKeys<Cfg::N_TILE>(P + T, p.nsplit, split);
  return keys.s0 < keys.s1;
}

/// What a producer thread writes of an FP8 pool's tile (cuda-sm90 on fp8-e4m3, fp8-e5m2 and
/// fp8-e4m3-blockscaled pools, dequant numerics): the same rows as ProducerCopies (warp w: rows
/// 16 w .. 16 w + 15 of a tile), read into registers with 16-byte L2 loads, converted to bf16
/// (canopy_Fp8Convert.cuh) and stored into the swizzled stage the wgmma read, so the compute
/// warpgroups run exactly as on a bf16 pool. A row's latent part is 32 chunks of 16 FP8 values, one
/// per lane (a coalesced 512-byte read); its tail (one-scale: 4 FP8 rope chunks, in registers
/// before the first batch; block-scaled: 8 bf16 rope chunks, put in place by cp.async) is spread
/// over the warp. The rows go in batches of BATCH, the next batch's loads in flight while this one
/// converts. Lane c's two bf16 chunks 2c and 2c + 1 go out in the order (c & 4 ? odd first : even
/// first), so each quarter warp's 16-byte stores hit 8 distinct chunk columns of the swizzle.
/// Model per 64-key tile and producer warp: 9 KB loaded (half the bf16 gather), 18 KB stored, ~600
/// conversion instructions, and ROWS / BATCH load round trips in sequence, where the bf16 producer
/// has all its cp.async in flight at once. Measured (H100, docs/results/fp8-dequant.md): the round
/// trips bind, not the conversion: BATCH 4 is 1.21-1.35x faster than 2, 88 producer registers (a
/// batch of 4 double-buffered, no spills) another 1.08-1.25x, integer or conversion-pipe decoding
/// the same within 1.2%; the step still takes 1.25-1.70x the bf16 step.
template <KvDtype KV>
struct Fp8TileWriter
{
  using Cfg = Sm90ProducerConfig;
  static constexpr int ROWS = Cfg::ROWS_PER_WARP;
  static constexpr bool BLOCK_SCALED = KV == KvDtype::kFp8E4m3BlockScaled;
  static constexpr int ROW_BYTES = kvRowBytes(KV);
  static constexpr int LATENT_CHUNKS = D_LATENT / 16;                    ///< 16 FP8 values each: one per lane
  static constexpr int TAIL_CHUNKS = BLOCK_SCALED ? D_ROPE * 2 / 16 : D_ROPE / 16;  ///< rope chunks per row
  static constexpr int TAILS_PER_LANE = ROWS * TAIL_CHUNKS / 32;
  static constexpr int TAIL_AT = BLOCK_SCALED ? KV_BLOCKSCALED_ROPE_AT : D_LATENT;  ///< rope bytes in a row
  static constexpr int BATCH = 4;
  static_assert(LATENT_CHUNKS == 32 && ROWS % BATCH == 0 && ROWS * TAIL_CHUNKS % 32 == 0, "warp geometry");
  static_assert(ROW_BYTES % 16 == 0, "16-byte loads of every row");

  ProducerCopies const &rows;

  __device__ __forceinline__ char const *rowAt(uint32_t slot) const
  {
    return reinterpret_cast<char const *>(rows.p.batch.kv_pool_fp8) + static_cast<uint64_t>(slot) * ROW_BYTES;
  }
  /// The two bf16 chunks of FP8 chunk \p c of row \p r (chunks 2c, 2c + 1), in the conflict-free order.
  __device__ __forceinline__ void storePair(uint32_t stage, int r, int c, uint4 const &even, uint4 const &odd) const
  {
    bool const odd_first = c & 4;
    stShared16(stage + Cfg::qStageOffset(r, 2 * c + (odd_first ? 1 : 0)), odd_first ? odd : even);
    stShared16(stage + Cfg::qStageOffset(r, 2 * c + (odd_first ? 0 : 1)), odd_first ? even : odd);
  }
  /// Latent chunk `lane` of row i0 + b, b < BATCH (zeros past the split).
  __device__ __forceinline__ void loadLatent(int i0, int live, uint32_t slot_l, uint4 (&v)[BATCH]) const
  {
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
    {
      char const *const row = rowAt(__shfl_sync(0xffffffffu, slot_l, i0 + b));
      v[b] = i0 + b < live ? __ldcg(reinterpret_cast<uint4 const *>(row) + rows.lane) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  /// Block-scaled pools: the warp's 16 rows x 4 block scales, two a lane (lane l: row l % 16, blocks
  /// 2 (l / 16) and 2 (l / 16) + 1), loaded once a tile instead of one load per latent chunk; 1 past
  /// the split (its zero bytes stay zero).
  __device__ __forceinline__ float2 loadScales(int live, uint32_t slot_l) const
  {
    if constexpr (!BLOCK_SCALED)
      return make_float2(1.f, 1.f);
    int const i = rows.lane & (ROWS - 1);
    char const *const row = rowAt(__shfl_sync(0xffffffffu, slot_l, i));
    return i < live ? __ldcg(reinterpret_cast<float2 const *>(row + KV_BLOCKSCALED_SCALES_AT) + (rows.lane >> 4))
                    : make_float2(1.f, 1.f);
  }
  /// The scale of this lane's latent block (lane / 8) in row \p i, from loadScales' registers.
  __device__ __forceinline__ float scaleOf(float2 const &scales, int i) const
  {
    if constexpr (!BLOCK_SCALED)
      return 1.f;
    int const src = i + ROWS * (rows.lane >> 4);
    float const even = __shfl_sync(0xffffffffu, scales.x, src), odd = __shfl_sync(0xffffffffu, scales.y, src);
    return rows.lane >> 3 & 1 ? odd : even;
  }
  /// This warp's rows of tile \p j into \p stage (a bf16 stage: 64 rows x 72 swizzled chunks).
  __device__ __forceinline__ void write(int j, uint32_t stage, uint32_t slot_l) const
  {
    int const live = rows.s1 - rows.s0 - j * Cfg::N_TILE - rows.row0;  // rows of this warp before the split's end
    int const lane = rows.lane;
    // The tails first: their loads fly while the first latent batch's do. The block-scaled rope is
    // bf16 already: cp.async puts it in place (the caller waits for it before the stage is handed over).
    uint4 tail[BLOCK_SCALED ? 1 : TAILS_PER_LANE];
#pragma unroll
    for (int m = 0; m < TAILS_PER_LANE; ++m)
    {
      int const t = lane + 32 * m, i = t / TAIL_CHUNKS, q = t % TAIL_CHUNKS;
      char const *const src = rowAt(__shfl_sync(0xffffffffu, slot_l, i)) + TAIL_AT + 16 * q;
      if constexpr (BLOCK_SCALED)
        cpAsync16(stage + Cfg::qStageOffset(rows.row0 + i, D_LATENT / 8 + q), src, i < live);
      else
        tail[m] = i < live ? __ldcg(reinterpret_cast<uint4 const *>(src)) : make_uint4(0u, 0u, 0u, 0u);
    }
    if constexpr (BLOCK_SCALED)
      cpAsyncCommit();
    float2 const scales = loadScales(live, slot_l);
    uint4 cur[BATCH], next[BATCH];
    loadLatent(0, live, slot_l, cur);
    if constexpr (!BLOCK_SCALED)
      storeTails(stage, tail);  // waits for the tails while the first batch is in flight
    // Not unrolled: unrolled, the 16 rows' addresses were hoisted and spilled at the producer's 72 registers.
#pragma unroll 1
    for (int i0 = 0; i0 < ROWS; i0 += BATCH)
    {
      if (i0 + BATCH < ROWS)
        loadLatent(i0 + BATCH, live, slot_l, next);
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
      {
        uint4 even, odd;
        fp8x16ToBf16x16<KV>(cur[b], scaleOf(scales, i0 + b), even, odd);
        storePair(stage, rows.row0 + i0 + b, lane, even, odd);
      }
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
        cur[b] = next[b];
    }
  }
  /// The FP8 tails of this warp's rows (loaded by write() before the first latent batch) into \p stage.
  __device__ __forceinline__ void storeTails(uint32_t stage, uint4 const (&tail)[TAILS_PER_LANE]) const
  {
#pragma unroll
    for (int m = 0; m < TAILS_PER_LANE; ++m)
    {
      int const t = rows.lane + 32 * m;
      uint4 even, odd;
      fp8x16ToBf16x16<KV>(tail[m], 1.f, even, odd);
      storePair(stage, rows.row0 + t / TAIL_CHUNKS, LATENT_CHUNKS + t % TAIL_CHUNKS, even, odd);
    }
  }
};

/// The producer warpgroup of cuda-sm90: for each KV tile j, waits until stage j % 2 is empty
/// (the compute warps finished tile j - 2), copies the tile's 64 rows into it (ProducerCopies; an
/// FP8 pool's rows are converted on the way, Fp8TileWriter), waits for its copies, fences them for
/// wgmma and arrives on full[j % 2]. The next tile's slot
/// indices load while the copies land. Tile 0 was issued in the prologue, beside the Q copy
/// (beginTile's first-copies hook), so its copies have landed by the first iteration.
template <KvDtype KV>
__device__ __forceinline__ void produceTiles(VerifyParams const &p, TileInfo const volatile *info, uint32_t kv_base,
                                             StageBarriers const bars, int ntiles)
{
  using Cfg = Sm90ProducerConfig;
  ProducerCopies const copies{p, info->P, info->s0, info->s1, info->kv0, info->qo0};
  uint32_t slot_l = 0;
  for (int j = 0; j < ntiles; ++j)
  {
    int const s = j & 1;
    if (j >= 2)
      sm90::mbarrierWait(bars.empty(s), ((j >> 1) - 1) & 1);
    if (j > 0)
    {
      if constexpr (KV == KvDtype::kBf16)
        copies.issue(j, kv_base + s * Cfg::ROWS_BYTES, slot_l);
      else
        Fp8TileWriter<KV>{copies}.write(j, kv_base + s * Cfg::ROWS_BYTES, slot_l);
    }
    uint32_t const next = copies.slotOf(j + 1);
    if constexpr (KV == KvDtype::kBf16 || KV == KvDtype::kFp8E4m3BlockScaled)
      cpAsyncWait<0>();  // the copies (a block-scaled pool: its bf16 rope)
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.full(s));
    slot_l = next;
  }
}

/// The producer of a CTA pair (cuda-sm90-c2), warps 0-1 of the producer warpgroup: for each KV
/// tile j, waits until stage j % 2 is free in both CTAs (empty[s] counts the compute warps of both),
/// gathers this CTA's half of the tile (tile 0 went out in the prologue), waits for it, fences it for
/// the async proxy (wgmma here, the bulk copy to the peer) and arrives on half[s]; the first
/// producer thread then forwards the half to the peer's stage (9 bulk copies of PIECE_BYTES,
/// completing on the peer's full[s]) and arrives on full[s] expecting the peer's half in return.
__device__ __forceinline__ void producePairTiles(ProducerCopies const &copies, uint32_t kv_base, StageBarriers const bars,
                                                 int ntiles, uint32_t rank)
{
  using Cfg = Sm90PairConfig;
  bool const forwards = threadIdx.x == Cfg::THREADS;
  uint32_t const peer = rank ^ 1u;
  uint32_t const half_off = rank * Cfg::PIECE_BYTES;
  uint32_t slot_l = 0;
  for (int j = 0; j < ntiles; ++j)
  {
    int const s = j & 1;
    uint32_t const stage = kv_base + s * Cfg::ROWS_BYTES;
    if (j >= 2)
      sm90::mbarrierWait<true>(bars.empty(s), ((j >> 1) - 1) & 1);
    if (j > 0)
      copies.issue(j, stage, slot_l);
    uint32_t const next = copies.slotOf(j + 1);
    cpAsyncWait<0>();
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.half(s));
    if (forwards)
    {
      sm90::mbarrierWait(bars.half(s), (j >> 1) & 1);
      // The peer's window is contiguous: map the first piece and its barrier once.
      uint32_t const src = stage + half_off, dst = sm90::mapShared(src, peer);
      uint32_t const peer_full = sm90::mapShared(bars.full(s), peer);
#pragma unroll 1
      for (int c = 0; c < D_QK / 64; ++c)
        sm90::bulkCopyToPeer(dst + c * Cfg::BLOCK_BYTES, src + c * Cfg::BLOCK_BYTES, Cfg::PIECE_BYTES, peer_full);
      sm90::mbarrierArriveExpectTx(bars.full(s), Cfg::HALF_BYTES);
    }
    slot_l = next;
  }
}

/// The copies of KV tile \p j into \p stage: 64 rows x 72 chunks over the CTA, in the swizzled
/// layout; rows past the split are zero-filled (their scores are masked, their P is 0).
__device__ __forceinline__ void issueSwizzledRows(KvLoader<Sm90Config> const &ld, int j, uint32_t stage)
{
  ld.issueRowsAt<Sm90Config::QK_CHUNKS>(j, [stage](int r, int ch) { return stage + Sm90Config::qStageOffset(r, ch); });
}

/// The tile of cuda-sm90 (Cfg = Sm90ProducerConfig: a producer warpgroup issues the copies, mbarriers)
/// and of cuda-sm90-sync (Cfg = Sm90Config: the 256 compute threads issue them, one CTA barrier
/// per tile). \p KV: the pool's dtype; FP8 pools (producer schedule only) reach the stage as bf16,
/// and a one-scale pool's kv_scale multiplies the score scale and the output instead of every value.
template <class Cfg, class PartialT, KvDtype KV = KvDtype::kBf16>
__device__ __forceinline__ void verifyTileSm90(VerifyParams const &p, int b, int mt, int split)
{
  constexpr bool PRODUCER = ProducerThreads<Cfg>::value > 0;
  constexpr bool PAIRS = std::is_same_v<Cfg, Sm90PairConfig>;
  static_assert(KV == KvDtype::kBf16 || (PRODUCER && !PAIRS), "FP8 pools: cuda-sm90's producer schedule only");
  constexpr bool ONE_SCALE = KV == KvDtype::kFp8E4m3 || KV == KvDtype::kFp8E5m2;
  using Smem = typename Cfg::Smem;
  extern __shared__ __align__(1024) unsigned char sm90_smem[];
  Sm90Window<Cfg> const win(sm90_smem);
  float *const xrow = win.xrow;
  TileInfo const volatile *const info = win.info;
  TileSmem const &sm = win.sm;
  uint32_t const q_base = win.at(Smem::q);
  uint32_t const kv_base = win.at(Smem::kv);
  uint32_t const p_base = win.at(Smem::p);
  StageBarriers const bars{win.at(Smem::bars)};

  // A CTA pair shares its KV tiles when both row tiles have work in this split (CTA-uniform, and the
  // same answer in both CTAs); a CTA whose peer has none gathers alone.
  uint32_t const rank = PAIRS ? sm90::clusterRank() : 0u;
  bool const pair = PAIRS && sm90::clusterSize() == 2 && pairServes(p, b, mt, split);
  if constexpr (PRODUCER)
    if (threadIdx.x == 0)
      for (int s = 0; s < Cfg::KV_STAGES; ++s)
      {
        sm90::mbarrierInit(bars.full(s), pair ? 1 : Sm90ProducerConfig::FULL_ARRIVALS);
        sm90::mbarrierInit(bars.empty(s), Sm90ProducerConfig::EMPTY_ARRIVALS * (pair ? 2 : 1));
        if constexpr (PAIRS)
          sm90::mbarrierInit(bars.half(s), Sm90PairConfig::HALF_ARRIVALS);
      }
  if constexpr (PAIRS)
    if (pair)
    {
      // The peer's producer completes bytes on this CTA's full[s] and its compute warps arrive on
      // empty[s]: both CTAs' barriers are initialised, and visible across the cluster, first.
      if (threadIdx.x == 0)
        sm90::fenceMbarrierInit();
      sm90::clusterSync();
    }
  // A pair's producer: warps 0-1 gather this CTA's half of each tile (rows 32 rank + 16 w, +16).
  auto pairCopies = [&](int P, int s0, int s1, int kv0, int64_t qo0) {
    ProducerCopies c{p, P, s0, s1, kv0, qo0};
    c.row0 += static_cast<int>(rank) * Sm90PairConfig::HALF_ROWS;
    return c;
  };
  bool const gathers = !pair || static_cast<int>(threadIdx.x) < Cfg::THREADS + Sm90PairConfig::HALF_ARRIVALS;
  TileSetup st;
  // The producer's first tile goes out beside the Q copy (its landing overlaps Q's); the compute
  // warps of cuda-sm90-sync copy their first tile after the prologue.
  auto first_copies = [&](int P, int s0, int s1, int kv0, int64_t qo0) {
    if constexpr (PRODUCER)
    {
      ProducerCopies const copies = pair ? pairCopies(P, s0, s1, kv0, qo0) : ProducerCopies{p, P, s0, s1, kv0, qo0};
      if constexpr (KV != KvDtype::kBf16)
        Fp8TileWriter<KV>{copies}.write(0, kv_base, copies.slotOf(0));
      else if (gathers)
        copies.issue(0, kv_base, copies.slotOf(0));
    }
  };
  if (!beginTile<Cfg>(p, b, mt, split, 0, q_base, sm, st, first_copies))
    return;  // CTA-uniform, before any barrier but beginTile's own (which publishes the mbarriers)
  if constexpr (PRODUCER)
  {
    // The warpgroup index through warpUniform, so that the compiler sees a warp-uniform branch
    // (setmaxnreg needs one to let the compute side allocate past the launch's 168 registers).
    int const warpgroup = sm90::warpUniform(static_cast<int>(threadIdx.x) / 128);
    if (warpgroup >= Cfg::WARPGROUPS)
    {
      if constexpr (KV == KvDtype::kBf16)
        sm90::setMaxRegisters<Cfg::PRODUCER_REGS, false>();
      else
        sm90::setMaxRegisters<Sm90ProducerConfig::FP8_PRODUCER_REGS, false>();
      if (pair)
      {
        if (gathers)
          producePairTiles(pairCopies(info->P, info->s0, info->s1, info->kv0, info->qo0), kv_base, bars, st.ntiles,
                           rank);
      }
      else
        produceTiles<KV>(p, info, kv_base, bars, st.ntiles);
      return;
    }
    if constexpr (KV == KvDtype::kBf16)
      sm90::setMaxRegisters<Cfg::COMPUTE_REGS, true>();
    else
      sm90::setMaxRegisters<Sm90ProducerConfig::FP8_COMPUTE_REGS, true>();
    sm90::fenceProxyAsync();  // this thread's Q copies (landed in beginTile) for the wgmma
    computeBarrier<Cfg>();
  }

  ComputeLane const me = ComputeLane::of(threadIdx.x);
  int const wg = me.wg, wrow = me.wrow, lane = me.lane, g = me.g, t4 = me.t4;
  float const kv_scale = ONE_SCALE ? p.batch.kv_scale : 1.f;  // scores and O are linear in K and V
  float const scale = p.batch.sm_scale * kv_scale * LOG2E;

  // Descriptors. Scores: A = Q (K-major), B = this warpgroup's 32 keys of the stage (K-major); a
  // k-step of 16 columns moves 32 bytes in a block, every 4 steps the next 64-column block.
  // P.V: A = P (K-major over the 64 keys), B = V columns [256 wg, +256) (N-major: 4 blocks apart
  // by BLOCK_BYTES, 8-key groups by 1024 bytes); a k-step of 16 keys moves 2 atoms.
  uint64_t const q_desc = sm90::smemDescriptor(q_base, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const k_desc0 =
      sm90::smemDescriptor(kv_base + wg * Cfg::S_KEYS * sm90::SWIZZLE_ROW_BYTES, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const p_desc = sm90::smemDescriptor(p_base, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const v_desc0 =
      sm90::smemDescriptor(kv_base + wg * (Cfg::O_COLS / 64) * Cfg::BLOCK_BYTES, Cfg::BLOCK_BYTES, sm90::SWIZZLE_ATOM_BYTES);

  float o[Cfg::O_REGS];
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; ++i)
    o[i] = 0.f;
  SoftmaxState row[2];  // rows wrow + g and wrow + g + 8; l holds this warpgroup's keys only

  KvLoader<Cfg> const ld{p, sm};
  int const ntiles = st.ntiles;
  if constexpr (!PRODUCER)
  {
    ld.loadFirstIndices();
    __syncthreads();
    issueSwizzledRows(ld, 0, kv_base);
    if (ntiles > 1)
      ld.issueIndices(1);
    cpAsyncCommit();
  }
  bool const moves = windowMoves(info);

  for (int j = 0; j < ntiles; ++j)
  {
    // Stage: load. Tile j has landed (this thread's copies, made visible to wgmma, then everyone's);
    // the other stage is free: every warpgroup waited for its tile j - 1 P.V before this barrier.
    // With the producer warpgroup: its full[j % 2] arrivals say the same, and no CTA barrier is needed.
    if constexpr (PRODUCER)
    {
      sm90::mbarrierWait(bars.full(j & 1), (j >> 1) & 1);
      if (moves)
        computeBarrier<Cfg>();  // every warp is past its reads of the window in place
    }
    else
    {
      cpAsyncWait<0>();
      sm90::fenceProxyAsync();
      __syncthreads();
    }
    if (moves)
      advanceVisibility<Cfg>(p, sm, j);
    uint32_t const stage = (j & 1) * Cfg::ROWS_BYTES;

    // Stage: scores, S = Q K^T over this warpgroup's 32 keys; tile j + 1's copies are issued while
    // the 36 wgmma run (issued during P.V instead, they had too little time to land: 8-12% slower).
    float s[Cfg::S_REGS];
    sm90::wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < Cfg::K16_STEPS; ++ks)
    {
      uint32_t const koff = (ks >> 2) * Cfg::BLOCK_BYTES + (ks & 3) * 32;
      sm90::wgmmaM64N32<0>(s, sm90::advance(q_desc, koff), sm90::advance(k_desc0, stage + koff), ks > 0);
    }
    sm90::wgmmaCommit();
    if constexpr (!PRODUCER)
    {
      if (j + 1 < ntiles)
      {
        issueSwizzledRows(ld, j + 1, kv_base + ((j + 1) & 1) * Cfg::ROWS_BYTES);
        if (j + 2 < ntiles)
          ld.issueIndices(j + 2);
      }
      cpAsyncCommit();
    }
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(s);

    maskAndSoftmax<Cfg>(p, info, sm, xrow, j, me, scale, s, row, o);

    // Stage: exchange. This warpgroup's 32 keys of P, as bf16 pairs at (row, key 32 wg + 8 n + 2 t4):
    // chunk 4 wg + n of the row, swizzled (conflict-free: the 8 rows of a warp hit 8 chunks).
    unsigned char *const pbuf = smemAt<unsigned char>(sm90_smem, Smem::p);
#pragma unroll
    for (int n = 0; n < Cfg::S_KEYS / 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
      {
        int const r = wrow + g + 8 * h;
        *reinterpret_cast<uint32_t *>(pbuf + sm90::swizzled(r, wg * 4 + n) + t4 * 4) =
            packBf16(s[n * 4 + h * 2], s[n * 4 + h * 2 + 1]);
      }
    sm90::fenceProxyAsync();
    namedBarrier(kProbsReady, Cfg::THREADS);

    // Stage: P.V, O[:, 256 wg + ...] += P (64 x 64) V (64 x 256).
    sm90::fenceOperands(o);
    sm90::wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < Cfg::PV_STEPS; ++kk)
      sm90::wgmmaM64N256<1>(o, sm90::advance(p_desc, kk * 32),
                            sm90::advance(v_desc0, stage + kk * 2 * sm90::SWIZZLE_ATOM_BYTES), 1);
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(o);
    if constexpr (PRODUCER)
    {
      __syncwarp();
      if (lane == 0)
      {
        sm90::mbarrierArrive(bars.empty(j & 1));  // this warp's reads of the stage are done
        if (pair)  // and the peer's producer writes this CTA's stage too
          sm90::mbarrierArriveCluster(sm90::mapShared(bars.empty(j & 1), rank ^ 1u));
      }
    }
  }

  storeTile<Cfg, PartialT>(p, info, xrow, me, kv_scale, row, o);
  // A CTA of a pair stays until its peer is done with it: the peer's warps arrive on this CTA's
  // empty barriers (distributed shared memory) up to their last tile.
  if (pair)
    sm90::clusterSync();
}

template <class PartialT, KvDtype KV = KvDtype::kBf16>
__global__ void __launch_bounds__(ctaThreads<Sm90ProducerConfig>(), 1) sm90Kernel(VerifyParams const p, int m_tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  verifyTileSm90<Sm90ProducerConfig, PartialT, KV>(p, blockIdx.y, blockIdx.x % m_tiles, blockIdx.x / m_tiles);
#else
  __trap();  // this file is built for sm_90a only; plan() refuses other GPUs before any launch
#endif
}

/// cuda-sm90-c2, launched in clusters of 1 or 2 CTAs along x (consecutive row tiles of one split).
template <class PartialT>
__global__ void __launch_bounds__(ctaThreads<Sm90PairConfig>(), 1) sm90PairKernel(VerifyParams const p, int m_tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  verifyTileSm90<Sm90PairConfig, PartialT>(p, blockIdx.y, blockIdx.x % m_tiles, blockIdx.x / m_tiles);
#else
  __trap();
#endif
}

template <class PartialT>
__global__ void __launch_bounds__(Sm90Config::THREADS, 1) sm90SyncKernel(VerifyParams const p, int m_tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  verifyTileSm90<Sm90Config, PartialT>(p, blockIdx.y, blockIdx.x % m_tiles, blockIdx.x / m_tiles);
#else
  __trap();
#endif
}
} // namespace Impl

size_t sm90SharedBytes() { return Impl::Sm90Config::SMEM_BYTES; }

namespace
{
/// Every pool dtype cuda-sm90's kernel is instantiated for, in one list (the launcher's switch and
/// the shared-memory attribute both walk it).
template <class F>
void forEachSm90Dtype(F &&f)
{
  f(std::integral_constant<KvDtype, KvDtype::kBf16>{});
  f(std::integral_constant<KvDtype, KvDtype::kFp8E4m3>{});
  f(std::integral_constant<KvDtype, KvDtype::kFp8E5m2>{});
  f(std::integral_constant<KvDtype, KvDtype::kFp8E4m3BlockScaled>{});
}
} // namespace

cudaError_t prepareSm90Kernel()
{
  static std::once_flag once;
  static cudaError_t status = cudaSuccess;
  std::call_once(once, [] {
    int const bytes = Impl::Sm90Config::SMEM_BYTES;
    forEachSm90Dtype([&](auto kv) {
      if (status == cudaSuccess)
        status = Impl::allowSharedMemory({reinterpret_cast<void const *>(Impl::sm90Kernel<float, kv.value>),
                                          reinterpret_cast<void const *>(Impl::sm90Kernel<__nv_bfloat16, kv.value>)},
                                         bytes);
    });
    if (status == cudaSuccess)
      status = Impl::allowSharedMemory({reinterpret_cast<void const *>(Impl::sm90SyncKernel<float>),
                                        reinterpret_cast<void const *>(Impl::sm90SyncKernel<__nv_bfloat16>),
                                        reinterpret_cast<void const *>(Impl::sm90PairKernel<float>),
                                        reinterpret_cast<void const *>(Impl::sm90PairKernel<__nv_bfloat16>)},
                                       bytes);
    if (status == cudaSuccess)
      status = prepareSm90Fp8MmaKernel();
  });
  return status;
}

cudaError_t launchVerifySm90(VerifyParams const &p, cudaStream_t stream)
{
  cudaError_t e = cudaErrorInvalidValue;  // a dtype outside the list
  forEachSm90Dtype([&](auto kv) {
    if (p.batch.kv_dtype == kv.value)
      e = Impl::launchSplit<Impl::Sm90ProducerConfig>(p, stream, Impl::sm90Kernel<float, kv.value>,
                                                      Impl::sm90Kernel<__nv_bfloat16, kv.value>);
  });
  return e;
}

cudaError_t launchVerifySm90Sync(VerifyParams const &p, cudaStream_t stream)
{
  return Impl::launchSplit<Impl::Sm90Config>(p, stream, Impl::sm90SyncKernel<float>,
                                             Impl::sm90SyncKernel<__nv_bfloat16>);
}

int sm90ClusterFor(int max_tree, int num_heads)
{
  int64_t const m_tiles = (static_cast<int64_t>(max_tree) * num_heads + SM90_M_TILE - 1) / SM90_M_TILE;
  return m_tiles >= 2 ? Impl::Sm90PairConfig::MAX_CLUSTER : 1;
}

cudaError_t launchVerifySm90Pairs(VerifyParams const &p, cudaStream_t stream, int cluster)
{
  if (cluster != 1 && cluster != Impl::Sm90PairConfig::MAX_CLUSTER)
    return cudaErrorInvalidValue;
  return Impl::launchSplit<Impl::Sm90PairConfig>(p, stream, Impl::sm90PairKernel<float>,
                                                 Impl::sm90PairKernel<__nv_bfloat16>, cluster);
}
} // namespace canopy::cuda
