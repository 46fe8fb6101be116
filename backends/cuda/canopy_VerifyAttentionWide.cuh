/// \file canopy_VerifyAttentionWide.cuh
/// \brief The cuda-sm120 tile with 32 rows per warp (included by canopy_VerifyAttentionSm120.cu).
///
/// Why 32 rows per warp. With 16 rows per warp (the tile in canopy_VerifyAttentionKernel.cuh),
/// each ldmatrix.x4 of K or V feeds 2 mma. Measured on the H200 (docs/results/cuda-h200.md), that
/// inner loop alone tops out at 374 TFLOP/s at 8 warps per SM (latency: 471 at 16 warps), while
/// one ldmatrix.x4 per 4 mma (32 rows sharing each B fragment) reaches 637 TFLOP/s, the
/// register-fed mma.sync rate (648). The registers allow it: Q (64 rows x 576) and O (64 x 512)
/// cost the CTA the same whether a warp holds 16 rows x 288 dims or 32 rows x 144 dims.
///
/// Layout. 8 warps = 2 row groups (32 rows each) x 4 quarters. Warp (rg, q) holds Q of its 32 rows
/// over dims [144 q, +144) (72 registers) and O of its 32 rows over columns [128 q, +128) (128
/// registers). Keys come in 32-key stages (2-stage cp.async ring, as before) and are consumed in
/// halves of 16 keys:
///   1. Q.K^T: each warp computes the partial 32 x 16 scores over its 144 dims (1 ldmatrix : 4 mma)
///      and stores them (2 KB per warp).
///   2. Softmax, once per row (not once per warp that holds the row): warp q of the row group
///      sums the 4 partials of 8 of its rows (row block q / 2, half q % 2 of the fragment rows),
///      masks, updates the running max and sum, and writes the probabilities as bf16 directly in
///      mma A-fragment order (two 4-byte words per lane) plus the row's rescale factor; barrier.
///   3. P.V: each warp reads the A fragments of all 32 rows (2 x 16 B per lane) and the 4 rescale
///      factors, and accumulates its 128 output columns (1 ldmatrix.x4.trans : 4 mma).
/// The next half's Q.K^T is issued in the same straight-line block as this half's softmax (3.9%
/// faster than in sequence on the H200). Measured on the H200 this tile is still ~8% slower than
/// the 16-row tile (docs/results/cuda-h200.md): it pays the softmax latency and two barriers per 16
/// keys, and ptxas issues the 36 HMMAs of a half as one burst ahead of the softmax.
/// Shared-memory traffic per 32 keys and 64 rows: 260 KB, against 349 KB for the 16-row tile.
#pragma once

#include "canopy_VerifyAttentionKernel.cuh"

#include <type_traits>

namespace canopy::cuda::Impl
{
struct WideConfig
{
  static constexpr int ROW_GROUPS = 2;  ///< of 32 rows
  static constexpr int QUARTERS = 4;    ///< warps per row group
  static constexpr int WARPS = ROW_GROUPS * QUARTERS;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int M_TILE = 32 * ROW_GROUPS;
  static constexpr int N_TILE = 32;   ///< keys per cp.async stage
  static constexpr int HALF = 16;     ///< keys per softmax step
  static constexpr int KSTEPS = D_QK / 16 / QUARTERS;  ///< k16 steps of Q per warp (9: 144 dims)
  static constexpr int NBLK = D_V / 8 / QUARTERS;      ///< 8-column blocks of O per warp (16: 128 columns)
  static constexpr int GROUP_THREADS = 32 * QUARTERS;  ///< threads of a row group (its named barrier)
  static constexpr bool FOLD_HEADS = true;
  static constexpr int QK_CHUNKS = D_QK * 2 / 16;  ///< 16-byte chunks in a bf16 K row (72)
  static constexpr int LOAD_UNROLL = 8;
  static constexpr int KV_ROW_BYTES = (D_QK + 8) * 2;  // 16-byte pad: conflict-free ldmatrix rows
  static constexpr int KV_STAGE_BYTES = N_TILE * KV_ROW_BYTES;
  static constexpr int KV_BYTES = 2 * KV_STAGE_BYTES;  // also the 64-row Q staging area
  static constexpr int X_BYTES = WARPS * 4 * 32 * 16;  ///< partial scores: 4 float4 per lane and warp
  static constexpr int PREC_BYTES = ROW_GROUPS * 2 * 32 * 16;  ///< P as whole A fragments per (row block, lane)
  static constexpr int ALPHA_BYTES = ROW_GROUPS * QUARTERS * 32 * 4;  ///< rescale factor per reduced row
  static constexpr int STATS_BYTES = M_TILE * 8;  ///< final (max, sum) per row
  static constexpr int MAX_TILE_NODES = M_TILE;   ///< H = 1 puts M_TILE nodes in a tile
  // Visibility window words (VisWindow), as in the 16-row tile: all of a 1024-node tree for H >= 2.
  static constexpr int VIS_BYTES = 4096;
  static constexpr int VIS_WORDS = VIS_BYTES / 8;
  static constexpr int RING_BYTES = 2 * N_TILE * 8;
  static constexpr int INFO_BYTES = 128;
  /// The shared-memory plan, in this order.
  struct Smem
  {
    static constexpr SmemRegion kv{0, KV_BYTES};                  ///< K/V ring; the Q tile is staged here once
    static constexpr SmemRegion scores = kv.next(X_BYTES);        ///< partial scores of each warp
    static constexpr SmemRegion prec = scores.next(PREC_BYTES);   ///< P as A fragments
    static constexpr SmemRegion alpha = prec.next(ALPHA_BYTES);   ///< rescale factors
    static constexpr SmemRegion stats = alpha.next(STATS_BYTES);  ///< final (max, sum) per row
    static constexpr SmemRegion vis = stats.next(VIS_BYTES);      ///< visibility window words
    static constexpr SmemRegion ring = vis.next(RING_BYTES);      ///< slot indices
    static constexpr SmemRegion info = ring.next(INFO_BYTES);     ///< TileInfo
  };
  static constexpr int SMEM_BYTES = Smem::info.end();
  /// Byte offset of Q row \p r, 16-byte chunk \p ch in the Q staging (padded rows, as the K/V stages).
  __host__ __device__ static constexpr int qStageOffset(int r, int ch) { return r * KV_ROW_BYTES + ch * 16; }
  static_assert(fitsSm120(Smem::info), "tile exceeds the sm_120 99 KB shared-memory limit");
  static_assert(KV_BYTES >= M_TILE * KV_ROW_BYTES, "the K/V ring stages the Q tile once");
  static_assert(sizeof(TileInfo) <= INFO_BYTES, "TileInfo");
  static_assert(VIS_WORDS >= MAX_TILE_NODES, "every tile node needs one 64-bit word (a 32-key tile window)");
  static_assert(D_QK % (16 * QUARTERS) == 0 && D_V % (8 * QUARTERS) == 0, "the quarters split Q.K^T and P.V evenly");
};

/// Runs \p loop(std::true_type) when the visibility window moves during the KV loop (windowMoves),
/// else \p loop(std::false_type), a copy of the loop without rebuild code. CTA-uniform. For this tile
/// the two copies measured 1.0-2.2% slower than the kernel without windows on the H200 (T <= 256),
/// the predicate in one loop 2.4-4.0% (docs/results/cuda-big-trees.md).
template <class Loop>
__device__ __forceinline__ void withWindowLoop(TileInfo const volatile *info, Loop &&loop)
{
  if (windowMoves(info))
    loop(std::true_type{});
  else
    loop(std::false_type{});
}

template <class PartialT>
__device__ __forceinline__ void verifyTileWide(VerifyParams const &p, int b, int mt, int split)
{
  using Cfg = WideConfig;
  constexpr int M_TILE = Cfg::M_TILE;
  constexpr int N_TILE = Cfg::N_TILE;
  constexpr int KVB = Cfg::KV_ROW_BYTES;

  extern __shared__ __align__(16) unsigned char smem[];
  using Smem = typename Cfg::Smem;
  float4 *const xbuf = smemAt<float4>(smem, Smem::scores);
  uint4 *const prec = smemAt<uint4>(smem, Smem::prec);
  float *const alph = smemAt<float>(smem, Smem::alpha);
  float2 *const stats = smemAt<float2>(smem, Smem::stats);
  uint64_t *const vis = smemAt<uint64_t>(smem, Smem::vis);
  int64_t *const ring = smemAt<int64_t>(smem, Smem::ring);
  TileInfo *const info_w = smemAt<TileInfo>(smem, Smem::info);
  TileInfo const volatile *const info = info_w;

  int const tid = threadIdx.x;
  int const warp = tid >> 5, lane = tid & 31, t4 = lane & 3;
  // Warps 0-3 are row group 0, 4-7 row group 1: each scheduler (warp % 4) hosts one warp of each
  // row group, so one group's softmax can overlap the other's mma.
  int const rg = warp >> 2, q = warp & 3;

  TileSmem const sm{vis, ring, info_w};
  TileSetup st;
  uint32_t const kv_base = smemAddr(smemAt<unsigned char>(smem, Smem::kv));
  if (!beginTile<Cfg>(p, b, mt, split, 0, kv_base, sm, st))
    return;

  uint32_t qf[2][Cfg::KSTEPS][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int ks = 0; ks < Cfg::KSTEPS; ++ks)
      ldmatrixX4(qf[m][ks], kv_base + (rg * 32 + m * 16 + (lane & 15)) * KVB +
                                ((q * Cfg::KSTEPS + ks) * 16 + (lane >> 4) * 8) * 2);
  __syncthreads();  // Q staging is free for KV tiles

  bool const rg_valid = st.tile_row0 + rg * 32 < st.rows_in_req;
  float const scale = p.batch.sm_scale * LOG2E;

  float o[2][Cfg::NBLK][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < Cfg::NBLK; ++n)
      o[m][n][0] = o[m][n][1] = o[m][n][2] = o[m][n][3] = 0.f;
  // Softmax state of the one row this lane reduces: row (q / 2) * 16 + g + 8 (q % 2) of the group.
  SoftmaxState row;

  KvLoader<Cfg> const ld{p, sm};

  // Step 1: partial scores of the group's 32 rows x 16 keys over this warp's 144 dims, stored as
  // float4 (m, h) = {s[m][0][2h], s[m][0][2h+1], s[m][1][2h], s[m][1][2h+1]}: the 4 values that
  // reducer q = 2m + h needs from this lane, so each reducer read is one conflict-free float4.
  auto partialScores = [&](float (&s)[2][2][4], uint32_t kbuf, int hh) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 2; ++n)
        s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Cfg::KSTEPS; ++ks)
    {
      uint32_t bf[4];
      ldmatrixX4(bf, kbuf + ((hh * 2 + (lane >> 4)) * 8 + (lane & 7)) * KVB +
                         ((q * Cfg::KSTEPS + ks) * 16 + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
      for (int m = 0; m < 2; ++m)
      {
        mmaBf16(s[m][0], qf[m][ks], bf[0], bf[1]);
        mmaBf16(s[m][1], qf[m][ks], bf[2], bf[3]);
      }
    }
  };
  auto storePartials = [&](float const (&s)[2][2][4]) {
    float4 *mine = xbuf + warp * 4 * 32 + lane;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        mine[(m * 2 + h) * 32] = make_float4(s[m][0][2 * h], s[m][0][2 * h + 1], s[m][1][2 * h], s[m][1][2 * h + 1]);
  };

  // Step 2: this lane's row, keys {2 t4, 2 t4 + 1, 8 + 2 t4, 9 + 2 t4} of the half: sum the four
  // partials (same order in every run), mask, online softmax (lazy rescale as in the 16-row tile),
  // then P as bf16 in A-fragment order: for row block m the lane's pair is register h (keys 2 t4)
  // and 2 + h (keys 8 + 2 t4) of the m16n8k16 A fragment, in the same lane.
  auto softmaxRows = [&](int col_h) {
    float x[4];
    {
      float4 const *src = xbuf + (rg * 4 * 4 + q) * 32 + lane;
      float4 acc = src[0];
#pragma unroll
      for (int w = 1; w < 4; ++w)
      {
        float4 const v = src[w * 4 * 32];
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
      x[0] = acc.x, x[1] = acc.y, x[2] = acc.z, x[3] = acc.w;
    }
    if (info->P - col_h < Cfg::HALF || info->s1 - col_h < Cfg::HALF)
    {
      int const rr = info->mt * M_TILE + rg * 32 + (q >> 1) * 16 + (lane >> 2) + (q & 1) * 8;
      int const vr = rr < info->T * p.batch.num_heads ? (rr / p.batch.num_heads - info->node_lo) * info->vis_stride : -1;
      uint32_t const vm = visibleWindow<Cfg::HALF>(info, vis, vr, col_h) >> (t4 * 2);
      x[0] = vm & 1u ? x[0] : NEG_INF;
      x[1] = vm & 2u ? x[1] : NEG_INF;
      x[2] = vm & 0x100u ? x[2] : NEG_INF;
      x[3] = vm & 0x200u ? x[3] : NEG_INF;
    }
    float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx *= scale;
    float msub;
    float const alpha = row.advance(mx, msub);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      x[e] = fastExp2(fmaf(x[e], scale, -msub));
    row.l = row.l * alpha + ((x[0] + x[1]) + (x[2] + x[3]));
    // Registers h and 2 + h of the row block's A fragment; the PV warps then load each fragment as
    // one 16-byte word into 4 consecutive registers, as HMMA wants them (assembled from two words,
    // the fragment cost ~150 register moves per half in the sm_90 SASS).
    uint32_t *frag = reinterpret_cast<uint32_t *>(prec + (rg * 2 + (q >> 1)) * 32 + lane);
    frag[q & 1] = packBf16(x[0], x[1]);
    frag[2 + (q & 1)] = packBf16(x[2], x[3]);
    alph[(rg * 4 + q) * 32 + lane] = alpha;
  };

  // Step 3: O[32 rows][128 columns] += P[32 x 16] V[16 x 128], rescaled first where a row's
  // reference max moved.
  auto accumulatePV = [&](uint32_t vbuf, int hh) {
    uint32_t pa[2][4];
    float alpha[2][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
    {
      uint4 const f = prec[(rg * 2 + m) * 32 + lane];
      pa[m][0] = f.x, pa[m][1] = f.y, pa[m][2] = f.z, pa[m][3] = f.w;
      alpha[m][0] = alph[(rg * 4 + m * 2) * 32 + lane];
      alpha[m][1] = alph[(rg * 4 + m * 2 + 1) * 32 + lane];
    }
    if (__any_sync(0xffffffffu, alpha[0][0] != 1.f || alpha[0][1] != 1.f || alpha[1][0] != 1.f || alpha[1][1] != 1.f))
    {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < Cfg::NBLK; ++n)
        {
          o[m][n][0] *= alpha[m][0];
          o[m][n][1] *= alpha[m][0];
          o[m][n][2] *= alpha[m][1];
          o[m][n][3] *= alpha[m][1];
        }
    }
#pragma unroll
    for (int np = 0; np < Cfg::NBLK / 2; ++np)
    {
      uint32_t vb[4];
      ldmatrixX4Trans(vb, vbuf + (hh * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * KVB +
                              ((q * Cfg::NBLK / 2 + np) * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int m = 0; m < 2; ++m)
      {
        mmaBf16(o[m][np * 2], pa[m], vb[0], vb[1]);
        mmaBf16(o[m][np * 2 + 1], pa[m], vb[2], vb[3]);
      }
    }
  };

  // Schedule. Half h's softmax and the next half's Q.K^T are one straight-line block, so the
  // warp's HMMAs run while it reduces and exponentiates (the 16-row tile overlaps nothing: its
  // ablations add up, docs/results/cuda-h200.md). Per tile j (stage j & 1):
  //   [QK(j, 1) | softmax(j, 0)]  barrier B  store QK(j, 1)  PV(j, 0)
  //   wait for tile j + 1; __syncthreads (tile j + 1 visible; partials of (j, 1) stored)
  //   [QK(j + 1, 0) | softmax(j, 1)]  barrier B  store QK(j + 1, 0)  PV(j, 1)
  //   __syncthreads (stage j & 1 free; partials of (j + 1, 0) stored); issue tile j + 2 into it.
  // The partials of a half are stored only after barrier B of the half before: by then every
  // reducer has read the previous partials, so one 16 KB buffer suffices.
  int const ntiles = st.ntiles;
  ld.loadFirstIndices();
  __syncthreads();
  ld.template issueRows<Cfg::QK_CHUNKS, KVB>(0, kv_base);
  if (ntiles > 1)
    ld.issueIndices(1);
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads();
  if (ntiles > 1)
  {
    ld.template issueRows<Cfg::QK_CHUNKS, KVB>(1, kv_base + Cfg::KV_STAGE_BYTES);
    if (ntiles > 2)
      ld.issueIndices(2);
  }
  cpAsyncCommit();
  float s[2][2][4];
  if (rg_valid)
  {
    partialScores(s, kv_base, 0);
    storePartials(s);
  }
  __syncthreads();
  // Idle row groups run their own copy of the tile loop (same copies and barriers, no compute), so
  // the compute loop has no branch around its halves: branches there measured 1.3% slower.
  auto tileLoop = [&](auto valid, auto moves) {
    constexpr bool VALID = decltype(valid)::value;
    for (int j = 0; j < ntiles; ++j)
    {
      // After the __syncthreads that ended tile j - 1 (every softmax of it done).
      if constexpr (decltype(moves)::value)
        advanceVisibility<Cfg>(p, sm, j);
      uint32_t const buf = kv_base + (j & 1) * Cfg::KV_STAGE_BYTES;
      uint32_t const next = kv_base + ((j + 1) & 1) * Cfg::KV_STAGE_BYTES;
      int const col0 = info->s0 + j * N_TILE;
      bool const second = col0 + Cfg::HALF < info->s1;  // CTA-uniform
      bool const more = j + 1 < ntiles;
      if constexpr (VALID)
      {
        if (second)
          partialScores(s, buf, 1);
        softmaxRows(col0);
        rowGroupBarrier(rg, Cfg::GROUP_THREADS);
        if (second)
          storePartials(s);
        accumulatePV(buf, 0);
      }
      else
        idleRowGroupBarrier(rg, Cfg::GROUP_THREADS);
      if (!second)
        break;  // the split's last keys were in half 0 (no tile follows)
      cpAsyncWait<0>();
      __syncthreads();
      if constexpr (VALID)
      {
        if (more)
          partialScores(s, next, 0);
        softmaxRows(col0 + Cfg::HALF);
        rowGroupBarrier(rg, Cfg::GROUP_THREADS);
        if (more)
          storePartials(s);
        accumulatePV(buf, 1);
      }
      else
        idleRowGroupBarrier(rg, Cfg::GROUP_THREADS);
      __syncthreads();
      if (j + 2 < ntiles)
      {
        ld.template issueRows<Cfg::QK_CHUNKS, KVB>(j + 2, buf);
        if (j + 3 < ntiles)
          ld.issueIndices(j + 3);
      }
      cpAsyncCommit();
    }
  };
  withWindowLoop(info, [&](auto moves) {
    if (rg_valid)
      tileLoop(std::true_type{}, moves);
    else
      tileLoop(std::false_type{}, moves);
  });

  if (!rg_valid)
    return;
  // Final (max, sum) of each row, from its reducer lanes to every warp that holds part of its O.
  row.l += __shfl_xor_sync(0xffffffffu, row.l, 1);
  row.l += __shfl_xor_sync(0xffffffffu, row.l, 2);
  if (t4 == 0)
    stats[rg * 32 + (q >> 1) * 16 + (lane >> 2) + (q & 1) * 8] = make_float2(row.m, row.l);
  rowGroupBarrier(rg, Cfg::GROUP_THREADS);
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
    {
      int const r = rg * 32 + m * 16 + (lane >> 2) + h * 8;
      int const rr = info->mt * M_TILE + r;
      if (rr >= info->T * p.batch.num_heads)
        continue;
      float2 const st = stats[r];
      int64_t const gr = info->qo0 * p.batch.num_heads + rr;
      float const inv = info->tree_too_big ? __int_as_float(0x7fc00000) : 1.f / st.y;
      storeRow<PartialT, Cfg::NBLK>(p, p.nsplit == 1, gr, info->split, q * Cfg::NBLK * 8 + t4 * 2, Cfg::NBLK, inv,
                                    q == 0 && t4 == 0, SoftmaxState{st.x, st.y},
                                    [&](int n, int e) { return o[m][n][h * 2 + e]; });
    }
}
} // namespace canopy::cuda::Impl
