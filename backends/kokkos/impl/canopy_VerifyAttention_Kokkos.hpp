/// \file canopy_VerifyAttention_Kokkos.hpp
/// \brief Portable split-K tree-verify attention: a TeamPolicy kernel over (request, head group, KV
/// split) that keeps a Q tile and a KV tile in team scratch and runs an fp32 online softmax, then a
/// combine kernel that merges the split partials with the tree part.
#pragma once

#include "canopy_Bf16.hpp"
#include "canopy_KokkosCompat.hpp"
#include "canopy_VerifyArgs.hpp"
#include "impl/canopy_FloatPack.hpp"
#include "impl/canopy_KvTileLoad.hpp"
#include "impl/canopy_SplitModel.hpp"
#include "impl/canopy_VerifyAttention_Sgemm.hpp"
#include "impl/canopy_VerifyAttention_Streamed.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace canopy::Impl
{
/// \brief Tile shape of the portable kernel on one kind of execution space.
///
/// Rows of a tile are (tree node, head) pairs of one request: node-major, so the heads of one node
/// are consecutive, exactly as q and out store them. Every KV row of a tile is converted to fp32
/// once and then used by all the tile's rows, i.e. by every head, not once per head.
template <class ExecutionSpace,
          bool HOST = !IS_DEVICE_MEMORY<typename ExecutionSpace::memory_space>>
struct VerifyTiles
{
  // Host cores (one team = one thread). Register blocks of 6 rows x 2 packs: 12 accumulators + 2
  // loads + 1 broadcast fill the 16 vector registers of AVX2 (6 x 16 columns of 8 lanes; measured:
  // scores 110, values 90 GFLOP/s on a Zen 4 core, GCC 12, -march=x86-64-v3; 4 or 8 rows slower)
  // and of SSE (6 x 8 columns of 4 lanes). The pack is as wide as the build's vector registers: a
  // 256-bit pack in an SSE build is split by GCC through memory, about 30x slower.
  static constexpr int KV_TILE = 32;     ///< KV rows per tile: K 72 KiB + K^T 72 KiB fp32, L2-resident
#if defined(__AVX__)
  static constexpr int PACK = 8;         ///< fp32 lanes of a FloatPack (256-bit)
#else
  static constexpr int PACK = 4;         ///< fp32 lanes of a FloatPack (128-bit)
#endif
  static constexpr int ROW_BLOCK = 6;
  static constexpr int SCORE_COLS = 2 * PACK;
  static constexpr int VALUE_COLS = 2 * PACK;
  static constexpr int COMBINE_COLS = 32;
  /// Row cap: H=8 x T=33 (264 rows) fits one tile, so one team reads each KV row once per split.
  /// Scratch at 384 rows: Q 864 KiB + O 768 KiB + scores 48 KiB + the KV tile 144 KiB = 1.8 MiB of
  /// team scratch level 1 (Kokkos host level-1 limit: 20 MiB); Q and O stream through L2 per KV tile.
  static constexpr int MAX_ROWS = 384;
  static constexpr bool STREAMED = false;  ///< Q and O of the tile resident in scratch (this kernel)
  static constexpr int TEAM_SIZE = 1;
  static constexpr int VECTOR_LENGTH = 1;
  static constexpr int COMBINE_TEAM_SIZE = 1;
};

/// \brief GPUs: the SGEMM-shaped kernel (canopy_VerifyAttention_Sgemm.hpp: 64-row tiles, 8 x 8
/// register blocks, 128-thread teams) at 3 teams per SM: 1.05-1.61x the streamed kernel on the H200
/// at every shape of the portability grid, same run (docs/results/kokkos4.md), for up to 3.8x its
/// workspace (the split count fills 3 teams per SM; the output lives in the partials). The
/// streamed kernel (canopy_VerifyAttention_Streamed.hpp) stays selectable for a lean workspace
/// (kokkos-team-portable-streamed), and the sgemm tiles at 4 teams per SM (-sgemm).
template <class ExecutionSpace>
struct VerifyTiles<ExecutionSpace, false> : SgemmTilesThreePerSm
{
};

/// \brief The resident-tile kernel's shape on a GPU, for tile products that need whole Q and O
/// tiles in scratch (kokkos-kk's batched GEMM): one thread per register block, a 128-thread team,
/// Q 144 KiB + O 128 KiB + KV 72 KiB at 64 rows, so level 1 (global memory, cached).
struct ResidentDeviceTiles
{
  static constexpr int KV_TILE = 16;
  static constexpr int PACK = 1;
  static constexpr int ROW_BLOCK = 2;
  static constexpr int SCORE_COLS = 4;
  static constexpr int VALUE_COLS = 8;
  static constexpr int COMBINE_COLS = 4;
  static constexpr int MAX_ROWS = 64;
  static constexpr bool STREAMED = false;
  static constexpr int TEAM_SIZE = 128;
  static constexpr int VECTOR_LENGTH = 1;
  static constexpr int COMBINE_TEAM_SIZE = 128;
};

/// \brief Tiles of the resident-tile kernel on \p ExecutionSpace (the host shape on host spaces).
template <class ExecutionSpace>
using ResidentTiles = std::conditional_t<VerifyTiles<ExecutionSpace>::STREAMED, ResidentDeviceTiles, VerifyTiles<ExecutionSpace>>;

/// \brief Launch plan for \p bounds on \p ExecutionSpace. Heads are grouped so that a group's
/// (node, head) rows fit one tile at the largest tree; groups are balanced (8 heads at T=65 and 384
/// rows: 2 groups of 4, not 5 + 3).
/// \param max_rows row cap per tile (0: the tiles' default), for tile-size experiments
/// \tparam Tiles tile shape (default: the space's; tests run the device shape on host spaces)
template <class ExecutionSpace, class Tiles = VerifyTiles<ExecutionSpace>>
VerifyPlan planVerify(PlanBounds const &bounds, int nsplit, bool strict = false, int max_rows = 0)
{
  if (bounds.num_heads < 1)
    throw InputError("verify plan: num_heads must be >= 1, got " + std::to_string(bounds.num_heads));
  if (bounds.max_batch < 0 || bounds.max_tree < 0 || bounds.max_prefix < 0 || bounds.max_nodes < 0)
    throw InputError("verify plan: bounds must be >= 0");
  if (nsplit < 1)
    throw InputError("verify plan: nsplit must be >= 1, got " + std::to_string(nsplit));
  int const cap = max_rows > 0 ? max_rows : Tiles::MAX_ROWS;
  if (cap < Tiles::ROW_BLOCK)
    throw InputError("verify plan: max_rows must be >= " + std::to_string(Tiles::ROW_BLOCK));
  VerifyPlan p;
  p.max_batch = bounds.max_batch;
  p.max_tree = std::max(bounds.max_tree, 1);
  p.max_nodes = std::max<int64_t>(bounds.max_nodes, 1);
  p.num_heads = bounds.num_heads;
  p.nsplit = nsplit;
  p.strict = strict;
  if constexpr (Tiles::STREAMED)
  {
    // Every head of a node in one tile (H <= rows), whole nodes per tile, and the row tiles of a
    // request in the league: T=17 at H=8 is 5 tiles of 4 nodes (85% of the rows used), where
    // grouping heads to fit the whole tree would leave 15 of 32 rows empty.
    p.num_head_groups = static_cast<int>(ceilDiv(bounds.num_heads, cap));
    p.heads_per_group = static_cast<int>(ceilDiv(bounds.num_heads, p.num_head_groups));
    int const nodes = std::max(1, cap / p.heads_per_group);
    p.rows_per_tile = nodes * p.heads_per_group;
    p.row_tiles = static_cast<int>(ceilDiv(p.max_tree, nodes));
  }
  else
  {
    int const fit = std::max(1, std::min(bounds.num_heads, cap / p.max_tree));
    p.num_head_groups = static_cast<int>(ceilDiv(bounds.num_heads, fit));
    p.heads_per_group = static_cast<int>(ceilDiv(bounds.num_heads, p.num_head_groups));
    // Nodes per tile are whole: rows = nodes x heads_per_group, then padded to the row block. The
    // team walks its row tiles itself (row_tiles = 1), reading each KV tile once per row tile.
    int64_t const nodes = std::max<int64_t>(1, std::min<int64_t>(p.max_tree, cap / p.heads_per_group));
    p.rows_per_tile = static_cast<int>(roundUp(nodes * p.heads_per_group, Tiles::ROW_BLOCK));
  }
  if (p.leagueSize() > std::numeric_limits<int>::max() || p.max_nodes > std::numeric_limits<int>::max())
    throw Unsupported("verify plan: " + std::to_string(p.leagueSize()) + " teams exceed a Kokkos league");
  return p;
}

/// \brief Team-scratch pointers of one tile (fp32 unless noted).
struct TileRefs
{
  float *q;      ///< [rows][576], pre-scaled by sm_scale
  float *o;      ///< [rows][512] running (unnormalised) output
  float *k;      ///< [KV_TILE][576]; V is columns 0..511 of the same rows
  float *kt;     ///< [576][KV_TILE], K transposed (only for products that want it)
  float *s;      ///< [rows][KV_TILE] scores, then probabilities
  float *m;      ///< [rows] running max
  float *l;      ///< [rows] running sum
  float *alpha;  ///< [rows] rescale of o for this tile
  uint8_t *vis;  ///< [nodes][KV_TILE] tree visibility of this tile
};

/// \brief Team-scratch bytes of the split kernel for a plan: 64-byte aligned sub-buffers (whole
/// cache lines and vector-aligned rows), plus 64 bytes to align the base.
template <class Tiles>
KOKKOS_INLINE_FUNCTION size_t splitScratchBytes(VerifyPlan const &plan)
{
  size_t const R = static_cast<size_t>(plan.rows_per_tile), N = Tiles::KV_TILE;
  size_t const f = sizeof(float);
  return 64 + alignedBytes(R * D_QK * f) + alignedBytes(R * D_V * f) +
         alignedBytes(N * D_QK * f) * 2 + alignedBytes(R * N * f) + 3 * alignedBytes(R * f) +
         alignedBytes(R * N);
}

template <class Tiles>
KOKKOS_INLINE_FUNCTION TileRefs carveTile(void *raw, int rows)
{
  size_t const R = static_cast<size_t>(rows), N = Tiles::KV_TILE, f = sizeof(float);
  uintptr_t p = (reinterpret_cast<uintptr_t>(raw) + 63) / 64 * 64;
  auto take = [&p](size_t bytes) {
    uintptr_t const at = p;
    p += alignedBytes(bytes);
    return at;
  };
  TileRefs t;
  t.q = reinterpret_cast<float *>(take(R * D_QK * f));
  t.o = reinterpret_cast<float *>(take(R * D_V * f));
  t.k = reinterpret_cast<float *>(take(N * D_QK * f));
  t.kt = reinterpret_cast<float *>(take(N * D_QK * f));
  t.s = reinterpret_cast<float *>(take(R * N * f));
  t.m = reinterpret_cast<float *>(take(R * f));
  t.l = reinterpret_cast<float *>(take(R * f));
  t.alpha = reinterpret_cast<float *>(take(R * f));
  t.vis = reinterpret_cast<uint8_t *>(take(R * N));
  return t;
}

/// \brief s[r][c] = sum_d q[r][d] kt[d][c] for one ROWS x COLS register block (outer-product form:
/// the vector lanes run over KV columns, so no horizontal sums).
template <int ROWS, int COLS, int PACK, int LDKT>
KOKKOS_INLINE_FUNCTION void scoreBlock(float const *__restrict__ q, float const *__restrict__ kt, float *__restrict__ s)
{
  using Pack = FloatPack<PACK>;
  constexpr int NP = COLS / PACK;
  static_assert(COLS % PACK == 0, "a score block is whole packs");
  Pack acc[ROWS][NP];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NP; ++j)
      acc[r][j] = Pack::zero();
  for (int d = 0; d < D_QK; ++d)
  {
    Pack b[NP];
    for (int j = 0; j < NP; ++j)
      b[j] = Pack::load(kt + d * LDKT + j * PACK);
    for (int r = 0; r < ROWS; ++r)
    {
      float const qv = q[r * D_QK + d];
      for (int j = 0; j < NP; ++j)
        acc[r][j].fma(qv, b[j]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NP; ++j)
      acc[r][j].store(s + r * LDKT + j * PACK);
}

/// \brief o[r][c] = alpha[r] o[r][c] + sum_n p[r][n] v[n][c] for one ROWS x COLS block (V rows
/// are the K rows of the tile, stride 576).
template <int ROWS, int COLS, int PACK, int N>
KOKKOS_INLINE_FUNCTION void valueBlock(float const *__restrict__ p, float const *__restrict__ alpha,
                                       float const *__restrict__ v, float *__restrict__ o)
{
  using Pack = FloatPack<PACK>;
  constexpr int NP = COLS / PACK;
  static_assert(COLS % PACK == 0, "a value block is whole packs");
  Pack acc[ROWS][NP];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NP; ++j)
    {
      acc[r][j] = Pack::load(o + r * D_V + j * PACK);
      acc[r][j].scale(alpha[r]);
    }
  for (int n = 0; n < N; ++n)
  {
    Pack b[NP];
    for (int j = 0; j < NP; ++j)
      b[j] = Pack::load(v + n * D_QK + j * PACK);
    for (int r = 0; r < ROWS; ++r)
    {
      float const pv = p[r * N + n];
      for (int j = 0; j < NP; ++j)
        acc[r][j].fma(pv, b[j]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NP; ++j)
      acc[r][j].store(o + r * D_V + j * PACK);
}

/// \brief Tile products of the portable path: hand-written register blocks, one per team thread.
struct TeamTileProducts
{
  static constexpr bool WANTS_TRANSPOSED_K = true;
  static constexpr bool READS_FP8 = true;  ///< its kernels are instantiated for every kv dtype
  static constexpr char const *name() { return "kokkos-team"; }

  /// s = q k^T over the whole tile (rows x KV_TILE).
  template <class Tiles, class Member>
  KOKKOS_INLINE_FUNCTION static void scores(Member const &member, TileRefs const &t, int rows)
  {
    constexpr int RB = Tiles::ROW_BLOCK, CB = Tiles::SCORE_COLS, N = Tiles::KV_TILE;
    static_assert(N % CB == 0, "score blocks tile the KV tile");
    int const col_blocks = N / CB;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (rows / RB) * col_blocks), [&](int blk) {
      int const r0 = (blk / col_blocks) * RB, c0 = (blk % col_blocks) * CB;
      scoreBlock<RB, CB, Tiles::PACK, N>(t.q + r0 * D_QK, t.kt + c0, t.s + r0 * N + c0);
    });
  }

  /// o = diag(alpha) o + p v over the whole tile (rows x 512).
  template <class Tiles, class Member>
  KOKKOS_INLINE_FUNCTION static void accumulate(Member const &member, TileRefs const &t, int rows)
  {
    constexpr int RB = Tiles::ROW_BLOCK, CB = Tiles::VALUE_COLS, N = Tiles::KV_TILE;
    static_assert(D_V % CB == 0, "value blocks tile the 512 output columns");
    int const col_blocks = D_V / CB;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (rows / RB) * col_blocks), [&](int blk) {
      int const r0 = (blk / col_blocks) * RB, c0 = (blk % col_blocks) * CB;
      valueBlock<RB, CB, Tiles::PACK, N>(t.s + r0 * N, t.alpha + r0, t.k + c0, t.o + r0 * D_V + c0);
    });
  }
};

/// \brief The split kernel: one team per (request, head group, partial). Partials 0..nsplit-1
/// cover the prefix in tile-aligned chunks (ceil(P / nsplit) rounded up to KV_TILE), partial nsplit
/// is the tree part (tree rows via out_cache_loc, masked). Each writes its normalised output and
/// log-sum-exp per (node, head); an empty chunk writes only lse = -inf, which the combine skips.
/// \tparam KV the pool's kv dtype (KvTileLoad dequantises FP8 rows into the fp32 KV tile)
template <class ExecutionSpace, class TileProducts, class Tiles = VerifyTiles<ExecutionSpace>,
          KvDtype KV = KvDtype::kBf16>
struct VerifySplitKernel
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int N = Tiles::KV_TILE;

  VerifyArgs<MemorySpace> a;
  Kokkos::View<float *, MemorySpace> ws_out, ws_lse;
  int64_t node_capacity;
  VerifyPlan plan;
  int scratch_level;

  KOKKOS_INLINE_FUNCTION void operator()(Member const &member) const
  {
    TeamTask task;
    if (!decodeTeam(member.league_rank(), plan, a, task))
      return;
    int const split = task.split, b = task.b, h0 = task.h0, nh = task.nh;
    int64_t const node0 = task.node0, T = task.T;
    int64_t const kv0 = a.kv_indptr(b);
    int64_t const P = a.kv_indptr(b + 1) - kv0;
    bool const tree = split == plan.nsplit;
    int64_t lo = 0, hi = T;
    if (!tree)
      prefixChunk(P, plan.nsplit, split, N, lo, hi);
    TileRefs const t =
        carveTile<Tiles>(member.team_scratch(scratch_level).get_shmem(splitScratchBytes<Tiles>(plan)), plan.rows_per_tile);
    int64_t const nodes_per_tile = plan.rows_per_tile / nh;
    for (int64_t i0 = 0; i0 < T; i0 += nodes_per_tile)
    {
      int64_t const ni = T - i0 < nodes_per_tile ? T - i0 : nodes_per_tile;
      int const rows = static_cast<int>(ni * nh);
      int const rows_pad = static_cast<int>(roundUp(rows, Tiles::ROW_BLOCK));
      // Tree node j is visible to node i only if j <= i (parents precede children), so a tile of
      // nodes [i0, i0 + ni) needs tree columns below i0 + ni only.
      int64_t const tile_hi = tree ? (hi < i0 + ni ? hi : i0 + ni) : hi;
      if (lo >= tile_hi)
      {
        writeEmpty(member, split, node0 + i0, rows, nh, h0);
        continue;
      }
      loadQ(member, t, node0 + i0, rows, rows_pad, nh, h0);
      member.team_barrier();
      for (int64_t k0 = lo; k0 < tile_hi; k0 += N)
      {
        int const nk = static_cast<int>(tile_hi - k0 < N ? tile_hi - k0 : N);
        loadKV(member, t, tree, kv0, node0, k0, nk);
        if (tree)
          loadVisibility(member, t, b, node0, P, T, i0, ni, k0, nk);
        member.team_barrier();
        TileProducts::template scores<Tiles>(member, t, rows_pad);
        member.team_barrier();
        softmaxUpdate(member, t, rows, rows_pad, nk, tree, nh);
        member.team_barrier();
        TileProducts::template accumulate<Tiles>(member, t, rows_pad);
        member.team_barrier();
      }
      writePartial(member, t, split, node0 + i0, rows, nh, h0);
      member.team_barrier();
    }
  }

  KOKKOS_INLINE_FUNCTION int64_t wsRow(int split, int64_t node_row, int h) const
  {
    return (static_cast<int64_t>(split) * node_capacity + node_row) * a.batch.num_heads + h;
  }

  KOKKOS_INLINE_FUNCTION void writeEmpty(Member const &member, int split, int64_t first_row, int rows, int nh,
                                         int h0) const
  {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows),
                         [&](int r) { ws_lse(wsRow(split, first_row + r / nh, h0 + r % nh)) = NEG_INF; });
  }

  /// Q rows of nodes [first_row, first_row + rows / nh) and heads [h0, h0 + nh): contiguous in q.
  KOKKOS_INLINE_FUNCTION void loadQ(Member const &member, TileRefs const &t, int64_t first_row, int rows,
                                    int rows_pad, int nh, int h0) const
  {
    float const scale = a.batch.sm_scale;
    uint16_t const *q = a.q.data();
    int const H = a.batch.num_heads;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows_pad), [&](int r) {
      float *dst = t.q + static_cast<int64_t>(r) * D_QK;
      float *o = t.o + static_cast<int64_t>(r) * D_V;
      if (r < rows)
      {
        uint16_t const *src = q + ((first_row + r / nh) * H + h0 + r % nh) * D_QK;
        for (int d = 0; d < D_QK; ++d)
          dst[d] = bf16ToFloat(src[d]) * scale;
      }
      else
        for (int d = 0; d < D_QK; ++d)
          dst[d] = 0.f;
      for (int d = 0; d < D_V; ++d)
        o[d] = 0.f;
      t.m[r] = NEG_INF;
      t.l[r] = 0.f;
    });
  }

  /// KV rows [k0, k0 + nk) of the prefix (through kv_indices) or of the tree (through
  /// out_cache_loc), converted to fp32 once (FP8 rows dequantised); rows past nk are zero so that
  /// p = 0 times them is 0.
  KOKKOS_INLINE_FUNCTION void loadKV(Member const &member, TileRefs const &t, bool tree, int64_t kv0, int64_t node0,
                                     int64_t k0, int nk) const
  {
    KvTileLoad<KV> const pool(a.batch);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, N), [&](int n) {
      float *dst = t.k + n * D_QK;
      if (n < nk)
        pool.row(tree ? a.out_cache_loc(node0 + k0 + n) : a.kv_indices(kv0 + k0 + n), dst);
      else
        for (int d = 0; d < D_QK; ++d)
          dst[d] = 0.f;
      if (TileProducts::WANTS_TRANSPOSED_K)
        for (int d = 0; d < D_QK; ++d)
          t.kt[d * N + n] = dst[d];
    });
  }

  /// vis[il][c] = node i0 + il sees tree node k0 + c.
  KOKKOS_INLINE_FUNCTION void loadVisibility(Member const &member, TileRefs const &t, int b, int64_t node0, int64_t P,
                                             int64_t T, int64_t i0, int64_t ni, int64_t k0, int nk) const
  {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, static_cast<int>(ni)),
                         [&](int il) { treeVisibilityRow<N>(a, b, node0, P, T, i0 + il, k0, nk, t.vis + il * N); });
  }

  /// Online softmax over this tile: columns past nk and invisible tree columns get p = 0; alpha
  /// rescales what the row accumulated before. A row that sees nothing yet keeps m = -inf, l = 0.
  /// The loops are elementwise (the max and the sum go through PACK partial lanes), so that they
  /// vectorise without reassociating.
  KOKKOS_INLINE_FUNCTION void softmaxUpdate(Member const &member, TileRefs const &t, int rows, int rows_pad, int nk,
                                            bool tree, int nh) const
  {
    constexpr int W = Tiles::PACK;
    static_assert(N % W == 0, "the KV tile is whole packs");
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows_pad), [&](int r) {
      float *s = t.s + r * N;
      // Padding rows (r >= rows) see nothing: they stay at p = 0 and are never written out.
      int const valid = r < rows ? nk : 0;
      uint8_t const *vis = t.vis + (r < rows ? r / nh : 0) * N;
      float lane[W];
      for (int j = 0; j < W; ++j)
        lane[j] = NEG_INF;
      for (int c0 = 0; c0 < N; c0 += W)
        for (int j = 0; j < W; ++j)
        {
          int const c = c0 + j;
          bool const ok = c < valid && (!tree || vis[c] != 0);
          float const x = ok ? s[c] : NEG_INF;
          s[c] = x;
          lane[j] = x > lane[j] ? x : lane[j];
        }
      float tile_max = NEG_INF;
      for (int j = 0; j < W; ++j)
        tile_max = lane[j] > tile_max ? lane[j] : tile_max;
      float const m_old = t.m[r];
      float const m_new = tile_max > m_old ? tile_max : m_old;
      if (m_new == NEG_INF)
      {
        for (int c = 0; c < N; ++c)
          s[c] = 0.f;
        t.alpha[r] = 1.f;
        return;
      }
      for (int c = 0; c < N; ++c)
        s[c] = expNonPositive(s[c] - m_new);
      for (int j = 0; j < W; ++j)
        lane[j] = 0.f;
      for (int c0 = 0; c0 < N; c0 += W)
        for (int j = 0; j < W; ++j)
          lane[j] += s[c0 + j];
      float sum = 0.f;
      for (int j = 0; j < W; ++j)
        sum += lane[j];
      float const alpha = expNonPositive(m_old - m_new);
      t.alpha[r] = alpha;
      t.l[r] = t.l[r] * alpha + sum;
      t.m[r] = m_new;
    });
  }

  KOKKOS_INLINE_FUNCTION void writePartial(Member const &member, TileRefs const &t, int split, int64_t first_row,
                                           int rows, int nh, int h0) const
  {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](int r) {
      int64_t const w = wsRow(split, first_row + r / nh, h0 + r % nh);
      float const l = t.l[r];
      if (!(l > 0.f))
      {
        ws_lse(w) = NEG_INF;
        return;
      }
      float const inv = 1.f / l;
      float const *o = t.o + static_cast<int64_t>(r) * D_V;
      float *dst = ws_out.data() + w * D_V;
      for (int d = 0; d < D_V; ++d)
        dst[d] = o[d] * inv;
      ws_lse(w) = t.m[r] + Compat::log(l);
    });
  }
};

/// \brief Merges the partials of each (node, head): out = sum_s w_s o_s / sum_s w_s with
/// w_s = exp(lse_s - max lse). One team per (node row, head) of the plan bound, so the merge spreads
/// over the whole device at every batch (one team per node row left 17 teams for B=1, T=17,
/// each thread walking its columns' partials one load at a time); rows past sum T return, and so
/// do rows of requests the split kernel did not cover (b >= max_batch: a batch beyond its plan),
/// which keep whatever the output held instead of being filled from an unwritten workspace.
/// Stages: the partials' lse into scratch (one load per thread), every thread the same max from
/// it, the unnormalised weights into scratch (one exp per partial), every thread their sum in
/// partial order (so the weights are those of a serial merge, bit for bit), then the output
/// columns, CB per thread, from 16-byte loads.
template <class ExecutionSpace, class Tiles = VerifyTiles<ExecutionSpace>>
struct VerifyCombineKernel
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int CB = Tiles::COMBINE_COLS;
  static_assert(D_V % CB == 0 && CB % 4 == 0, "combine blocks of whole 16-byte units tile the 512 output columns");

  VerifyArgs<MemorySpace> a;
  Kokkos::View<float *, MemorySpace> ws_out, ws_lse;
  int64_t node_capacity;
  int partials;
  int max_batch;

  /// Scratch of a team: the partials' lse, then their weights exp(lse - max).
  KOKKOS_INLINE_FUNCTION static size_t scratchBytes(int num_partials) { return 2 * static_cast<size_t>(num_partials) * sizeof(float); }
  /// Teams of a launch: one per (node row, head) of the plan bound.
  static int64_t leagueSize(VerifyPlan const &plan) { return plan.max_nodes * plan.num_heads; }

  KOKKOS_INLINE_FUNCTION void operator()(Member const &member) const
  {
    int const H = a.batch.num_heads;
    int64_t const row = member.league_rank() / H;
    int const h = member.league_rank() % H;
    if (row >= a.qo_indptr(a.batch.batch_size))
      return;
    // The request of this row: qo_indptr(b) <= row < qo_indptr(b + 1), by bisection.
    int lo = 0, hi = a.batch.batch_size;
    while (hi - lo > 1)
    {
      int const mid = (lo + hi) / 2;
      if (a.qo_indptr(mid) <= row)
        lo = mid;
      else
        hi = mid;
    }
    if (lo >= max_batch)
      return;
    float *lse = static_cast<float *>(member.team_scratch(0).get_shmem(scratchBytes(partials)));
    float *w = lse + partials;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, partials),
                         [&](int s) { lse[s] = ws_lse((s * node_capacity + row) * H + h); });
    member.team_barrier();
    float mx = NEG_INF;
    for (int s = 0; s < partials; ++s)
      mx = lse[s] > mx ? lse[s] : mx;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, partials),
                         [&](int s) { w[s] = lse[s] == NEG_INF ? 0.f : Compat::exp(lse[s] - mx); });
    member.team_barrier();
    float sum = 0.f;
    for (int s = 0; s < partials; ++s)
      sum += w[s];
    // sum == 0 only if the row sees no key at all (a mask without its diagonal): 0/0 = NaN is
    // written, as the reference gives, so a check flags it.
    float const inv = 1.f / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, D_V / CB), [&](int blk) {
      int const c0 = blk * CB;
      Float4 acc[CB / 4] = {};
      bool any = false;
      float const *o = ws_out.data() + (row * H + h) * D_V + c0;
      int64_t const partial_stride = node_capacity * H * D_V;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#pragma unroll 4
#endif
      for (int s = 0; s < partials; ++s)
      {
        float const ws = w[s] * inv;
        if (!(ws > 0.f))
          continue;
        any = true;
        for (int q = 0; q < CB / 4; ++q)
        {
          Float4 const x = load16<Float4>(o + s * partial_stride + 4 * q);
          for (int c = 0; c < 4; ++c)
            acc[q].v[c] += ws * x.v[c];
        }
      }
      uint16_t *dst = a.out.data() + (row * H + h) * D_V + c0;
      for (int c = 0; c < CB; ++c)
        dst[c] = any ? floatToBf16(acc[c / 4].v[c % 4]) : BF16_QUIET_NAN;
    });
  }
};

/// \brief Enqueues split + combine on \p space. \pre ws was made for \p plan with room for the
/// batch's node rows; the batch is within the plan bounds; \p plan was made with the same Tiles.
/// Launch shapes depend on the plan only.
template <class ExecutionSpace, class TileProducts = TeamTileProducts, class Tiles = VerifyTiles<ExecutionSpace>>
void verifyAttentionTeams(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                          VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  // Light-weight launches pass the functor as a kernel argument. Without the hint, Kokkos::Cuda
  // copies functors over 512 bytes (these kernels' argument Views) to constant memory behind an
  // event synchronisation, which a stream under graph capture refuses. Host spaces hand teams out
  // dynamically: the tree partial and the last prefix chunk are shorter than the others.
  using Policy = decltype(Kokkos::Experimental::require(
      Kokkos::TeamPolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>(),
      Kokkos::Experimental::WorkItemProperty::HintLightWeight));
  if (plan.leagueSize() == 0)
    return;
  if constexpr (Tiles::STREAMED)
  {
    if constexpr (Tiles::GEMM_BLOCKS)
      launchSgemmSplit<ExecutionSpace, Tiles>(space, args, ws, plan);
    else
      launchStreamedSplit<ExecutionSpace, Tiles>(space, args, ws, plan);
  }
  else
  {
    size_t const bytes = splitScratchBytes<Tiles>(plan);
    Policy split_policy(space, static_cast<int>(plan.leagueSize()), Tiles::TEAM_SIZE, Tiles::VECTOR_LENGTH);
    int const level = bytes <= static_cast<size_t>(split_policy.scratch_size_max(0)) ? 0 : 1;
    if (bytes > static_cast<size_t>(split_policy.scratch_size_max(1)))
      throw Unsupported("verify plan: " + std::to_string(plan.rows_per_tile) + " rows per tile need " +
                        std::to_string(bytes) + " bytes of team scratch, more than this space offers");
    split_policy.set_scratch_size(level, Kokkos::PerTeam(bytes));
    auto const launch = [&](auto kv) {
      VerifySplitKernel<ExecutionSpace, TileProducts, Tiles, decltype(kv)::value> split{
          args, ws.partial_out, ws.partial_lse, ws.node_capacity, plan, level};
      Kokkos::parallel_for("canopy::verifyAttention::split_tiles", split_policy, split);
    };
    // Only products that declare it read FP8 pools: the others are compiled for bf16 alone.
    if constexpr (TileProducts::READS_FP8)
      withKvDtype(args.batch.kv_dtype, launch);
    else if (args.batch.kv_dtype == KvDtype::kBf16)
      launch(KvDtypeConstant<KvDtype::kBf16>{});
    else
      throw Unsupported(std::string(TileProducts::name()) + ": reads bf16 KV pools only, not " +
                        toString(args.batch.kv_dtype));
  }

  using Combine = VerifyCombineKernel<ExecutionSpace, Tiles>;
  size_t const cbytes = Combine::scratchBytes(plan.numPartials());
  Policy combine_policy(space, static_cast<int>(Combine::leagueSize(plan)), Tiles::COMBINE_TEAM_SIZE);
  Combine combine{args, ws.partial_out, ws.partial_lse, ws.node_capacity, plan.numPartials(), plan.max_batch};
  Kokkos::parallel_for("canopy::verifyAttention::combine", combine_policy.set_scratch_size(0, Kokkos::PerTeam(cbytes)),
                       combine);
}

/// \brief Splits for \p bounds when a design asks for auto (nsplit 0), from the space's
/// concurrency, what it tells of its device (\p facts), and the plan's teams per split only (never
/// device values):
/// - one host thread: 1 (splits only add work there: 5-20% at 16, docs/results/kokkos-host.md);
/// - host threads: about 16 teams per thread, so that the dynamic schedule evens out the short
///   partials and the last round of teams (B = 8, T = 33 on 16 threads of the GPU machine's host,
///   32 splits against the 8 of 4 teams per thread, 4 interleaved rounds: 1.05-1.11x at P = 16K,
///   0.99-1.08x at P = 4K; docs/results/kokkos4.md);
/// - the sgemm tiles (the GPU default): the count the league model of canopy_SplitModel.hpp
///   predicts fastest (the fewest within 2% of it), over counts that give every split the same
///   whole number of KV tiles, up to 128;
/// - the streamed tiles: concurrency / team threads / 2 teams (two waves of 2 resident teams per
///   SM), capped at 64 and at one split per two KV tiles of the longest prefix.
template <class ExecutionSpace, class Tiles = VerifyTiles<ExecutionSpace>>
int autoNsplit(PlanBounds const &bounds, int concurrency, DeviceFacts const &facts = {})
{
  VerifyPlan const one = planVerify<ExecutionSpace, Tiles>(bounds, 1);
  if constexpr (Tiles::STREAMED)
    if constexpr (Tiles::GEMM_BLOCKS)
    {
      // A team's shared memory: its scratch, Kokkos' team-reduction reserve and the 1 KB the GPU
      // reserves per block.
      int64_t const team_shared =
          static_cast<int64_t>(SgemmScratch<Tiles>::request() + cudaTeamReductionReserve(Tiles::TEAM_SIZE)) + 1024;
      TeamSlots const slots = teamSlots(concurrency, facts, Tiles::TEAM_SIZE, team_shared, Tiles::MIN_TEAMS_PER_SM);
      return modelNsplit(bounds, one.num_head_groups, one.row_tiles, one.rows_per_tile / one.heads_per_group,
                         Tiles::KV_TILE, slots);
    }
  int64_t const teams_per_split = std::max<int64_t>(1, one.leagueSize() / one.numPartials());
  int64_t target = 0;
  if constexpr (Tiles::STREAMED)
    target = concurrency / (Tiles::TEAM_SIZE * Tiles::VECTOR_LENGTH) / 2;
  else
    target = concurrency <= 1 ? 1 : 16 * static_cast<int64_t>(concurrency);
  int64_t const n = (target + teams_per_split / 2) / teams_per_split;
  int64_t const by_prefix = std::max<int64_t>(1, bounds.max_prefix / (2 * Tiles::KV_TILE));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({n, by_prefix, 64})));
}

/// \brief What \p space tells of its device for autoNsplit: Kokkos::Cuda its SM count and shared
/// memory per SM; other spaces nothing (the split rule then works from the concurrency).
template <class ExecutionSpace>
DeviceFacts deviceFacts([[maybe_unused]] ExecutionSpace const &space)
{
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<ExecutionSpace, Kokkos::Cuda>)
  {
    cudaDeviceProp const &p = space.cuda_device_prop();
    return DeviceFacts{p.multiProcessorCount, static_cast<int64_t>(p.sharedMemPerMultiprocessor)};
  }
#endif
  return DeviceFacts{};
}

/// \brief autoNsplit on a default instance of \p ExecutionSpace: its concurrency and device facts.
template <class ExecutionSpace, class Tiles>
int autoNsplitHere(PlanBounds const &bounds)
{
  ExecutionSpace const space;
  return autoNsplit<ExecutionSpace, Tiles>(bounds, space.concurrency(), deviceFacts(space));
}

/// \brief The portable path (kokkos-team): the streamed kernel on GPUs, the resident one on hosts.
template <class ExecutionSpace>
void verifyAttentionKokkos(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                           VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  verifyAttentionTeams<ExecutionSpace, TeamTileProducts>(space, args, ws, plan);
}
} // namespace canopy::Impl
