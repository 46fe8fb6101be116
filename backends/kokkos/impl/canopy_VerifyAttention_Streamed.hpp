/// \file canopy_VerifyAttention_Streamed.hpp
/// \brief The portable split kernel shaped for GPUs ("streamed" tiles): a team holds a 32-row tile
/// and streams Q, K and V through level-0 scratch in stages, each thread keeping its block of the
/// running output and of the scores in registers across the whole KV loop.
///
/// Why this shape: Kokkos 4 offers level-0 team scratch up to sharedMemPerBlock less its own
/// reserve (40,928 bytes on every NVIDIA GPU, no opt-in), too little for two buffers of any stage.
/// The team lambda is therefore written SPMD-style: every thread owns fixed work items by
/// team_rank(), and its accumulators are locals that live across team_barrier() (nested
/// TeamThreadRange loops keep no state across a barrier). That buys two things the nested form
/// could not have: the output accumulator never leaves registers (64 floats per thread), and the
/// next stage's global loads are issued into registers before the current stage is computed, so
/// one scratch buffer per operand still hides the load latency (the register prefetch of
/// classic SGEMM kernels). Host spaces run a team on fewer threads, each serving several work
/// items in turn (tests run it on one); the host designs use the resident tiles instead.
#pragma once

#include "canopy_KokkosCompat.hpp"
#include "canopy_VerifyArgs.hpp"
#include "impl/canopy_KvTileLoad.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

namespace canopy::Impl
{
/// \brief Tile shape of the streamed kernel. The decomposition into WORK_ITEMS is fixed;
/// TEAM_SIZE is how many threads a space launches per team (a GPU: one per work item).
struct StreamedTiles
{
  static constexpr bool STREAMED = true;
  static constexpr bool GEMM_BLOCKS = false;  ///< not the sgemm kernel (canopy_VerifyAttention_Sgemm.hpp)
  static constexpr int WORK_ITEMS = 256;
  static constexpr int TEAM_SIZE = WORK_ITEMS;
  static constexpr int VECTOR_LENGTH = 1;
  /// Registers: <= 65536 / (256 x 2) = 128 per thread, so two teams (16 warps) share an SM and
  /// one computes while the other waits at a barrier (35 KB of scratch each).
  static constexpr int MIN_TEAMS_PER_SM = 2;
  static constexpr int ROWS = 32;     ///< (node, head) rows of a team: 4 nodes x 8 heads
  static constexpr int KV_TILE = 64;  ///< keys per step of the online softmax
  static constexpr int D_CHUNK = 64;  ///< Q/K columns per score stage (9 stages per tile)
  static constexpr int V_KEYS = 8;    ///< keys per value stage (8 stages per tile)
  static constexpr int ROW_BLOCK = 1;
  static constexpr int MAX_ROWS = ROWS;
  static constexpr int COMBINE_TEAM_SIZE = 128;
  static constexpr int COMBINE_COLS = 4;
};

/// \brief Which scores and outputs work item \p w owns. Work items 32k..32k+31 are one warp on a
/// GPU; the layouts are chosen per warp so that shared-memory reads are broadcasts or hit distinct
/// banks. A 16-byte read costs a lane's share of 4 wavefronts whoever shares its address, so what
/// bounds a block is FMAs per float read: an SM needs 4 (128 FMA/clk, 32 floats/clk).
/// - scores: warp k holds rows 16(k/4) .. +15 and keys 16(k%4) .. +15 of the 32 x 64 tile; a lane
///   holds rows row0 + 8i (i < 2) and keys key0 + 4j (j < 4): 6 floats read per 8 FMAs, so the
///   score stages are shared-memory bound at about a third of the FMA rate (measured:
///   docs/results/kokkos4.md). Larger blocks need more accumulators than 128 registers leave
///   beside the output's 64.
/// - values: warp k holds output columns 64k .. +63 for all 32 rows; a lane holds rows row0 + i
///   (i < 8) and columns col0 + 32h + c (h < 2, c < 4): 16 floats read per 64 FMAs.
struct StreamedOwnership
{
  static constexpr int SCORE_ROWS = 2, SCORE_KEYS = 4, ROW_STEP = 8, KEY_STEP = 4;
  static constexpr int VALUE_ROWS = 8, VALUE_HALVES = 2, HALF_COLS = 32;
  static constexpr int KEY_GROUPS = 16;  ///< score owners per row: the softmax's partial maxima per row

  int score_row0, score_key0, key_group;
  int value_row0, value_col0;

  KOKKOS_INLINE_FUNCTION explicit StreamedOwnership(int w)
  {
    int const warp = w / 32, lane = w % 32;
    score_row0 = (warp / 4) * 16 + lane / 4;
    score_key0 = (warp % 4) * 16 + lane % 4;
    key_group = (warp % 4) * 4 + lane % 4;
    value_row0 = (lane / 8) * VALUE_ROWS;
    value_col0 = warp * 64 + (lane % 8) * 4;
  }
};

/// \brief Scratch of one streamed team, in Float4 units unless noted. Region A holds the Q chunk
/// during the score stages and P^T during the value stages; region B the K chunk, then a V chunk.
template <class Tiles>
struct StreamedScratch
{
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE;
  /// Q/K chunk rows one Float4 longer than the data: 8 rows read by one 16-byte load per lane
  /// start 4 banks apart and hit 32 distinct banks.
  static constexpr int QK_STRIDE = Tiles::D_CHUNK / 4 + 1;
  /// P^T[key][row], rows padded to 40 floats: the softmax's scalar stores (4 keys x 8 rows per
  /// warp) hit 32 distinct banks, and the value stage's 16-byte reads stay aligned.
  static constexpr int PT_STRIDE = R / 4 + 2;
  static constexpr int V_STRIDE = D_V / 4;  ///< V chunk [key][col]: a lane octet reads 128 consecutive bytes
  static constexpr int KEY_GROUPS = StreamedOwnership::KEY_GROUPS;
  static constexpr int Q_CHUNK = R * QK_STRIDE, K_CHUNK = N * QK_STRIDE;
  static constexpr int P_T = N * PT_STRIDE, V_CHUNK = Tiles::V_KEYS * V_STRIDE;
  static constexpr int REGION_A = Q_CHUNK > P_T ? Q_CHUNK : P_T;
  static constexpr int REGION_B = K_CHUNK > V_CHUNK ? K_CHUNK : V_CHUNK;

  /// Byte offsets of the regions from the 64-byte aligned base. The scratch is one pointer and
  /// these constants, not ten pointers: pointers held across the KV loop cost two registers each.
  static constexpr size_t A_AT = 0;
  static constexpr size_t B_AT = A_AT + alignedBytes(REGION_A * sizeof(Float4));
  static constexpr size_t PART_MAX_AT = B_AT + alignedBytes(REGION_B * sizeof(Float4));
  static constexpr size_t PART_SUM_AT = PART_MAX_AT + alignedBytes(R * KEY_GROUPS * sizeof(float));
  static constexpr size_t M_AT = PART_SUM_AT + alignedBytes(R * KEY_GROUPS * sizeof(float));
  static constexpr size_t L_AT = M_AT + alignedBytes(R * sizeof(float));
  static constexpr size_t M_NEXT_AT = L_AT + alignedBytes(R * sizeof(float));
  static constexpr size_t ALPHA_AT = M_NEXT_AT + alignedBytes(R * sizeof(float));
  static constexpr size_t SLOT_AT = ALPHA_AT + alignedBytes(R * sizeof(float));
  static constexpr size_t VIS_AT = SLOT_AT + alignedBytes(N * sizeof(int64_t));
  static constexpr size_t END = VIS_AT + alignedBytes(size_t(R) * N);

  char *base;

  KOKKOS_INLINE_FUNCTION static constexpr size_t bytes() { return 64 + END; }
  KOKKOS_INLINE_FUNCTION explicit StreamedScratch(void *raw)
      : base(static_cast<char *>(raw) + (64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64)
  {
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION T *at(size_t offset) const
  {
    return reinterpret_cast<T *>(base + offset);
  }
  KOKKOS_INLINE_FUNCTION Float4 *qChunk() const { return at<Float4>(A_AT); }  ///< [R][QK_STRIDE]
  KOKKOS_INLINE_FUNCTION Float4 *pT() const { return at<Float4>(A_AT); }      ///< [N][PT_STRIDE]
  KOKKOS_INLINE_FUNCTION Float4 *kChunk() const { return at<Float4>(B_AT); }  ///< [N][QK_STRIDE]
  KOKKOS_INLINE_FUNCTION Float4 *vChunk() const { return at<Float4>(B_AT); }  ///< [V_KEYS][V_STRIDE]
  /// [R][KEY_GROUPS] the softmax's per-owner maxima and sums
  KOKKOS_INLINE_FUNCTION float *partMax() const { return at<float>(PART_MAX_AT); }
  KOKKOS_INLINE_FUNCTION float *partSum() const { return at<float>(PART_SUM_AT); }
  /// [R] running max and sum, this tile's new max and rescale
  KOKKOS_INLINE_FUNCTION float *m() const { return at<float>(M_AT); }
  KOKKOS_INLINE_FUNCTION float *l() const { return at<float>(L_AT); }
  KOKKOS_INLINE_FUNCTION float *mNext() const { return at<float>(M_NEXT_AT); }
  KOKKOS_INLINE_FUNCTION float *alpha() const { return at<float>(ALPHA_AT); }
  KOKKOS_INLINE_FUNCTION int64_t *slot() const { return at<int64_t>(SLOT_AT); }  ///< [N] pool row of each key of the tile
  KOKKOS_INLINE_FUNCTION uint8_t *vis() const { return at<uint8_t>(VIS_AT); }    ///< [R][N] tree visibility
};

/// \brief The streamed split kernel: one team per (request, head group, partial, row tile), the
/// row tile fastest so that the teams reading one KV chunk run together and share it through L2.
/// Partials are as in the resident kernel (prefix chunks, then the masked tree part); each writes
/// its normalised output and log-sum-exp per (node, head), an empty chunk only lse = -inf.
///
/// Per 64-key tile a team runs 17 stages (9 score stages of 64 columns, 8 value stages of 8 keys).
/// A stage is: barrier (nobody reads the buffer any more), store the prefetched registers to
/// scratch, barrier, issue the next stage's global loads into registers, compute this stage. The
/// softmax sits between the last score stage and the first value stage. \p KV: the pool's kv dtype
/// (KvTileLoad: FP8 pieces travel as bytes and are dequantised where they are widened).
template <class ExecutionSpace, class Tiles, KvDtype KV = KvDtype::kBf16>
struct VerifyStreamedKernel : RowTileKernelBase<typename ExecutionSpace::memory_space, Tiles::KV_TILE>
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = StreamedScratch<Tiles>;
  using Own = StreamedOwnership;
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE, DC = Tiles::D_CHUNK, VK = Tiles::V_KEYS;
  static constexpr int W = Tiles::WORK_ITEMS;
  static_assert(Tiles::VECTOR_LENGTH == 1, "SPMD team: one lane per thread");
  static_assert(W % Tiles::TEAM_SIZE == 0, "every thread serves the same number of work items");
  static constexpr int ITEMS_PER_THREAD = W / Tiles::TEAM_SIZE;
  static_assert(W == 256 && R == 32 && N == 64, "StreamedOwnership covers 32 rows x 64 keys and 32 rows x 512 columns");
  static_assert(Own::SCORE_ROWS * Own::SCORE_KEYS * W == R * N, "score blocks tile the score tile");
  static_assert(Own::VALUE_ROWS * Own::VALUE_HALVES * 4 * W == R * D_V, "value blocks tile the output");
  static constexpr int QK_STAGES = D_QK / DC, V_STAGES = N / VK, STAGES = QK_STAGES + V_STAGES;
  static_assert(D_QK % DC == 0 && N % VK == 0 && DC % 8 == 0, "stages are whole 16-byte loads");
  static constexpr int PIECES_PER_ROW = DC / 8, V_PIECES_PER_KEY = D_V / 8;  ///< 16-byte loads
  static constexpr int Q_PIECES = R * PIECES_PER_ROW / W, K_PIECES = N * PIECES_PER_ROW / W;
  static constexpr int V_PIECES = VK * V_PIECES_PER_KEY / W;
  static_assert(Q_PIECES * W == R * PIECES_PER_ROW && K_PIECES * W == N * PIECES_PER_ROW &&
                    V_PIECES * W == VK * V_PIECES_PER_KEY,
                "every work item stages the same number of 16-byte pieces");
  static constexpr int PREFETCH = Q_PIECES + K_PIECES > V_PIECES ? Q_PIECES + K_PIECES : V_PIECES;

  /// What one work item keeps in registers across the team's barriers.
  struct ItemState
  {
    Float4 o[Own::VALUE_ROWS][Own::VALUE_HALVES];   ///< running (unnormalised) output block
    Bf16x8 next[PREFETCH];                          ///< the next stage's pieces, in flight
    int64_t key_slot[K_PIECES];                     ///< pool rows of a new tile's K pieces, until stored
  };

  using Base = RowTileKernelBase<MemorySpace, Tiles::KV_TILE>;
  using typename Base::Task;
  using typename Base::TileView;
  using Base::a;
  using Base::node_capacity;
  using Base::plan;
  using Base::poolRow;
  using Base::ws_lse;
  using Base::ws_out;
  using Base::wsRow;

  KOKKOS_INLINE_FUNCTION void operator()(Member const &member) const
  {
    Task t;
    if (this->beginTask(member, t))
      run(member, t);
  }

  KOKKOS_FORCEINLINE_FUNCTION void run(Member const &member, Task const &t) const
  {
    Scratch const sc(this->teamScratch(member).get_shmem(Scratch::bytes()));
    ItemState st[ITEMS_PER_THREAD];
    int const first_item = member.team_rank() * ITEMS_PER_THREAD;
    for (int v = 0; v < ITEMS_PER_THREAD; ++v)
    {
      int const w = first_item + v;
      for (int i = 0; i < Own::VALUE_ROWS; ++i)
        for (int h = 0; h < Own::VALUE_HALVES; ++h)
          st[v].o[i][h] = Float4{};
      if (w < R)
      {
        sc.m()[w] = NEG_INF;
        sc.l()[w] = 0.f;
      }
    }
    int64_t const ntiles = ceilDiv(t.hi - t.lo, N);
    TileView tile = t.tileAt(t.lo);
    for (int v = 0; v < ITEMS_PER_THREAD; ++v)
      loadStage(t, tile, first_item + v, st[v], 0, sc, true);
    // The stage loops are not unrolled: unrolled, they keep per-stage addresses live (255
    // registers). The scores live from the tile's first score stage to the softmax only.
    for (int64_t ti = 0; ti < ntiles; ++ti)
    {
      float s[ITEMS_PER_THREAD][Own::SCORE_ROWS][Own::SCORE_KEYS] = {};
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int stage = 0; stage < QK_STAGES; ++stage)
      {
        member.team_barrier();  // every item is done with the buffers the store below overwrites
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          storeStage(t, tile, first_item + v, st[v], stage, sc);
        member.team_barrier();
        // The next stage's loads first, so that they are in flight while this stage computes.
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          loadStage(t, tile, first_item + v, st[v], stage + 1, sc, false);
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          scoreStage(first_item + v, s[v], sc);
      }
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        maskAndPartialMax(t, tile, first_item + v, s[v], sc);
      member.team_barrier();
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        probabilities(first_item + v, s[v], sc);
      TileView const next = t.tileAt(tile.k0 + N);
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int stage = QK_STAGES; stage < STAGES; ++stage)
      {
        member.team_barrier();
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          storeStage(t, tile, first_item + v, st[v], stage, sc);
        member.team_barrier();
        if (stage + 1 < STAGES)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            loadStage(t, tile, first_item + v, st[v], stage + 1, sc, false);
        else if (ti + 1 < ntiles)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            loadStage(t, next, first_item + v, st[v], 0, sc, true);
        if (stage == QK_STAGES)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            rescale(first_item + v, st[v], sc);
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          valueStage(first_item + v, st[v], (stage - QK_STAGES) * VK, sc);
      }
      tile = next;
    }
    // l was last updated in the first value stage of the last tile, 7 barriers ago.
    for (int v = 0; v < ITEMS_PER_THREAD; ++v)
      writeOutput(t, first_item + v, st[v], sc);
  }

  /// Issues the global loads of \p stage of \p tile into st.next: Q and K pieces for a score stage
  /// (Q pre-scaled at the store), V pieces for a value stage. Rows past the tile's and keys past
  /// nk load zeros (p = 0 times a zero V row, never times garbage). \p new_tile: read this item's
  /// K pool rows from the index arrays (later stages of the tile reuse them).
  KOKKOS_FORCEINLINE_FUNCTION void loadStage(Task const &t, TileView const &tile, int w, ItemState &st, int stage,
                                        Scratch const &sc, bool new_tile) const
  {
    KvTileLoad<KV> const pool(a.batch);
    if (stage < QK_STAGES)
    {
      int const d0 = stage * DC;
      for (int p = 0; p < Q_PIECES; ++p)
      {
        int const u = w + p * W, row = u / PIECES_PER_ROW, part = u % PIECES_PER_ROW;
        int64_t const node = t.first_node + row / t.nh;
        st.next[p] = row < t.rows ? load16<Bf16x8>(a.q.data() + (node * a.batch.num_heads + t.h0 + row % t.nh) * D_QK + d0 + part * 8)
                                  : Bf16x8{};
      }
      for (int p = 0; p < K_PIECES; ++p)
      {
        int const u = w + p * W, key = u / PIECES_PER_ROW, part = u % PIECES_PER_ROW;
        // A new tile's pool rows come from the index arrays; its later stages read them back
        // from scratch, where the first store put them (no registers held across the tile).
        int64_t slot = -1;
        if (new_tile)
          slot = st.key_slot[p] = key < tile.nk ? poolRow(t, tile.k0 + key) : -1;
        else
          slot = key < tile.nk ? sc.slot()[key] : -1;
        st.next[Q_PIECES + p] = slot >= 0 ? pool.piece(slot, d0 + part * 8) : Bf16x8{};
      }
    }
    else
    {
      int const key0 = (stage - QK_STAGES) * VK;
      for (int p = 0; p < V_PIECES; ++p)
      {
        int const u = w + p * W, key = key0 + u / V_PIECES_PER_KEY, part = u % V_PIECES_PER_KEY;
        st.next[p] = key < tile.nk ? pool.piece(sc.slot()[key], part * 8) : Bf16x8{};
      }
    }
  }

  /// Converts st.next into the stage's scratch buffers. The first stage of a tile also records
  /// the tile's pool rows (for the value stages' loads) and, in the tree part, the visibility of
  /// the tile's keys from its nodes.
  KOKKOS_FORCEINLINE_FUNCTION void storeStage(Task const &t, TileView const &tile, int w, ItemState &st, int stage,
                                         Scratch const &sc) const
  {
    KvTileLoad<KV> const pool(a.batch);
    if (stage < QK_STAGES)
    {
      Float4 *q = sc.qChunk(), *k = sc.kChunk();
      for (int p = 0; p < Q_PIECES; ++p)
      {
        int const u = w + p * W, row = u / PIECES_PER_ROW, part = u % PIECES_PER_ROW;
        Float4 *dst = q + row * Scratch::QK_STRIDE + 2 * part;
        widenBf16x8(st.next[p], a.batch.sm_scale, dst[0], dst[1]);
      }
      for (int p = 0; p < K_PIECES; ++p)
      {
        int const u = w + p * W, key = u / PIECES_PER_ROW, part = u % PIECES_PER_ROW;
        Float4 *dst = k + key * Scratch::QK_STRIDE + 2 * part;
        pool.widen(st.next[Q_PIECES + p], stage * DC + part * 8, dst[0], dst[1]);
        if (stage == 0 && part == 0)
          sc.slot()[key] = st.key_slot[p];
      }
      if (stage == 0 && t.tree && w < t.ni)
        treeVisibilityRow<N>(a, t.b, t.node0, t.P, t.T, t.i0 + w, tile.k0, tile.nk, sc.vis() + w * N);
    }
    else
    {
      Float4 *vch = sc.vChunk();
      for (int p = 0; p < V_PIECES; ++p)
      {
        int const u = w + p * W, key = u / V_PIECES_PER_KEY, part = u % V_PIECES_PER_KEY;
        Float4 *dst = vch + key * Scratch::V_STRIDE + 2 * part;
        pool.widen(st.next[p], part * 8, dst[0], dst[1]);
      }
    }
  }

  /// acc += Q_chunk K_chunk^T for this item's 2 x 4 score block.
  KOKKOS_FORCEINLINE_FUNCTION void scoreStage(int w, float (&acc)[Own::SCORE_ROWS][Own::SCORE_KEYS], Scratch const &sc) const
  {
    Own const own(w);
    Float4 const *q = sc.qChunk() + own.score_row0 * Scratch::QK_STRIDE;
    Float4 const *k = sc.kChunk() + own.score_key0 * Scratch::QK_STRIDE;
    // Unrolled by 2 (not more: 128 registers): the next step's shared loads issue before this
    // step's FMAs. With the value loop's, 4.4% faster on an H200 than not unrolled
    // (docs/results/h200-kokkos4-spmd/compare-unroll.md).
#if defined(__CUDA_ARCH__)
#pragma unroll 2
#endif
    for (int d4 = 0; d4 < DC / 4; ++d4)
    {
      Float4 qv[Own::SCORE_ROWS], kv[Own::SCORE_KEYS];
      for (int i = 0; i < Own::SCORE_ROWS; ++i)
        qv[i] = q[i * Own::ROW_STEP * Scratch::QK_STRIDE + d4];
      for (int j = 0; j < Own::SCORE_KEYS; ++j)
        kv[j] = k[j * Own::KEY_STEP * Scratch::QK_STRIDE + d4];
      for (int e = 0; e < 4; ++e)
        for (int i = 0; i < Own::SCORE_ROWS; ++i)
          for (int j = 0; j < Own::SCORE_KEYS; ++j)
            acc[i][j] += qv[i].v[e] * kv[j].v[e];
    }
  }

  /// Invisible scores become -inf (keys past nk, rows past the tile's, tree keys off the row's
  /// ancestor set); each item's maximum over its keys per row goes to part_max.
  KOKKOS_FORCEINLINE_FUNCTION void maskAndPartialMax(Task const &t, TileView const &tile, int w, float (&s)[Own::SCORE_ROWS][Own::SCORE_KEYS],
                                                Scratch const &sc) const
  {
    Own const own(w);
    for (int i = 0; i < Own::SCORE_ROWS; ++i)
    {
      int const r = own.score_row0 + i * Own::ROW_STEP;
      uint8_t const *vis = sc.vis() + (r < t.rows ? r / t.nh : 0) * N;
      float mx = NEG_INF;
      for (int j = 0; j < Own::SCORE_KEYS; ++j)
      {
        int const c = own.score_key0 + j * Own::KEY_STEP;
        bool const ok = r < t.rows && c < tile.nk && (!t.tree || vis[c] != 0);
        s[i][j] = ok ? s[i][j] : NEG_INF;
        mx = s[i][j] > mx ? s[i][j] : mx;
      }
      sc.partMax()[r * Scratch::KEY_GROUPS + own.key_group] = mx;
    }
  }

  /// The row's new maximum from the partial maxima, p = exp(s - m_new) to P^T, partial sums; the
  /// row's first key group records m_next and alpha = exp(m_old - m_new) for the value stages.
  KOKKOS_FORCEINLINE_FUNCTION void probabilities(int w, float const (&s)[Own::SCORE_ROWS][Own::SCORE_KEYS], Scratch const &sc) const
  {
    Own const own(w);
    float *pt = reinterpret_cast<float *>(sc.pT());
    for (int i = 0; i < Own::SCORE_ROWS; ++i)
    {
      int const r = own.score_row0 + i * Own::ROW_STEP;
      float const m_old = sc.m()[r];
      float m_new = m_old;
      for (int g = 0; g < Scratch::KEY_GROUPS; ++g)
      {
        float const x = sc.partMax()[r * Scratch::KEY_GROUPS + g];
        m_new = x > m_new ? x : m_new;
      }
      float sum = 0.f;
      for (int j = 0; j < Own::SCORE_KEYS; ++j)
      {
        float const x = s[i][j];
        float const p = m_new == NEG_INF || x == NEG_INF ? 0.f : expNonPositive(x - m_new);
        pt[(own.score_key0 + j * Own::KEY_STEP) * (Scratch::PT_STRIDE * 4) + r] = p;
        sum += p;
      }
      sc.partSum()[r * Scratch::KEY_GROUPS + own.key_group] = sum;
      if (own.key_group == 0)
      {
        sc.mNext()[r] = m_new;
        sc.alpha()[r] = m_new == NEG_INF ? 1.f : expNonPositive(m_old - m_new);
      }
    }
  }

  /// Before the tile's first value stage: this item's output rows times alpha; item r < R also
  /// moves row r's running sum and max on (nobody else reads them in the value stages).
  KOKKOS_FORCEINLINE_FUNCTION void rescale(int w, ItemState &st, Scratch const &sc) const
  {
    Own const own(w);
    for (int i = 0; i < Own::VALUE_ROWS; ++i)
    {
      float const alpha = sc.alpha()[own.value_row0 + i];
      for (int h = 0; h < Own::VALUE_HALVES; ++h)
        for (int c = 0; c < 4; ++c)
          st.o[i][h].v[c] *= alpha;
    }
    if (w < R)
    {
      float sum = 0.f;
      for (int g = 0; g < Scratch::KEY_GROUPS; ++g)
        sum += sc.partSum()[w * Scratch::KEY_GROUPS + g];
      sc.l()[w] = sc.l()[w] * sc.alpha()[w] + sum;
      sc.m()[w] = sc.mNext()[w];
    }
  }

  /// o += P[:, keys key0 .. key0 + VK) V_chunk for this item's 8 x 8 output block.
  KOKKOS_FORCEINLINE_FUNCTION void valueStage(int w, ItemState &st, int key0, Scratch const &sc) const
  {
    Own const own(w);
    Float4 const *pt = sc.pT() + key0 * Scratch::PT_STRIDE + own.value_row0 / 4;
    Float4 const *vch = sc.vChunk() + own.value_col0 / 4;
#if defined(__CUDA_ARCH__)
#pragma unroll 2
#endif
    for (int n = 0; n < VK; ++n)
    {
      Float4 p[Own::VALUE_ROWS / 4], x[Own::VALUE_HALVES];
      for (int i4 = 0; i4 < Own::VALUE_ROWS / 4; ++i4)
        p[i4] = pt[n * Scratch::PT_STRIDE + i4];
      for (int h = 0; h < Own::VALUE_HALVES; ++h)
        x[h] = vch[n * Scratch::V_STRIDE + h * (Own::HALF_COLS / 4)];
      for (int i = 0; i < Own::VALUE_ROWS; ++i)
        for (int h = 0; h < Own::VALUE_HALVES; ++h)
          for (int c = 0; c < 4; ++c)
            st.o[i][h].v[c] += p[i / 4].v[i % 4] * x[h].v[c];
    }
  }

  /// This item's output block divided by l into the partial's workspace rows (rows past the
  /// tile's belong to no node), and, for item r < rows, row r's log-sum-exp.
  KOKKOS_FORCEINLINE_FUNCTION void writeOutput(Task const &t, int w, ItemState const &st, Scratch const &sc) const
  {
    Own const own(w);
    float *out = ws_out.data();
    for (int i = 0; i < Own::VALUE_ROWS; ++i)
    {
      int const r = own.value_row0 + i;
      if (r >= t.rows)
        continue;
      float const l = sc.l()[r];
      float const inv = l > 0.f ? 1.f / l : 0.f;
      int64_t const at = wsRow(t.split, t.first_node + r / t.nh, t.h0 + r % t.nh) * D_V + own.value_col0;
      for (int h = 0; h < Own::VALUE_HALVES; ++h)
      {
        Float4 y = st.o[i][h];
        for (int c = 0; c < 4; ++c)
          y.v[c] *= inv;
        store16(out + at + h * Own::HALF_COLS, y);
      }
    }
    if (w < t.rows)
    {
      float const l = sc.l()[w];
      ws_lse(wsRow(t.split, t.first_node + w / t.nh, t.h0 + w % t.nh)) = l > 0.f ? sc.m()[w] + Compat::log(l) : NEG_INF;
    }
  }
};

/// \brief Enqueues the streamed split kernel. \pre the plan was made with Tiles.
template <class ExecutionSpace, class Tiles>
void launchStreamedSplit(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                         VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  withKvDtype(args.batch.kv_dtype, [&](auto kv) {
    launchRowTileSplit<VerifyStreamedKernel<ExecutionSpace, Tiles, decltype(kv)::value>, Tiles>(
        space, "canopy::verifyAttention::split_streamed", "kokkos-team (streamed tiles)", args, ws, plan,
        StreamedScratch<Tiles>::bytes());
  });
}
} // namespace canopy::Impl
