/// \file canopy_VerifyAttention_KK.hpp
/// \brief The kokkos-kk path: the portable split kernel with its two tile products (Q K^T and
/// P V) done by Kokkos Kernels' batched team GEMM on the team-scratch tiles.
#pragma once

#include "canopy_VerifyFlavors.hpp"
#include "impl/canopy_VerifyAttention_Kokkos.hpp"

#include <KokkosBatched_Gemm_Decl.hpp>

namespace canopy::Impl
{
/// \brief Tile products through a Kokkos Kernels batched GEMM (\p G: TeamGemm Blocked, the
/// register-blocked variant Kokkos Kernels tunes per memory space, for kokkos-kk; TeamGemm
/// Unblocked and TeamVectorGemm for its experimental variants). Everything else (gathers, masks,
/// online softmax, partials, combine) is the portable kernel's, so the designs differ only in the
/// products.
template <KkGemm G>
struct BatchedGemmTileProducts
{
  static constexpr bool WANTS_TRANSPOSED_K = false;  // the GEMMs read K through its strides
  static constexpr bool READS_FP8 = false;           // kokkos-kk serves bf16 pools only
  static constexpr char const *name() { return BatchedGemmTilesOf<G>::name(); }

  /// C = alpha op(A) op(B) + beta C by the variant's batched GEMM, over the team.
  template <class TransA, class TransB, class Member, class M>
  KOKKOS_INLINE_FUNCTION static void gemm(Member const &member, float alpha, M const &a, M const &b, float beta,
                                          M const &c)
  {
    using namespace KokkosBatched;
    if constexpr (G == KkGemm::kTeamBlocked)
      TeamGemm<Member, TransA, TransB, Algo::Gemm::Blocked>::invoke(member, alpha, a, b, beta, c);
    else if constexpr (G == KkGemm::kTeamUnblocked)
      TeamGemm<Member, TransA, TransB, Algo::Gemm::Unblocked>::invoke(member, alpha, a, b, beta, c);
    else
      TeamVectorGemm<Member, TransA, TransB, Algo::Gemm::Unblocked>::invoke(member, alpha, a, b, beta, c);
  }

  template <class Member>
  using Matrix = Kokkos::View<float **, Kokkos::LayoutStride, typename Member::execution_space::scratch_memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  template <class Member>
  KOKKOS_INLINE_FUNCTION static Matrix<Member> matrix(float *data, int rows, int cols, int row_stride)
  {
    return Matrix<Member>(data, Kokkos::LayoutStride(rows, row_stride, cols, 1));
  }

  /// s = q k^T: (rows x 576) times (KV_TILE x 576)^T.
  template <class Tiles, class Member>
  KOKKOS_INLINE_FUNCTION static void scores(Member const &member, TileRefs const &t, int rows)
  {
    using namespace KokkosBatched;
    constexpr int N = Tiles::KV_TILE;
    gemm<Trans::NoTranspose, Trans::Transpose>(member, 1.f, matrix<Member>(t.q, rows, D_QK, D_QK),
                                               matrix<Member>(t.k, N, D_QK, D_QK), 0.f, matrix<Member>(t.s, rows, N, N));
  }

  /// o = diag(alpha) o + p v: the rescale is a row pass, then (rows x KV_TILE) times the V rows
  /// (KV_TILE x 512, stride 576) accumulated into o with beta = 1.
  template <class Tiles, class Member>
  KOKKOS_INLINE_FUNCTION static void accumulate(Member const &member, TileRefs const &t, int rows)
  {
    using namespace KokkosBatched;
    constexpr int N = Tiles::KV_TILE;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](int r) {
      float const alpha = t.alpha[r];
      float *o = t.o + static_cast<int64_t>(r) * D_V;
      for (int d = 0; d < D_V; ++d)
        o[d] *= alpha;
    });
    member.team_barrier();
    gemm<Trans::NoTranspose, Trans::NoTranspose>(member, 1.f, matrix<Member>(t.s, rows, N, N),
                                                 matrix<Member>(t.k, N, D_V, D_QK), 1.f, matrix<Member>(t.o, rows, D_V, D_V));
  }
};

/// \brief The kokkos-kk path: TeamGemm needs whole Q and O tiles, so it keeps the resident-tile
/// kernel on every space (level-1 scratch on a GPU). \pre \p plan was made for ResidentTiles.
template <class ExecutionSpace, KkGemm G = KkGemm::kTeamBlocked>
void verifyAttentionKK(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                       VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan)
{
  verifyAttentionTeams<ExecutionSpace, BatchedGemmTileProducts<G>, ResidentTiles<ExecutionSpace>>(space, args, ws, plan);
}
} // namespace canopy::Impl
