/// \file canopy_VerifyAttention_Sgemm.hpp
/// \brief The portable split kernel shaped like an SIMT SGEMM ("sgemm" tiles), the GPU default: a
/// 128-thread team holds a 64-row tile, every thread owns an 8 x 8 block of the scores and, in
/// turn, 8 x 8 blocks of the output, and both products read k-major operand tiles from level-0
/// scratch with 16-byte loads, double-buffered.
///
/// Model (fp32 FMA on CUDA cores; an SM issues 128 FMA/clk and reads 128 B/clk of shared memory; a
/// warp's 16-byte shared load costs 4 wavefronts whatever its addresses, so what bounds a loop is
/// FMAs per float read, and an SM needs 4):
/// - Work per 128-key tile of a 64-row team: scores 64 x 128 x 576 = 4.72 M FMA, P.V 64 x 128 x 512
///   = 4.19 M FMA, softmax 8,192 exps (one per 1,088 FMAs).
/// - Scores: per d, a thread reads 8 Q values (2 x 16 B) and 8 K values (2 x 16 B) and issues 64
///   FMAs: 4 FMAs per float, the rate an SM needs. P.V: per key, 8 P values and 8 V values for 64
///   FMAs: 4 again. The 2 x 4 score block of the streamed tiles read 6 floats per 8 FMAs (1.33), a
///   third of the rate, which was the measured ceiling of that kernel (docs/results/kokkos4.md).
/// - Other shared traffic per thread and 16-column score stage (1,024 FMA): 24 scalar stores of the
///   transposed Q/K chunk (1 wavefront per warp each) beside 64 16-byte loads (4 each): about 9%
///   over the loads; per value stage (512 FMA): 2 16-byte stores beside 32 16-byte loads.
///   Shared-memory bound at about 91% of the FMA rate, issue-bound near 89% (1,024 FFMA of ~1,150
///   instructions per score stage); with barriers, the per-tile softmax (2 of ~100 barrier
///   intervals) and the tile prologue's exposed global latency, the expectation is 55-70% of the
///   FMA ceiling at shapes that fill the GPU (T >= 33 at P >= 16K), less at B = 1, T = 17 where
///   3 row tiles, one of them 8 rows, fill the GPU only through the split count (128 splits there:
///   387 teams for 396 slots at 3 per SM on an H200; Impl::autoNsplit).
/// - Registers per thread: 64 score accumulators (score stages) or 64 output accumulators (value
///   stages; never both live), 16 operand floats per step (32 with the step unrolled by 2), 12 for
///   the next stage's loads in flight, plus addresses and the team's task: LaunchBounds<128, 4>
///   caps them at 128 for 4 teams (16 warps) per SM, where ptxas (sm_90) reports 116 / 180 bytes
///   of spill stores / loads with the inner loops not unrolled (SgemmTiles::INNER_UNROLL).
/// - Output: 64 rows x 512 columns is 256 floats per thread, too many to keep, so it lives in the
///   workspace between KV tiles (the partial's own rows, which hold its result at the end): each
///   tile runs 4 passes of 128 columns, and a pass reads the thread's 64 old outputs from global
///   memory (L2), rescales them and adds its P.V block. Per tile and team that is 128 KB read and
///   128 KB written for 8.9 M FMA, about 0.9 TB/s of L2 traffic on an H200 at the full FMA rate,
///   a small share of its L2 bandwidth; the first tile skips the read, the last one normalises.
/// - Scratch (level 0, 16-byte aligned by request): region A holds the double-buffered Q and K
///   chunks (2 x (16 x 68 + 16 x 132) floats = 25.6 KB) during the score stages and P^T
///   (128 keys x 68 rows = 34.8 KB) during the value stages; region B the double-buffered V chunks
///   (2 x 8 keys x 132 columns = 8.4 KB) or the softmax's partial maxima (4 KB); then the row
///   state, the tile's pool rows and the visibility bits: 46,336 bytes in all, 46,352 with the
///   16 bytes that the alignment request may need. Kokkos 4.6 on CUDA
///   admits 49,152 - 8 x (team size + 2) = 48,112 bytes for a 128-thread team (its
///   scratch_size_max(0), 40,936, assumes a 1024-thread team), and 4 teams take 185 KB of an SM.
/// - Occupancy: 4 teams x 4 warps per SM (registers and scratch both allow 4).
///
/// The team lambda is SPMD-style as in the streamed kernel (canopy_VerifyAttention_Streamed.hpp):
/// each thread owns fixed work items by team_rank() and keeps its accumulators in locals across
/// team_barrier(). Host spaces run a team on fewer threads, each serving several work items in
/// turn (tests run it on one and on two); the host designs use the resident tiles instead.
#pragma once

#include "canopy_KokkosCompat.hpp"
#include "canopy_VerifyArgs.hpp"
#include "impl/canopy_KvTileLoad.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

/// Full unrolling of the register-block loops on devices: an accumulator indexed by a loop
/// variable that is not unrolled would live in local memory.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define CANOPY_UNROLL _Pragma("unroll")
#else
#define CANOPY_UNROLL
#endif

namespace canopy::Impl
{
/// \brief Tile shape of the SGEMM-style kernel (the decomposition into WORK_ITEMS is fixed; TEAM_SIZE
/// is how many threads a space runs it on: a GPU one per work item).
struct SgemmTiles
{
  static constexpr bool STREAMED = true;
  static constexpr bool GEMM_BLOCKS = true;
  static constexpr int WORK_ITEMS = 128;
  static constexpr int TEAM_SIZE = WORK_ITEMS;
  static constexpr int VECTOR_LENGTH = 1;
  static constexpr int MIN_TEAMS_PER_SM = 4;  ///< <= 128 registers per thread (model above)
  /// Steps of the inner loops unrolled on devices: 1 keeps the spills at 116 / 180 bytes of spill
  /// stores / loads (ptxas, sm_90); 2 issues the next step's shared loads before this step's FMAs
  /// but spills 260 / 876 bytes at 128 registers. Four warps per scheduler are meant to hide the
  /// shared-load latency of the loop that is not unrolled.
  static constexpr int INNER_UNROLL = 1;
  static constexpr int ROWS = 64;             ///< (node, head) rows of a team: 8 nodes x 8 heads
  static constexpr int KV_TILE = 128;         ///< keys per step of the online softmax
  static constexpr int D_CHUNK = 16;          ///< Q/K columns per score stage (36 stages per tile)
  static constexpr int V_KEYS = 8;            ///< keys per value stage
  static constexpr int V_COLS = 128;          ///< output columns per value pass (4 passes per tile)
  static constexpr int ROW_BLOCK = 1;
  static constexpr int MAX_ROWS = ROWS;
  static constexpr int COMBINE_TEAM_SIZE = 128;
  static constexpr int COMBINE_COLS = 4;
};

/// \brief The sgemm tiles at 3 teams per SM (<= 168 registers) with the inner loops unrolled by 2
/// (52 / 68 bytes of spill stores / loads, ptxas, sm_90): fewer warps, more overlap within each.
/// The GPU default (VerifyTiles); SgemmTiles (4 teams per SM) is kokkos-team-portable-sgemm.
struct SgemmTilesThreePerSm : SgemmTiles
{
  static constexpr int MIN_TEAMS_PER_SM = 3;
  static constexpr int INNER_UNROLL = 2;
};

/// \brief Shared memory Kokkos 4.6 reserves per team on CUDA for its team reductions: (team_size +
/// 2) doubles.
constexpr size_t cudaTeamReductionReserve(int team_size) { return 8 * (static_cast<size_t>(team_size) + 2); }
/// \brief Level-0 team scratch that Kokkos 4.6 admits on CUDA for a team of \p team_size threads:
/// sharedMemPerBlock (48 KiB on every NVIDIA GPU without an opt-in, which Kokkos 4.6 never makes)
/// less the team-reduction reserve.
constexpr size_t cudaLevel0Admitted(int team_size) { return 49152 - cudaTeamReductionReserve(team_size); }

/// \brief Which 8 x 8 blocks work item \p w owns, in both products: rows row0 .. row0 + 7, and
/// columns (keys of the score tile, or output columns of a value pass) col0 + c and col0 + 64 + c
/// for c < 4. Work items 32k .. 32k + 31 are one warp on a GPU: two row groups times 16 column
/// groups, so each 16-byte operand load is either a broadcast (rows) or 16 consecutive quads
/// (columns), conflict-free in every quarter-warp.
struct SgemmOwnership
{
  static constexpr int BLOCK = 8, COL_GROUPS = 16, HALF = 64;
  int row0, col0, group;

  KOKKOS_INLINE_FUNCTION explicit SgemmOwnership(int w) : row0((w / COL_GROUPS) * BLOCK), col0((w % COL_GROUPS) * 4), group(w % COL_GROUPS) {}
  /// Offset of the block's column j (j < 8) from col0.
  KOKKOS_INLINE_FUNCTION static constexpr int colOffset(int j) { return (j / 4) * HALF + j % 4; }
};

/// \brief Scratch of one sgemm team, in floats unless noted; every region 16-byte aligned and typed
/// as Float4 (scalar elements are written as members of it).
template <class Tiles>
struct SgemmScratch
{
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE, DC = Tiles::D_CHUNK, VK = Tiles::V_KEYS, VC = Tiles::V_COLS;
  /// k-major rows padded by one quad: the transposing scalar stores (a warp writes 32 consecutive
  /// rows or keys of one d) and the 16-byte operand loads are conflict-free either way; the pad
  /// starts each d row 4 banks on, so that a store mapping spanning two d rows stays so.
  static constexpr int Q_STRIDE = R + 4, K_STRIDE = N + 4;
  static constexpr int PT_STRIDE = R + 4;  ///< P^T[key][row]
  static constexpr int V_STRIDE = VC + 4;  ///< V chunk [key][column]
  static constexpr int KEY_GROUPS = SgemmOwnership::COL_GROUPS;
  static constexpr int VIS_WORDS = N / 32;  ///< visibility bits per node of the tile
  static constexpr int QK_BUF = DC * Q_STRIDE + DC * K_STRIDE;
  static constexpr int P_T = N * PT_STRIDE;
  static constexpr int REGION_A = 2 * QK_BUF > P_T ? 2 * QK_BUF : P_T;
  static constexpr int V_BUF = VK * V_STRIDE;
  static constexpr int PART_MAX = R * KEY_GROUPS;
  static constexpr int REGION_B = 2 * V_BUF > PART_MAX ? 2 * V_BUF : PART_MAX;
  static_assert(Q_STRIDE % 4 == 0 && K_STRIDE % 4 == 0 && PT_STRIDE % 4 == 0 && V_STRIDE % 4 == 0 &&
                    QK_BUF % 4 == 0 && V_BUF % 4 == 0 && (DC * Q_STRIDE) % 4 == 0,
                "every row and buffer starts on 16 bytes");

  static constexpr size_t align16(size_t n) { return (n + 15) / 16 * 16; }
  static constexpr size_t A_AT = 0;
  static constexpr size_t B_AT = A_AT + align16(REGION_A * sizeof(float));
  static constexpr size_t M_AT = B_AT + align16(REGION_B * sizeof(float));
  static constexpr size_t L_AT = M_AT + align16(R * sizeof(float));
  static constexpr size_t M_NEXT_AT = L_AT + align16(R * sizeof(float));
  static constexpr size_t ALPHA_AT = M_NEXT_AT + align16(R * sizeof(float));
  static constexpr size_t SLOT_AT = ALPHA_AT + align16(R * sizeof(float));
  static constexpr size_t VIS_AT = SLOT_AT + align16(N * sizeof(int64_t));
  static constexpr size_t END = VIS_AT + align16(static_cast<size_t>(R) * VIS_WORDS * sizeof(uint32_t));

  char *base;

  KOKKOS_INLINE_FUNCTION static constexpr size_t bytes() { return END; }
  /// What a team requests: 16 bytes beyond the regions, so that get_shmem_aligned finds a 16-byte
  /// aligned start wherever the space puts the scratch base (on CUDA it is aligned already).
  KOKKOS_INLINE_FUNCTION static constexpr size_t request() { return END + 16; }
  KOKKOS_INLINE_FUNCTION explicit SgemmScratch(void *raw) : base(static_cast<char *>(raw)) {}
  template <class T>
  KOKKOS_INLINE_FUNCTION T *at(size_t offset) const
  {
    return reinterpret_cast<T *>(base + offset);
  }
  /// Q^T chunk [DC][Q_STRIDE] and K^T chunk [DC][K_STRIDE] of buffer \p buf (score stages)
  KOKKOS_INLINE_FUNCTION Float4 *qT(int buf) const { return at<Float4>(A_AT) + buf * (QK_BUF / 4); }
  KOKKOS_INLINE_FUNCTION Float4 *kT(int buf) const { return at<Float4>(A_AT) + buf * (QK_BUF / 4) + DC * Q_STRIDE / 4; }
  KOKKOS_INLINE_FUNCTION Float4 *pT() const { return at<Float4>(A_AT); }  ///< [N][PT_STRIDE] (value stages)
  KOKKOS_INLINE_FUNCTION Float4 *vChunk(int buf) const { return at<Float4>(B_AT) + buf * (V_BUF / 4); }
  KOKKOS_INLINE_FUNCTION float *partMax() const { return at<float>(B_AT); }  ///< [R][KEY_GROUPS] (softmax)
  KOKKOS_INLINE_FUNCTION float *m() const { return at<float>(M_AT); }
  KOKKOS_INLINE_FUNCTION float *l() const { return at<float>(L_AT); }
  KOKKOS_INLINE_FUNCTION float *mNext() const { return at<float>(M_NEXT_AT); }
  KOKKOS_INLINE_FUNCTION float *alpha() const { return at<float>(ALPHA_AT); }
  KOKKOS_INLINE_FUNCTION int64_t *slot() const { return at<int64_t>(SLOT_AT); }  ///< [N] pool row per key of the tile
  KOKKOS_INLINE_FUNCTION uint32_t *vis() const { return at<uint32_t>(VIS_AT); }  ///< [R][VIS_WORDS] tree visibility bits
};

static_assert(SgemmScratch<SgemmTiles>::request() <= cudaLevel0Admitted(SgemmTiles::TEAM_SIZE),
              "the sgemm tile fits the level-0 scratch Kokkos 4.6 admits for its team on CUDA");

/// \brief Float \p i of a Float4-typed region.
KOKKOS_FORCEINLINE_FUNCTION void setFloat(Float4 *a, int i, float x) { a[i >> 2].v[i & 3] = x; }
KOKKOS_FORCEINLINE_FUNCTION float getFloat(Float4 const *a, int i) { return a[i >> 2].v[i & 3]; }

/// \brief Bits c of the result: tree node \p i (of the request starting at node row \p node0)
/// sees tree node k0 + 32 \p word + c (0 past \p nk). The bit form of treeVisibilityRow.
template <class MemorySpace>
KOKKOS_INLINE_FUNCTION uint32_t treeVisibilityWord(VerifyArgs<MemorySpace> const &a, int b, int64_t node0, int64_t P,
                                                   int64_t T, int64_t i, int64_t k0, int nk, int word)
{
  int const c0 = 32 * word;
  int const c1 = nk < c0 + 32 ? nk : c0 + 32;
  uint32_t bits = 0;
  if (c0 < c1)
    forVisibleTreeKeys(a, b, node0, P, T, i, k0, c0, c1, [&](int c) { bits |= 1u << (c - c0); });
  return bits;
}

/// \brief The sgemm split kernel: one team per (request, head group, partial, row tile), the row
/// tile fastest, as the streamed kernel. Per 128-key tile: a prologue (pool rows, visibility, the
/// first Q/K chunk), 36 score stages, the softmax, 64 value stages (4 passes of 16). A stage is:
/// issue the next stage's global loads into registers, compute from one buffer, store the
/// registers into the other buffer, one barrier. \p KV: the pool's kv dtype (KvTileLoad: FP8 pieces
/// travel as bytes and are dequantised where they are widened).
template <class ExecutionSpace, class Tiles, KvDtype KV = KvDtype::kBf16>
struct VerifySgemmKernel : RowTileKernelBase<typename ExecutionSpace::memory_space, Tiles::KV_TILE>
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = SgemmScratch<Tiles>;
  using Own = SgemmOwnership;
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE, DC = Tiles::D_CHUNK, VK = Tiles::V_KEYS, VC = Tiles::V_COLS;
  static constexpr int W = Tiles::WORK_ITEMS, B8 = Own::BLOCK, UNROLL = Tiles::INNER_UNROLL;
  static_assert(Tiles::VECTOR_LENGTH == 1, "SPMD team: one lane per thread");
  static_assert(W % Tiles::TEAM_SIZE == 0, "every thread serves the same number of work items");
  static constexpr int ITEMS_PER_THREAD = W / Tiles::TEAM_SIZE;
  static_assert(W == (R / B8) * Own::COL_GROUPS, "one work item per 8-row group and column group");
  static_assert(N == 2 * Own::HALF && VC == 2 * Own::HALF, "a block's two column quads cover the key tile and the pass");
  static constexpr int QK_STAGES = D_QK / DC, V_STEPS = N / VK, V_PASSES = D_V / VC, V_STAGES = V_STEPS * V_PASSES;
  static_assert(D_QK % DC == 0 && DC % 8 == 0 && N % VK == 0 && D_V % VC == 0 && VC % 8 == 0, "stages are whole 16-byte loads");
  static constexpr int Q_PIECES = R * (DC / 8) / W, K_PIECES = N * (DC / 8) / W, V_PIECES = VK * (VC / 8) / W;
  static_assert(Q_PIECES * W == R * (DC / 8) && K_PIECES * W == N * (DC / 8) && V_PIECES * W == VK * (VC / 8) &&
                    Q_PIECES >= 1 && K_PIECES >= 1 && V_PIECES >= 1,
                "every work item stages the same number of 16-byte pieces");
  static constexpr int PREFETCH = Q_PIECES + K_PIECES > V_PIECES ? Q_PIECES + K_PIECES : V_PIECES;

  /// What one work item keeps in registers across the team's barriers.
  struct ItemState
  {
    float acc[B8][B8];      ///< the score block (score stages) or the output block of a pass (value stages)
    Bf16x8 next[PREFETCH];  ///< the next stage's pieces, in flight
    /// Where this item's Q pieces start (null for rows past the tile's): fixed for the team, so
    /// the stage loops keep one pointer live instead of the row arithmetic's inputs.
    uint16_t const *q_src[Q_PIECES];
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
    Scratch const sc(this->teamScratch(member).get_shmem_aligned(Scratch::bytes(), 16));
    ItemState st[ITEMS_PER_THREAD];
    int const first_item = member.team_rank() * ITEMS_PER_THREAD;
    for (int v = 0; v < ITEMS_PER_THREAD; ++v)
    {
      int const w = first_item + v;
      if (w < R)
      {
        sc.m()[w] = NEG_INF;
        sc.l()[w] = 0.f;
      }
      for (int p = 0; p < Q_PIECES; ++p)
      {
        int const u = w + p * W, row = u % R, part = u / R;
        int64_t const node = t.first_node + row / t.nh;
        st[v].q_src[p] = row < t.rows ? a.q.data() + (node * a.batch.num_heads + t.h0 + row % t.nh) * D_QK + part * 8 : nullptr;
      }
    }
    int64_t const ntiles = ceilDiv(t.hi - t.lo, N);
    for (int64_t ti = 0; ti < ntiles; ++ti)
    {
      TileView const tile = t.tileAt(t.lo + ti * N);
      // Prologue: the tile's pool rows and visibility bits, then its first Q/K chunk. Everything
      // that read the previous tile's scratch finished before the last value stage's barrier.
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        tilePrologue(t, tile, first_item + v, sc);
      member.team_barrier();
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        loadScores(first_item + v, st[v], 0, sc);
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
      {
        storeScores(first_item + v, st[v], 0, 0, sc);
        CANOPY_UNROLL
        for (int i = 0; i < B8; ++i)
          CANOPY_UNROLL
          for (int j = 0; j < B8; ++j)
            st[v].acc[i][j] = 0.f;
      }
      member.team_barrier();
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int stage = 0; stage < QK_STAGES; ++stage)
      {
        bool const more = stage + 1 < QK_STAGES;
        if (more)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            loadScores(first_item + v, st[v], stage + 1, sc);
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          scoreStage(first_item + v, st[v], stage % 2, sc);
        if (more)
        {
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            storeScores(first_item + v, st[v], stage + 1, (stage + 1) % 2, sc);
          member.team_barrier();
        }
      }
      // The partial maxima go to region B, which no stage of this tile has used yet.
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        maskAndPartialMax(t, tile, first_item + v, st[v], sc);
      member.team_barrier();
      // P^T overwrites the Q/K chunks: every item finished the score stages before the barrier.
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        probabilities(first_item + v, st[v], sc);
      member.team_barrier();
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        rowUpdate(first_item + v, sc);
      // The first V chunk overwrites the partial maxima, read before the last barrier.
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        loadValues(t, tile, first_item + v, st[v], 0, sc);
      for (int v = 0; v < ITEMS_PER_THREAD; ++v)
        storeValues(first_item + v, st[v], 0, 0, sc);
      member.team_barrier();
      bool const first = ti == 0, last = ti + 1 == ntiles;
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (int stage = 0; stage < V_STAGES; ++stage)
      {
        bool const more = stage + 1 < V_STAGES;
        if (more)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            loadValues(t, tile, first_item + v, st[v], stage + 1, sc);
        if (stage % V_STEPS == 0)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            CANOPY_UNROLL
            for (int i = 0; i < B8; ++i)
              CANOPY_UNROLL
              for (int j = 0; j < B8; ++j)
                st[v].acc[i][j] = 0.f;
        for (int v = 0; v < ITEMS_PER_THREAD; ++v)
          valueStage(first_item + v, st[v], stage, sc);
        if (stage % V_STEPS == V_STEPS - 1)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            writePass(t, first_item + v, st[v], stage / V_STEPS, first, last, sc);
        if (more)
          for (int v = 0; v < ITEMS_PER_THREAD; ++v)
            storeValues(first_item + v, st[v], stage + 1, (stage + 1) % 2, sc);
        member.team_barrier();  // the last one: before the next prologue overwrites P^T and the pool rows
      }
    }
    for (int v = 0; v < ITEMS_PER_THREAD; ++v)
    {
      int const w = first_item + v;
      if (w < t.rows)
      {
        float const l = sc.l()[w];
        ws_lse(wsRow(t.split, t.first_node + w / t.nh, t.h0 + w % t.nh)) = l > 0.f ? sc.m()[w] + Compat::log(l) : NEG_INF;
      }
    }
  }

  /// Pool rows of the tile's keys (-1 past nk) and, in the tree part, the visibility bits of its
  /// nodes: (key) and (node, word) items spread over the work items.
  KOKKOS_FORCEINLINE_FUNCTION void tilePrologue(Task const &t, TileView const &tile, int w, Scratch const &sc) const
  {
    for (int key = w; key < N; key += W)
      sc.slot()[key] = key < tile.nk ? poolRow(t, tile.k0 + key) : -1;
    if (t.tree)
      for (int u = w; u < t.ni * Scratch::VIS_WORDS; u += W)
      {
        int const node = u / Scratch::VIS_WORDS, word = u % Scratch::VIS_WORDS;
        sc.vis()[u] = treeVisibilityWord(a, t.b, t.node0, t.P, t.T, t.i0 + node, tile.k0, tile.nk, word);
      }
  }

  /// Issues the global loads of score stage \p stage: Q pieces (rows past the tile's load zeros)
  /// and K pieces (keys past nk load zeros, so their scores are finite until masked).
  KOKKOS_FORCEINLINE_FUNCTION void loadScores(int w, ItemState &st, int stage, Scratch const &sc) const
  {
    int const d0 = stage * DC;
    for (int p = 0; p < Q_PIECES; ++p)
      st.next[p] = st.q_src[p] ? load16<Bf16x8>(st.q_src[p] + d0) : Bf16x8{};
    KvTileLoad<KV> const pool(a.batch);
    for (int p = 0; p < K_PIECES; ++p)
    {
      int const u = w + p * W, key = u % N, part = u / N;
      int64_t const slot = sc.slot()[key];
      st.next[Q_PIECES + p] = slot >= 0 ? pool.piece(slot, d0 + part * 8) : Bf16x8{};
    }
  }

  /// Widens the pieces of score stage \p stage to fp32 and stores them transposed (k-major) into
  /// buffer \p buf; Q is pre-scaled by sm_scale. A warp's lanes hold 32 consecutive rows (keys) of
  /// one part, so every scalar store of the warp hits 32 distinct banks.
  KOKKOS_FORCEINLINE_FUNCTION void storeScores(int w, ItemState const &st, int stage, int buf, Scratch const &sc) const
  {
    KvTileLoad<KV> const pool(a.batch);
    Float4 *qt = sc.qT(buf), *kt = sc.kT(buf);
    for (int p = 0; p < Q_PIECES; ++p)
    {
      int const u = w + p * W, row = u % R, part = u / R;
      Float4 lo, hi;
      widenBf16x8(st.next[p], a.batch.sm_scale, lo, hi);
      for (int e = 0; e < 4; ++e)
      {
        setFloat(qt, (part * 8 + e) * Scratch::Q_STRIDE + row, lo.v[e]);
        setFloat(qt, (part * 8 + 4 + e) * Scratch::Q_STRIDE + row, hi.v[e]);
      }
    }
    for (int p = 0; p < K_PIECES; ++p)
    {
      int const u = w + p * W, key = u % N, part = u / N;
      Float4 lo, hi;
      pool.widen(st.next[Q_PIECES + p], stage * DC + part * 8, lo, hi);
      for (int e = 0; e < 4; ++e)
      {
        setFloat(kt, (part * 8 + e) * Scratch::K_STRIDE + key, lo.v[e]);
        setFloat(kt, (part * 8 + 4 + e) * Scratch::K_STRIDE + key, hi.v[e]);
      }
    }
  }

  /// acc += Q_chunk K_chunk^T for this item's 8 x 8 score block: per d, 4 16-byte loads, 64 FMAs.
  KOKKOS_FORCEINLINE_FUNCTION void scoreStage(int w, ItemState &st, int buf, Scratch const &sc) const
  {
    Own const own(w);
    Float4 const *q = sc.qT(buf) + own.row0 / 4;
    Float4 const *k = sc.kT(buf) + own.col0 / 4;
#if defined(__CUDA_ARCH__)
#pragma unroll UNROLL
#endif
    for (int d = 0; d < DC; ++d)
    {
      Float4 const a0 = q[d * (Scratch::Q_STRIDE / 4)], a1 = q[d * (Scratch::Q_STRIDE / 4) + 1];
      Float4 const b0 = k[d * (Scratch::K_STRIDE / 4)], b1 = k[d * (Scratch::K_STRIDE / 4) + Own::HALF / 4];
      fma8x8(st.acc, a0, a1, b0, b1);
    }
  }

  /// acc[i][j] += x[i] y[j], x = (x0, x1), y = (y0, y1).
  KOKKOS_FORCEINLINE_FUNCTION static void fma8x8(float (&acc)[B8][B8], Float4 const &x0, Float4 const &x1, Float4 const &y0,
                                                Float4 const &y1)
  {
    float x[B8], y[B8];
    CANOPY_UNROLL
    for (int e = 0; e < 4; ++e)
    {
      x[e] = x0.v[e];
      x[4 + e] = x1.v[e];
      y[e] = y0.v[e];
      y[4 + e] = y1.v[e];
    }
    CANOPY_UNROLL
    for (int i = 0; i < B8; ++i)
      CANOPY_UNROLL
      for (int j = 0; j < B8; ++j)
        acc[i][j] += x[i] * y[j];
  }

  KOKKOS_FORCEINLINE_FUNCTION static bool visible(Scratch const &sc, int node, int c)
  {
    return (sc.vis()[node * Scratch::VIS_WORDS + c / 32] >> (c % 32)) & 1u;
  }

  /// Invisible scores become -inf (keys past nk, rows past the tile's, tree keys off the row's
  /// ancestor set); the item's maximum per row goes to part_max.
  KOKKOS_FORCEINLINE_FUNCTION void maskAndPartialMax(Task const &t, TileView const &tile, int w, ItemState &st,
                                                     Scratch const &sc) const
  {
    Own const own(w);
    CANOPY_UNROLL
    for (int i = 0; i < B8; ++i)
    {
      int const r = own.row0 + i;
      int const node = r < t.rows ? r / t.nh : 0;
      float mx = NEG_INF;
      CANOPY_UNROLL
      for (int j = 0; j < B8; ++j)
      {
        int const c = own.col0 + Own::colOffset(j);
        bool const ok = r < t.rows && c < tile.nk && (!t.tree || visible(sc, node, c));
        st.acc[i][j] = ok ? st.acc[i][j] : NEG_INF;
        mx = st.acc[i][j] > mx ? st.acc[i][j] : mx;
      }
      sc.partMax()[r * Scratch::KEY_GROUPS + own.group] = mx;
    }
  }

  /// The rows' new maxima from the partial maxima, p = exp(s - m_new) into P^T (two 16-byte
  /// stores per key); the row's first key group records m_next and alpha = exp(m_old - m_new).
  KOKKOS_FORCEINLINE_FUNCTION void probabilities(int w, ItemState const &st, Scratch const &sc) const
  {
    Own const own(w);
    float m_new[B8];
    CANOPY_UNROLL
    for (int i = 0; i < B8; ++i)
    {
      int const r = own.row0 + i;
      float const m_old = sc.m()[r];
      float mx = m_old;
      for (int g = 0; g < Scratch::KEY_GROUPS; ++g)
      {
        float const x = sc.partMax()[r * Scratch::KEY_GROUPS + g];
        mx = x > mx ? x : mx;
      }
      m_new[i] = mx;
      if (own.group == 0)
      {
        sc.mNext()[r] = mx;
        sc.alpha()[r] = mx == NEG_INF ? 1.f : expNonPositive(m_old - mx);
      }
    }
    Float4 *pt = sc.pT();
    CANOPY_UNROLL
    for (int j = 0; j < B8; ++j)
    {
      Float4 lo, hi;
      CANOPY_UNROLL
      for (int e = 0; e < 4; ++e)
      {
        float const x0 = st.acc[e][j], x1 = st.acc[4 + e][j];
        lo.v[e] = m_new[e] == NEG_INF || x0 == NEG_INF ? 0.f : expNonPositive(x0 - m_new[e]);
        hi.v[e] = m_new[4 + e] == NEG_INF || x1 == NEG_INF ? 0.f : expNonPositive(x1 - m_new[4 + e]);
      }
      Float4 *dst = pt + (own.col0 + Own::colOffset(j)) * (Scratch::PT_STRIDE / 4) + own.row0 / 4;
      dst[0] = lo;
      dst[1] = hi;
    }
  }

  /// Item r < R moves row r's running sum and max on: l = l alpha + the row of P^T summed.
  KOKKOS_FORCEINLINE_FUNCTION void rowUpdate(int w, Scratch const &sc) const
  {
    if (w >= R)
      return;
    Float4 const *pt = sc.pT();
    float sum = 0.f;
    for (int c = 0; c < N; ++c)
      sum += getFloat(pt, c * Scratch::PT_STRIDE + w);
    sc.l()[w] = sc.l()[w] * sc.alpha()[w] + sum;
    sc.m()[w] = sc.mNext()[w];
  }

  /// Issues the global loads of value stage \p stage: pass stage / V_STEPS (columns), keys
  /// (stage % V_STEPS) VK .. + VK - 1; keys past nk load zeros (p = 0 times a zero V row).
  KOKKOS_FORCEINLINE_FUNCTION void loadValues(Task const &, TileView const &, int w, ItemState &st, int stage,
                                              Scratch const &sc) const
  {
    KvTileLoad<KV> const pool(a.batch);
    int const c0 = (stage / V_STEPS) * VC, key0 = (stage % V_STEPS) * VK;
    for (int p = 0; p < V_PIECES; ++p)
    {
      int const u = w + p * W, key = key0 + u / (VC / 8), part = u % (VC / 8);
      int64_t const slot = sc.slot()[key];
      st.next[p] = slot >= 0 ? pool.piece(slot, c0 + part * 8) : Bf16x8{};
    }
  }

  /// The pieces of value stage \p stage as V chunk [key][column] of buffer \p buf, row-major: a
  /// warp writes two keys' 128 columns with 16-byte stores.
  KOKKOS_FORCEINLINE_FUNCTION void storeValues(int w, ItemState const &st, int stage, int buf, Scratch const &sc) const
  {
    KvTileLoad<KV> const pool(a.batch);
    int const c0 = (stage / V_STEPS) * VC;
    Float4 *vch = sc.vChunk(buf);
    for (int p = 0; p < V_PIECES; ++p)
    {
      int const u = w + p * W, key = u / (VC / 8), part = u % (VC / 8);
      Float4 *dst = vch + key * (Scratch::V_STRIDE / 4) + 2 * part;
      pool.widen(st.next[p], c0 + part * 8, dst[0], dst[1]);
    }
  }

  /// acc += P[:, keys of the stage] V_chunk for this item's 8 x 8 block of the pass.
  KOKKOS_FORCEINLINE_FUNCTION void valueStage(int w, ItemState &st, int stage, Scratch const &sc) const
  {
    Own const own(w);
    int const key0 = (stage % V_STEPS) * VK;
    Float4 const *p = sc.pT() + key0 * (Scratch::PT_STRIDE / 4) + own.row0 / 4;
    Float4 const *x = sc.vChunk(stage % 2) + own.col0 / 4;
#if defined(__CUDA_ARCH__)
#pragma unroll UNROLL
#endif
    for (int n = 0; n < VK; ++n)
    {
      Float4 const p0 = p[n * (Scratch::PT_STRIDE / 4)], p1 = p[n * (Scratch::PT_STRIDE / 4) + 1];
      Float4 const x0 = x[n * (Scratch::V_STRIDE / 4)], x1 = x[n * (Scratch::V_STRIDE / 4) + Own::HALF / 4];
      fma8x8(st.acc, p0, p1, x0, x1);
    }
  }

  /// End of a pass: o = alpha o_old + acc for the item's rows of the tile (o_old from the
  /// partial's workspace rows, none on the first tile), divided by l on the last tile.
  KOKKOS_FORCEINLINE_FUNCTION void writePass(Task const &t, int w, ItemState const &st, int pass, bool first, bool last,
                                             Scratch const &sc) const
  {
    Own const own(w);
    float *out = ws_out.data();
    CANOPY_UNROLL
    for (int i = 0; i < B8; ++i)
    {
      int const r = own.row0 + i;
      if (r >= t.rows)
        continue;
      float const alpha = sc.alpha()[r];
      float const l = sc.l()[r];
      float const inv = last ? (l > 0.f ? 1.f / l : 0.f) : 1.f;
      float *at = out + wsRow(t.split, t.first_node + r / t.nh, t.h0 + r % t.nh) * D_V + pass * VC + own.col0;
      CANOPY_UNROLL
      for (int h = 0; h < 2; ++h)
      {
        Float4 y;
        if (first)
          y = Float4{};
        else
          y = load16<Float4>(at + h * Own::HALF);
        CANOPY_UNROLL
        for (int c = 0; c < 4; ++c)
          y.v[c] = (y.v[c] * alpha + st.acc[i][4 * h + c]) * inv;
        store16(at + h * Own::HALF, y);
      }
    }
  }
};

/// \brief Enqueues the sgemm split kernel. \pre the plan was made with Tiles.
template <class ExecutionSpace, class Tiles>
void launchSgemmSplit(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                      VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  withKvDtype(args.batch.kv_dtype, [&](auto kv) {
    launchRowTileSplit<VerifySgemmKernel<ExecutionSpace, Tiles, decltype(kv)::value>, Tiles>(
        space, "canopy::verifyAttention::split_sgemm", "kokkos-team (sgemm tiles)", args, ws, plan,
        SgemmScratch<Tiles>::request());
  });
}
} // namespace canopy::Impl

#undef CANOPY_UNROLL
