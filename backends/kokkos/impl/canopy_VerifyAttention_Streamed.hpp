/// \file canopy_VerifyAttention_Streamed.hpp
/// \brief The portable split kernel shaped for GPUs ("streamed" tiles): a team holds a small row
/// tile and streams Q, K and V through level-0 scratch in chunks, with 4 x 4 register blocks for
/// both products and the running output kept in the split workspace.
///
/// Why this shape: Kokkos 4 offers level-0 team scratch up to sharedMemPerBlock less its own
/// reserve (about 40 KB on every NVIDIA GPU, no opt-in), and hierarchical parallelism cannot keep
/// per-thread accumulators in registers across a team barrier. So nothing tile-sized lives across
/// the KV loop except the scores: Q and K pass through scratch 64 columns at a time (the scores
/// accumulate in scratch between chunks), V 64 output columns at a time, and each thread reads
/// its 4 x 4 block of the running output from the workspace row it will finally fill, rescales,
/// accumulates 64 keys and writes it back. Every scratch read feeds 8 (scores) or 16 (values) FMAs
/// per 16-byte load; the resident-tile shape of the host (Q and O of the whole tile in scratch)
/// needs level-1 scratch on a GPU and ran at 2-5 TFLOP/s on an H200.
#pragma once

#include "canopy_KokkosCompat.hpp"
#include "canopy_VerifyArgs.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

namespace canopy::Impl
{
/// \brief Tile shape of the streamed kernel. The logical decomposition (RANKS x LANES work items,
/// each one 4 x 4 block) is fixed; TEAM_SIZE x VECTOR_LENGTH is how a space launches it (on a
/// GPU one thread per work item; a host space may run a team on one thread).
struct StreamedTiles
{
  static constexpr bool STREAMED = true;
  static constexpr int RANKS = 16;  ///< team ranks of the decomposition
  static constexpr int LANES = 8;   ///< lanes per rank: a row's softmax reduces over them
  static constexpr int WORK_ITEMS = RANKS * LANES;
  static constexpr int TEAM_SIZE = RANKS;
  static constexpr int VECTOR_LENGTH = LANES;
  /// Registers: <= 65536 / (128 x 4) = 128 per thread, so 4 teams share an SM (about 38 KB of
  /// scratch each, 5 fit the H200's 228 KB).
  static constexpr int MIN_TEAMS_PER_SM = 4;
  static constexpr int ROWS = 32;     ///< (node, head) rows of a team: 4 nodes x 8 heads
  static constexpr int KV_TILE = 64;  ///< keys per step of the online softmax
  static constexpr int D_CHUNK = 64;  ///< Q/K columns staged per step of the score product
  static constexpr int V_COLS = 64;   ///< output columns staged per step of the value product
  static constexpr int ROW_BLOCK = 1;
  static constexpr int MAX_ROWS = ROWS;
  static constexpr int COMBINE_TEAM_SIZE = 128;
  static constexpr int COMBINE_COLS = 4;
};

/// \brief Scratch of one streamed team, in Float4 units unless noted. Row strides are one Float4
/// longer than the data, so that consecutive rows start 4 banks apart and 8 threads reading 8
/// rows with 16-byte loads hit 32 distinct banks.
template <class Tiles>
struct StreamedScratch
{
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE;
  static constexpr int S_STRIDE = N / 4 + 1;              ///< scores S[row][key]
  static constexpr int QK_STRIDE = Tiles::D_CHUNK / 4 + 1; ///< Q chunk [row][col], K chunk [key][col]
  static constexpr int PT_STRIDE = R / 4 + 1;              ///< probabilities transposed, P^T[key][row]
  static constexpr int V_STRIDE = Tiles::V_COLS / 4 + 1;   ///< V chunk [key][col]
  static constexpr int SCORES = R * S_STRIDE;
  /// The stage region holds the Q and K chunks during the score product, then P^T and a V chunk.
  static constexpr int Q_CHUNK = R * QK_STRIDE, K_CHUNK = N * QK_STRIDE;
  static constexpr int P_T = N * PT_STRIDE, V_CHUNK = N * V_STRIDE;
  static constexpr int STAGE = (Q_CHUNK + K_CHUNK) > (P_T + V_CHUNK) ? (Q_CHUNK + K_CHUNK) : (P_T + V_CHUNK);

  Float4 *s;
  Float4 *stage;
  float *m, *l, *alpha;  ///< [R] running max, running sum, this tile's rescale
  int64_t *slot;         ///< [N] KV pool row of each key of the tile
  uint8_t *vis;          ///< [R][N] tree visibility (node rows of the tile)

  KOKKOS_INLINE_FUNCTION static constexpr size_t bytes()
  {
    return 64 + alignedBytes(SCORES * sizeof(Float4)) + alignedBytes(STAGE * sizeof(Float4)) +
           3 * alignedBytes(R * sizeof(float)) + alignedBytes(N * sizeof(int64_t)) + alignedBytes(size_t(R) * N);
  }

  KOKKOS_INLINE_FUNCTION explicit StreamedScratch(void *raw)
  {
    uintptr_t p = (reinterpret_cast<uintptr_t>(raw) + 63) / 64 * 64;
    auto take = [&p](size_t n) {
      uintptr_t const at = p;
      p += alignedBytes(n);
      return at;
    };
    s = reinterpret_cast<Float4 *>(take(SCORES * sizeof(Float4)));
    stage = reinterpret_cast<Float4 *>(take(STAGE * sizeof(Float4)));
    m = reinterpret_cast<float *>(take(R * sizeof(float)));
    l = reinterpret_cast<float *>(take(R * sizeof(float)));
    alpha = reinterpret_cast<float *>(take(R * sizeof(float)));
    slot = reinterpret_cast<int64_t *>(take(N * sizeof(int64_t)));
    vis = reinterpret_cast<uint8_t *>(take(size_t(R) * N));
  }
  KOKKOS_INLINE_FUNCTION Float4 *qChunk() const { return stage; }
  KOKKOS_INLINE_FUNCTION Float4 *kChunk() const { return stage + Q_CHUNK; }
  KOKKOS_INLINE_FUNCTION Float4 *pT() const { return stage; }
  KOKKOS_INLINE_FUNCTION Float4 *vChunk() const { return stage + P_T; }
};

/// \brief The streamed split kernel: one team per (request, head group, partial, row tile), the
/// row tile fastest so that the teams reading one KV chunk run together and share it through L2.
/// Partials are as in the resident kernel (prefix chunks, then the masked tree part); each writes
/// its normalised output and log-sum-exp per (node, head), an empty chunk only lse = -inf.
template <class ExecutionSpace, class Tiles>
struct VerifyStreamedKernel
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = StreamedScratch<Tiles>;
  static constexpr int R = Tiles::ROWS, N = Tiles::KV_TILE, DC = Tiles::D_CHUNK, VC = Tiles::V_COLS;
  static constexpr int RANKS = Tiles::RANKS, LANES = Tiles::LANES, W = Tiles::WORK_ITEMS;
  static_assert(W == 128 && R == 32 && N == 64,
                "score blocks: work item w holds rows w/16 + 8i and keys w%16 + 16j, i, j < 4");
  static_assert(VC == 64, "value blocks: work item w holds rows 4(w/16) + i and columns 4(w%16) + j");
  static_assert(D_QK % DC == 0 && D_V % VC == 0 && DC % 8 == 0 && VC % 8 == 0, "chunks are whole 16-byte loads");
  static_assert(N % LANES == 0, "softmax lanes split the tile's keys evenly");

  VerifyArgs<MemorySpace> a;
  Kokkos::View<float *, MemorySpace> ws_out, ws_lse;
  int64_t node_capacity;
  VerifyPlan plan;
  int scratch_level;  ///< 0 wherever it fits (every GPU); host spaces may offer less level 0

  KOKKOS_INLINE_FUNCTION int64_t wsRow(int split, int64_t node_row, int h) const
  {
    return (static_cast<int64_t>(split) * node_capacity + node_row) * a.num_heads + h;
  }

  /// Runs \p f(w) for every work item w in [0, WORK_ITEMS): one per thread on a GPU.
  template <class F>
  KOKKOS_INLINE_FUNCTION static void forEachItem(Member const &member, F const &f)
  {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, RANKS), [&](int rank) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, LANES), [&](int lane) { f(rank * LANES + lane); });
    });
  }

  KOKKOS_INLINE_FUNCTION void operator()(Member const &member) const
  {
    TeamTask task;
    if (!decodeTeam(member.league_rank(), plan, a, task))
      return;
    int const split = task.split, b = task.b, h0 = task.h0, nh = task.nh;
    int64_t const node0 = task.node0, T = task.T;
    int64_t const nodes_per_tile = plan.rows_per_tile / plan.heads_per_group;
    int64_t const i0 = task.row_tile * nodes_per_tile;
    if (i0 >= T)
      return;
    int64_t const ni = T - i0 < nodes_per_tile ? T - i0 : nodes_per_tile;
    int const rows = static_cast<int>(ni * nh);
    int64_t const kv0 = a.kv_indptr(b);
    int64_t const P = a.kv_indptr(b + 1) - kv0;
    bool const tree = split == plan.nsplit;
    int64_t lo = 0, hi = 0;
    if (tree)
      hi = T < i0 + ni ? T : i0 + ni;  // tree node j is visible to node i only if j <= i
    else
      prefixChunk(P, plan.nsplit, split, N, lo, hi);
    if (lo >= hi)
    {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows),
                           [&](int r) { ws_lse(wsRow(split, node0 + i0 + r / nh, h0 + r % nh)) = NEG_INF; });
      return;
    }
    Scratch const sc(member.team_scratch(scratch_level).get_shmem(Scratch::bytes()));
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, int(R)), [&](int r) {
      sc.m[r] = NEG_INF;
      sc.l[r] = 0.f;
    });
    for (int64_t k0 = lo; k0 < hi; k0 += N)
    {
      int const nk = static_cast<int>(hi - k0 < N ? hi - k0 : N);
      loadSlotsAndVisibility(member, sc, tree, b, node0, kv0, P, T, i0, ni, k0, nk);
      member.team_barrier();
      for (int d0 = 0; d0 < D_QK; d0 += DC)
      {
        stageQK(member, sc, node0 + i0, rows, nh, h0, d0, nk);
        member.team_barrier();
        scoreChunk(member, sc, d0 == 0);
        member.team_barrier();
      }
      softmaxUpdate(member, sc, rows, nk, tree, nh);
      member.team_barrier();
      bool const first = k0 == lo, last = k0 + N >= hi;
      for (int c0 = 0; c0 < D_V; c0 += VC)
      {
        stageV(member, sc, c0, nk);
        member.team_barrier();
        valueChunk(member, sc, split, node0 + i0, rows, nh, h0, c0, first, last);
        member.team_barrier();
      }
    }
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, rows), [&](int r) {
      float const l = sc.l[r];
      ws_lse(wsRow(split, node0 + i0 + r / nh, h0 + r % nh)) = l > 0.f ? sc.m[r] + Compat::log(l) : NEG_INF;
    });
  }

  /// Pool rows of keys [k0, k0 + nk): the prefix through kv_indices, the tree through
  /// out_cache_loc. Tree part: vis[node][c] = node i0 + node sees tree node k0 + c.
  KOKKOS_INLINE_FUNCTION void loadSlotsAndVisibility(Member const &member, Scratch const &sc, bool tree, int b,
                                                     int64_t node0, int64_t kv0, int64_t P, int64_t T, int64_t i0,
                                                     int64_t ni, int64_t k0, int nk) const
  {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, nk), [&](int n) {
      sc.slot[n] = tree ? a.out_cache_loc(node0 + k0 + n) : a.kv_indices(kv0 + k0 + n);
    });
    if (!tree)
      return;
    // One lane per node row: the parents walk clears the row and then marks ancestors, so two
    // lanes writing the same row could clear a mark the other already set.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, static_cast<int>(ni)), [&](int il) {
      Kokkos::single(Kokkos::PerThread(member),
                     [&]() { treeVisibilityRow<N>(a, b, node0, P, T, i0 + il, k0, nk, sc.vis + il * N); });
    });
  }

  /// Q columns [d0, d0 + DC) of the tile's rows (pre-scaled by sm_scale) and the same columns of
  /// its keys, as fp32; rows past \p rows and keys past \p nk are zero.
  KOKKOS_INLINE_FUNCTION void stageQK(Member const &member, Scratch const &sc, int64_t first_node, int rows, int nh,
                                      int h0, int d0, int nk) const
  {
    constexpr int PER_ROW = DC / 8;  // 16-byte loads per row
    Float4 *q = sc.qChunk(), *k = sc.kChunk();
    uint16_t const *qsrc = a.q.data(), *pool = a.kv_pool.data();
    int const H = a.num_heads;
    float const scale = a.sm_scale;
    forEachItem(member, [&](int w) {
      for (int u = w; u < (R + N) * PER_ROW; u += W)
      {
        int const row = u / PER_ROW, part = u % PER_ROW;
        Float4 lo{}, hi{};
        if (row < R)
        {
          if (row < rows)
            loadBf16x8(qsrc + ((first_node + row / nh) * H + h0 + row % nh) * D_QK + d0 + part * 8, scale, lo, hi);
          q[row * Scratch::QK_STRIDE + 2 * part] = lo;
          q[row * Scratch::QK_STRIDE + 2 * part + 1] = hi;
        }
        else
        {
          int const key = row - R;
          if (key < nk)
            loadBf16x8(pool + sc.slot[key] * D_QK + d0 + part * 8, 1.f, lo, hi);
          k[key * Scratch::QK_STRIDE + 2 * part] = lo;
          k[key * Scratch::QK_STRIDE + 2 * part + 1] = hi;
        }
      }
    });
  }

  /// S += Q_chunk K_chunk^T: work item w holds rows w/16 + 8i and keys w%16 + 16j (i, j < 4), so
  /// a warp's 16-byte K loads cover 16 consecutive rows (distinct banks) and its Q loads broadcast.
  KOKKOS_INLINE_FUNCTION void scoreChunk(Member const &member, Scratch const &sc, bool first) const
  {
    Float4 const *q = sc.qChunk(), *k = sc.kChunk();
    forEachItem(member, [&](int w) {
      int const rb = w / 16, kb = w % 16;
      float acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] = first ? 0.f : sc.s[(rb + 8 * i) * Scratch::S_STRIDE + (kb + 16 * j) / 4].v[(kb + 16 * j) % 4];
      for (int d4 = 0; d4 < DC / 4; ++d4)
      {
        Float4 qv[4], kv[4];
        for (int i = 0; i < 4; ++i)
          qv[i] = q[(rb + 8 * i) * Scratch::QK_STRIDE + d4];
        for (int j = 0; j < 4; ++j)
          kv[j] = k[(kb + 16 * j) * Scratch::QK_STRIDE + d4];
        for (int e = 0; e < 4; ++e)
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
              acc[i][j] += qv[i].v[e] * kv[j].v[e];
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          sc.s[(rb + 8 * i) * Scratch::S_STRIDE + (kb + 16 * j) / 4].v[(kb + 16 * j) % 4] = acc[i][j];
    });
  }

  /// Online softmax over the tile, one row per rank, its keys over the lanes: invisible keys get
  /// p = 0 (keys past nk, rows past \p rows, tree keys off the row's ancestor set); P goes to
  /// scratch transposed for the value product; alpha rescales what the row accumulated before.
  KOKKOS_INLINE_FUNCTION void softmaxUpdate(Member const &member, Scratch const &sc, int rows, int nk, bool tree,
                                            int nh) const
  {
    Float4 *pt = sc.pT();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, R), [&](int r) {
      int const valid = r < rows ? nk : 0;
      uint8_t const *vis = sc.vis + (r < rows ? r / nh : 0) * N;
      auto score = [&](int c) {
        bool const ok = c < valid && (!tree || vis[c] != 0);
        return ok ? sc.s[r * Scratch::S_STRIDE + c / 4].v[c % 4] : NEG_INF;
      };
      float tile_max = NEG_INF;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, N), [&](int c, float &mx) { mx = score(c) > mx ? score(c) : mx; },
          Kokkos::Max<float>(tile_max));
      // The Max reducer starts from -FLT_MAX, not -inf: a tile where this row sees nothing.
      tile_max = tile_max < -3.0e38f ? NEG_INF : tile_max;
      // Lane 0 alone reads and writes the row's state (broadcast to the lanes): a read by the
      // other lanes would race with the write below, which no barrier separates from it.
      float m_old;
      Kokkos::single(Kokkos::PerThread(member), [&](float &m) { m = sc.m[r]; }, m_old);
      float const m_new = tile_max > m_old ? tile_max : m_old;
      float sum = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, N),
          [&](int c, float &acc) {
            float const x = score(c);
            float const p = m_new == NEG_INF || x == NEG_INF ? 0.f : expNonPositive(x - m_new);
            pt[c * Scratch::PT_STRIDE + r / 4].v[r % 4] = p;
            acc += p;
          },
          sum);
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        float const alpha = m_new == NEG_INF ? 1.f : expNonPositive(m_old - m_new);
        sc.alpha[r] = alpha;
        sc.l[r] = sc.l[r] * alpha + sum;
        sc.m[r] = m_new;
      });
    });
  }

  /// V columns [c0, c0 + VC) of the tile's keys as fp32 (keys past nk zero: p = 0 times them).
  KOKKOS_INLINE_FUNCTION void stageV(Member const &member, Scratch const &sc, int c0, int nk) const
  {
    constexpr int PER_ROW = VC / 8;
    Float4 *v = sc.vChunk();
    uint16_t const *pool = a.kv_pool.data();
    forEachItem(member, [&](int w) {
      for (int u = w; u < N * PER_ROW; u += W)
      {
        int const key = u / PER_ROW, part = u % PER_ROW;
        Float4 lo{}, hi{};
        if (key < nk)
          loadBf16x8(pool + sc.slot[key] * D_QK + c0 + part * 8, 1.f, lo, hi);
        v[key * Scratch::V_STRIDE + 2 * part] = lo;
        v[key * Scratch::V_STRIDE + 2 * part + 1] = hi;
      }
    });
  }

  /// O[rows 4rb..4rb+3][cols c0 + 4cb..+3] = alpha O + P V over the tile's keys, read from and
  /// written back to the workspace rows of this partial (the first tile starts from 0, the last
  /// divides by l, so the rows end normalised). Rows past \p rows belong to no node: skipped.
  KOKKOS_INLINE_FUNCTION void valueChunk(Member const &member, Scratch const &sc, int split, int64_t first_node,
                                         int rows, int nh, int h0, int c0, bool first, bool last) const
  {
    Float4 const *pt = sc.pT(), *v = sc.vChunk();
    float *out = ws_out.data();
    forEachItem(member, [&](int w) {
      int const rb = w / (VC / 4), cb = w % (VC / 4);
      Float4 acc[4];
      int64_t at[4];
      for (int i = 0; i < 4; ++i)
      {
        int const r = 4 * rb + i;
        at[i] = r < rows ? wsRow(split, first_node + r / nh, h0 + r % nh) * D_V + c0 + 4 * cb : -1;
        acc[i] = first || at[i] < 0 ? Float4{} : load16<Float4>(out + at[i]);
        float const alpha = sc.alpha[r];
        for (int j = 0; j < 4; ++j)
          acc[i].v[j] *= alpha;
      }
      for (int n = 0; n < N; ++n)
      {
        Float4 const p = pt[n * Scratch::PT_STRIDE + rb];
        Float4 const x = v[n * Scratch::V_STRIDE + cb];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            acc[i].v[j] += p.v[i] * x.v[j];
      }
      for (int i = 0; i < 4; ++i)
      {
        if (at[i] < 0)
          continue;
        if (last)
        {
          float const l = sc.l[4 * rb + i];
          float const inv = l > 0.f ? 1.f / l : 0.f;
          for (int j = 0; j < 4; ++j)
            acc[i].v[j] *= inv;
        }
        store16(out + at[i], acc[i]);
      }
    });
  }
};

/// \brief Enqueues the streamed split kernel. \pre the plan was made with Tiles; q and the KV pool
/// are 16-byte aligned (checked: every allocator the project uses gives at least that).
template <class ExecutionSpace, class Tiles>
void launchStreamedSplit(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                         VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  auto aligned = [](void const *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(args.q.data()) || !aligned(args.kv_pool.data()) || !aligned(ws.partial_out.data()))
    throw Unsupported("kokkos-team (streamed tiles): q, the KV pool and the workspace must be 16-byte aligned");
  using Policy = decltype(Kokkos::Experimental::require(
      Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<Tiles::TEAM_SIZE * Tiles::VECTOR_LENGTH, Tiles::MIN_TEAMS_PER_SM>>(),
      Kokkos::Experimental::WorkItemProperty::HintLightWeight));
  constexpr size_t bytes = StreamedScratch<Tiles>::bytes();
  Policy policy(space, static_cast<int>(plan.leagueSize()), Tiles::TEAM_SIZE, Tiles::VECTOR_LENGTH);
  int const level = bytes <= static_cast<size_t>(policy.scratch_size_max(0)) ? 0 : 1;
  if (bytes > static_cast<size_t>(policy.scratch_size_max(level)))
    throw Unsupported("kokkos-team (streamed tiles): " + std::to_string(bytes) +
                      " bytes of team scratch, more than this space offers");
  Kokkos::parallel_for(
      "canopy::verifyAttention::split_streamed", policy.set_scratch_size(level, Kokkos::PerTeam(bytes)),
      VerifyStreamedKernel<ExecutionSpace, Tiles>{args, ws.partial_out, ws.partial_lse, ws.node_capacity, plan, level});
}
} // namespace canopy::Impl
