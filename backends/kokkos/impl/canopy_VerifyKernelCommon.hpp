/// \file canopy_VerifyKernelCommon.hpp
/// \brief What both portable split kernels share: the output sentinels, index arithmetic, the
/// exp used by the online softmax, 16-byte moves, the bf16 widening and the launch.
#pragma once

#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_VerifyArgs.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace canopy::Impl
{
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
/// A quiet NaN written for a row that sees no key at all (distinct from BF16_POISON, "unwritten").
constexpr uint16_t BF16_QUIET_NAN = 0x7fc0;

/// Whether \p MemorySpace is a device's (the host cannot read it): GPU tile shapes, level-0 scratch
/// as shared memory.
template <class MemorySpace>
constexpr bool IS_DEVICE_MEMORY = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

KOKKOS_INLINE_FUNCTION constexpr int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
KOKKOS_INLINE_FUNCTION constexpr int64_t roundUp(int64_t a, int64_t b) { return ceilDiv(a, b) * b; }
KOKKOS_INLINE_FUNCTION constexpr size_t alignedBytes(size_t n) { return (n + 63) / 64 * 64; }

/// Prefix keys [lo, hi) of partial \p split of \p nsplit over a prefix of \p P keys: chunks of
/// ceil(P / nsplit) rounded up to whole \p tile-key tiles, so a tile never spans two partials
/// (the last chunks may be short or empty: lo >= hi).
KOKKOS_INLINE_FUNCTION void prefixChunk(int64_t P, int nsplit, int split, int64_t tile, int64_t &lo, int64_t &hi)
{
  int64_t const chunk = roundUp(ceilDiv(P, nsplit), tile);
  lo = split * chunk;
  hi = lo + chunk < P ? lo + chunk : P;
}

/// \brief exp(x) for x <= 0 in plain float arithmetic, so the softmax loop vectorises (with a libm
/// expf call per score the kernel took 11% longer on the host at H=8, T=33, P=4096).
/// 2^(x log2 e) = 2^k 2^f: k = round(x log2 e) is read from the mantissa of t + 1.5 * 2^23 (no
/// float->int conversion, whose range check GCC turned into a branch), |f| <= 1/2, and 2^f is the
/// degree-6 Taylor polynomial. Measured relative error vs fp64 exp: 1.1e-6 on [-20, 0], 4e-6 on
/// [-87, 0] (the fp32 rounding of x log2 e dominates), far below bf16's 2^-9 output rounding.
/// exp(-inf) and anything below 2^-126 give exactly 0.
KOKKOS_INLINE_FUNCTION float expNonPositive(float x)
{
  constexpr float ROUNDER = 12582912.f;  // 1.5 * 2^23
  float t = x * 1.44269504088896341f;
  t = t > -127.f ? t : -127.f;
  float const r = t + ROUNDER;
  float const kf = r - ROUNDER;
  int32_t rbits;
  memcpy(&rbits, &r, sizeof(rbits));
  int32_t const k = rbits - 0x4B400000;  // round(t) as an integer, in [-127, 0]
  float const f = (t - kf) * 0.693147180559945309f;
  float const p =
      1.f + f * (1.f + f * (0.5f + f * (1.f / 6 + f * (1.f / 24 + f * (1.f / 120 + f * (1.f / 720))))));
  int32_t const bits = (k + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  return scale * p;
}

/// \brief What one team of a split kernel works on: league index = ((request x head groups + group)
/// x partials + split) x row tiles + row tile (row tile fastest; 1 row tile where a team walks
/// them itself). Partial nsplit is the tree part.
struct TeamTask
{
  int split, group, b, row_tile;
  int64_t node0, T;  ///< the request's first node row and tree size
  int h0, nh;        ///< the group's first head and head count
};

/// \brief Decodes \p league; false when the team has nothing to do (a request past the batch, an
/// empty tree or head group).
template <class MemorySpace>
KOKKOS_INLINE_FUNCTION bool decodeTeam(int league, VerifyPlan const &plan, VerifyArgs<MemorySpace> const &a,
                                       TeamTask &t)
{
  t.row_tile = league % plan.row_tiles;
  league /= plan.row_tiles;
  int const partials = plan.nsplit + 1;
  t.split = league % partials;
  league /= partials;
  t.group = league % plan.num_head_groups;
  t.b = league / plan.num_head_groups;
  if (t.b >= a.batch.batch_size)
    return false;
  t.node0 = a.qo_indptr(t.b);
  t.T = a.qo_indptr(t.b + 1) - t.node0;
  t.h0 = t.group * plan.heads_per_group;
  t.nh = a.batch.num_heads - t.h0 < plan.heads_per_group ? a.batch.num_heads - t.h0 : plan.heads_per_group;
  return t.T > 0 && t.nh > 0;
}

/// \brief What the row-tile split kernels (streamed and sgemm tiles) share: their arguments, the
/// team's task (which rows of the request and which keys of its partial it covers, in KV tiles of
/// \p N keys), the workspace row and pool row of a key, and the decoding of the league index. Each
/// kernel's operator() calls beginTask, then its own run().
template <class MemorySpace, int N>
struct RowTileKernelBase
{
  /// The tile's first key and key count, as every stage needs them.
  struct TileView
  {
    int64_t k0;
    int nk;
  };

  /// The team's fixed facts: its TeamTask, and which rows and keys of the request it covers.
  struct Task : TeamTask
  {
    int rows;
    bool tree;
    int64_t first_node, kv0, P, i0, ni, lo, hi;

    KOKKOS_INLINE_FUNCTION TileView tileAt(int64_t k0) const
    {
      return TileView{k0, static_cast<int>(hi - k0 < N ? hi - k0 : N)};
    }
  };

  VerifyArgs<MemorySpace> a;
  Kokkos::View<float *, MemorySpace> ws_out, ws_lse;
  int64_t node_capacity;
  VerifyPlan plan;
  int scratch_level;  ///< 0 on devices; host spaces may offer less level 0

  /// The team's scratch space at scratch_level. On a device the level is the constant 0, so that
  /// the compiler sees shared memory behind the pointer (32-bit addresses, shared loads); a
  /// runtime level makes every access generic.
  template <class Member>
  KOKKOS_FORCEINLINE_FUNCTION decltype(auto) teamScratch(Member const &member) const
  {
    return member.team_scratch(IS_DEVICE_MEMORY<MemorySpace> ? 0 : scratch_level);
  }

  KOKKOS_INLINE_FUNCTION int64_t wsRow(int split, int64_t node_row, int h) const
  {
    return (static_cast<int64_t>(split) * node_capacity + node_row) * a.batch.num_heads + h;
  }

  KOKKOS_INLINE_FUNCTION int64_t poolRow(Task const &t, int64_t key) const
  {
    return t.tree ? a.out_cache_loc(t.node0 + key) : a.kv_indices(t.kv0 + key);
  }

  /// Fills \p t for the team \p member; false when it has nothing to compute (after writing lse =
  /// -inf for the rows of an empty partial, which the combine then weighs 0).
  template <class Member>
  KOKKOS_INLINE_FUNCTION bool beginTask(Member const &member, Task &t) const
  {
    if (!decodeTeam(member.league_rank(), plan, a, t))
      return false;
    int64_t const nodes_per_tile = plan.rows_per_tile / plan.heads_per_group;
    t.i0 = t.row_tile * nodes_per_tile;
    if (t.i0 >= t.T)
      return false;
    t.ni = t.T - t.i0 < nodes_per_tile ? t.T - t.i0 : nodes_per_tile;
    t.rows = static_cast<int>(t.ni * t.nh);
    t.first_node = t.node0 + t.i0;
    t.kv0 = a.kv_indptr(t.b);
    t.P = a.kv_indptr(t.b + 1) - t.kv0;
    t.tree = t.split == plan.nsplit;
    t.lo = 0;
    t.hi = 0;
    if (t.tree)
      t.hi = t.T < t.i0 + t.ni ? t.T : t.i0 + t.ni;  // tree node j is visible to node i only if j <= i
    else
      prefixChunk(t.P, plan.nsplit, t.split, N, t.lo, t.hi);
    if (t.lo < t.hi)
      return true;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, t.rows), [&](int r) {
      ws_lse(wsRow(t.split, t.first_node + r / t.nh, t.h0 + r % t.nh)) = NEG_INF;
    });
    return false;
  }
};

/// \brief Calls visible(c) for each c in [c0, c1) for which tree node \p i (of the request
/// starting at node row \p node0) sees tree node k0 + c. full/tree layouts read the mask bytes;
/// parents walks the ancestor chain of node i (O(depth) per node and tile, no T x T state).
template <class MemorySpace, class Visible>
KOKKOS_INLINE_FUNCTION void forVisibleTreeKeys(VerifyArgs<MemorySpace> const &a, int b, int64_t node0, int64_t P,
                                               int64_t T, int64_t i, int64_t k0, int c0, int c1, Visible &&visible)
{
  if (a.batch.mask_layout == MaskLayout::kParents)
  {
    int32_t const *parent = a.tree_parent.data() + node0;
    // parent[k] < k on valid trees; the guard stops a malformed chain instead of looping.
    for (int64_t k = i; k >= k0 + c0;)
    {
      if (k < k0 + c1)
        visible(static_cast<int>(k - k0));
      int64_t const p = parent[k];
      if (p >= k)
        break;
      k = p;
    }
  }
  else
  {
    bool const full = a.batch.mask_layout == MaskLayout::kFull;
    int64_t const base = a.mask_indptr(b) + (full ? i * (P + T) + P : i * T) + k0;
    for (int c = c0; c < c1; ++c)
      if (a.custom_mask(base + c) != 0)
        visible(c);
  }
}

/// \brief row[c] = tree node \p i sees tree node k0 + c, for c < N (0 past \p nk).
template <int N, class MemorySpace>
KOKKOS_INLINE_FUNCTION void treeVisibilityRow(VerifyArgs<MemorySpace> const &a, int b, int64_t node0, int64_t P,
                                              int64_t T, int64_t i, int64_t k0, int nk, uint8_t *row)
{
  for (int c = 0; c < N; ++c)
    row[c] = 0;
  forVisibleTreeKeys(a, b, node0, P, T, i, k0, 0, nk, [&](int c) { row[c] = 1; });
}

/// \brief Four fp32 lanes, 16-byte aligned: the unit of the streamed kernel's scratch traffic.
/// Scratch regions are typed as arrays of it and never read as plain floats, so host compilers
/// see no aliasing between the two.
struct alignas(16) Float4
{
  float v[4];
};

/// \brief An aligned \p T (4, 8 or 16 bytes, \pre aligned to its size) at \p p: one access on the
/// device; a memcpy on the host (the same instruction, without a type-punned access to the caller's
/// buffer).
template <class T>
KOKKOS_INLINE_FUNCTION T loadAligned(void const *p)
{
  static_assert(alignof(T) == sizeof(T), "an aligned unit of its own size");
  T x;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  x = *reinterpret_cast<T const *>(p);
#else
  memcpy(&x, p, sizeof(x));
#endif
  return x;
}
/// \brief 16 bytes at \p p as a T: one 128-bit access on the device.
template <class T>
KOKKOS_INLINE_FUNCTION T load16(void const *p)
{
  static_assert(sizeof(T) == 16, "load16 moves one aligned 16-byte unit");
  return loadAligned<T>(p);
}
template <class T>
KOKKOS_INLINE_FUNCTION void store16(void *p, T const &x)
{
  static_assert(sizeof(T) == 16 && alignof(T) == 16, "store16 moves one aligned 16-byte unit");
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  *reinterpret_cast<T *>(p) = x;
#else
  memcpy(p, &x, sizeof(x));
#endif
}

/// \brief Eight consecutive bf16, 16-byte aligned, as moved from global memory (load16).
struct alignas(16) Bf16x8
{
  uint32_t w[4];
};

/// \brief \p x as fp32 times \p scale: elements 0..3 to \p lo, 4..7 to \p hi. bf16 -> fp32 is the
/// 16 bits shifted up; little endian: element 2i is the low half of word i.
KOKKOS_FORCEINLINE_FUNCTION void widenBf16x8(Bf16x8 const &x, float scale, Float4 &lo, Float4 &hi)
{
  float f[8];
  for (int i = 0; i < 4; ++i)
  {
    uint32_t const even = x.w[i] << 16, odd = x.w[i] & 0xffff0000u;
    memcpy(&f[2 * i], &even, 4);
    memcpy(&f[2 * i + 1], &odd, 4);
  }
  Float4 a, b;  // whole Float4 assignments: one 16-byte store each where lo and hi are in scratch
  for (int i = 0; i < 4; ++i)
  {
    a.v[i] = f[i] * scale;
    b.v[i] = f[4 + i] * scale;
  }
  lo = a;
  hi = b;
}

/// \brief Enqueues a row-tile split kernel (the streamed or the sgemm tiles, \p what in errors)
/// with \p bytes of team scratch per team, after the checks both share: q, the KV pool (bf16 or
/// FP8 bytes) and the workspace 16-byte aligned (the kernels move 16 bytes at a time), and the
/// scratch admitted.
/// Devices take level 0, which the kernels index as shared memory (RowTileKernelBase::teamScratch);
/// what a launch admits there depends on the team size (Kokkos 4.6 on CUDA: 49,152 - 8 (team size
/// + 2) bytes, where scratch_size_max(0) assumes a 1024-thread team), and team_size_max with the
/// scratch set is that rule (0 for a team that does not fit). Host spaces take level 0 when it
/// fits, else level 1.
template <class Kernel, class Tiles, class ExecutionSpace>
void launchRowTileSplit(ExecutionSpace const &space, char const *label, std::string const &what,
                        VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                        VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan,
                        size_t bytes)
{
  auto aligned = [](void const *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  void const *pool = args.batch.kv_dtype == KvDtype::kBf16 ? static_cast<void const *>(args.kv_pool.data())
                                                           : static_cast<void const *>(args.batch.kv_pool_fp8);
  if (!aligned(args.q.data()) || !aligned(pool) || !aligned(ws.partial_out.data()))
    throw Unsupported(what + ": q, the KV pool and the workspace must be 16-byte aligned");
  using Policy = decltype(Kokkos::Experimental::require(
      Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<Tiles::TEAM_SIZE * Tiles::VECTOR_LENGTH, Tiles::MIN_TEAMS_PER_SM>>(),
      Kokkos::Experimental::WorkItemProperty::HintLightWeight));
  Policy policy(space, static_cast<int>(plan.leagueSize()), Tiles::TEAM_SIZE, Tiles::VECTOR_LENGTH);
  Kernel kernel{{args, ws.partial_out, ws.partial_lse, ws.node_capacity, plan, 0}};
  if constexpr (IS_DEVICE_MEMORY<typename ExecutionSpace::memory_space>)
  {
    policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
    if (policy.team_size_max(kernel, Kokkos::ParallelForTag()) < Tiles::TEAM_SIZE)
      throw Unsupported(what + ": " + std::to_string(bytes) + " bytes of level-0 scratch for a team of " +
                        std::to_string(Tiles::TEAM_SIZE) + ", more than this device admits");
  }
  else
  {
    kernel.scratch_level = bytes <= static_cast<size_t>(policy.scratch_size_max(0)) ? 0 : 1;
    if (bytes > static_cast<size_t>(policy.scratch_size_max(kernel.scratch_level)))
      throw Unsupported(what + ": " + std::to_string(bytes) + " bytes of team scratch, more than this space offers");
    policy.set_scratch_size(kernel.scratch_level, Kokkos::PerTeam(bytes));
  }
  Kokkos::parallel_for(label, policy, kernel);
}
} // namespace canopy::Impl
