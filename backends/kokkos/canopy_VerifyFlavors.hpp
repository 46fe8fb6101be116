/// \file canopy_VerifyFlavors.hpp
/// \brief The tile-product flavours a Kokkos design asks for: the portable kernel's own register
/// blocks (kokkos-team) and Kokkos Kernels' batched GEMMs (kokkos-kk and its variants).
#pragma once

namespace canopy
{
/// Tile-product flavours a design asks for.
struct TeamTiles  ///< hand-written register blocks: the portable kernel itself (kokkos-team)
{
  static constexpr char const *name() { return "kokkos-team"; }
};
/// Which Kokkos Kernels batched GEMM does kokkos-kk's tile products.
enum class KkGemm
{
  kTeamBlocked,    ///< TeamGemm, Algo::Gemm::Blocked (register blocking): kokkos-kk
  kTeamUnblocked,  ///< TeamGemm, Algo::Gemm::Unblocked: kokkos-kk-unblocked
  kTeamVector,     ///< TeamVectorGemm (team threads x vector lanes), unblocked: kokkos-kk-teamvector
};
template <KkGemm G>
struct BatchedGemmTilesOf  ///< Kokkos Kernels' batched GEMM (kokkos-kk and its variants)
{
  static constexpr char const *name()
  {
    return G == KkGemm::kTeamBlocked ? "kokkos-kk" : G == KkGemm::kTeamUnblocked ? "kokkos-kk-unblocked"
                                                                                  : "kokkos-kk-teamvector";
  }
};
using BatchedGemmTiles = BatchedGemmTilesOf<KkGemm::kTeamBlocked>;
} // namespace canopy
