/// \file canopy_VerifyAttention_spec.hpp
/// \brief Dispatch of verify attention, Kokkos Kernels style: an availability trait per (execution
/// space, tile flavour), a primary template that is the portable path, specialisations selected by
/// the trait, and Algo::Portable to force the portable path. Every call says which path ran.
#pragma once

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_VerifyArgs.hpp"
#include "canopy_VerifyFlavors.hpp"
#include "impl/canopy_VerifyAttention_Kokkos.hpp"
#ifdef CANOPY_HAVE_KOKKOSKERNELS
#include "impl/canopy_VerifyAttention_KK.hpp"
#endif

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>

namespace canopy
{
/// \brief Auto: the best path compiled for the space and flavour; Portable: the primary template
/// (the portable TeamPolicy kernel), e.g. as the parity baseline of a specialisation.
enum class Algo
{
  Auto,
  Portable
};

/// \brief What ran: the path name, and whether it is a fallback from the one asked for.
struct VerifyPath
{
  std::string path;
  bool fallback = false;
};

/// \brief Whether a specialisation exists for (space, flavour). False: the primary template runs.
template <class ExecutionSpace, class Flavor>
struct verify_spec_avail : std::false_type
{
};
#ifdef CANOPY_HAVE_KOKKOSKERNELS
template <class ExecutionSpace, KkGemm G>
struct verify_spec_avail<ExecutionSpace, BatchedGemmTilesOf<G>> : std::true_type
{
};
#endif

/// \brief Primary template: the portable path.
template <class ExecutionSpace, class Flavor, bool = verify_spec_avail<ExecutionSpace, Flavor>::value>
struct VerifyAttention
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  static VerifyPath run(ExecutionSpace const &space, VerifyArgs<MemorySpace> const &args,
                        VerifyWorkspace<MemorySpace> const &ws, VerifyPlan const &plan)
  {
    Impl::verifyAttentionKokkos(space, args, ws, plan);
    return {TeamTiles::name(), false};
  }
};

#ifdef CANOPY_HAVE_KOKKOSKERNELS
template <class ExecutionSpace, KkGemm G>
struct VerifyAttention<ExecutionSpace, BatchedGemmTilesOf<G>, true>
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  static VerifyPath run(ExecutionSpace const &space, VerifyArgs<MemorySpace> const &args,
                        VerifyWorkspace<MemorySpace> const &ws, VerifyPlan const &plan)
  {
    Impl::verifyAttentionKK<ExecutionSpace, G>(space, args, ws, plan);
    return {BatchedGemmTilesOf<G>::name(), false};
  }
};
#endif

/// \brief For a specialisation that hands a shape back: strict plans throw InputError naming the
/// path and the reason; otherwise the portable path runs and the returned path records the fallback.
template <class ExecutionSpace>
VerifyPath fallBackToPortable(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                              VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan,
                              std::string const &from, std::string const &reason)
{
  if (plan.strict)
    throw InputError(from + ": " + reason + " (strict mode forbids the fallback to " + TeamTiles::name() + ")");
  Impl::verifyAttentionKokkos(space, args, ws, plan);
  return {std::string(TeamTiles::name()) + " (fallback from " + from + ": " + reason + ")", true};
}

/// \brief Whether asking for \p Flavor on \p ExecutionSpace runs that flavour's own path (false:
/// it falls back to the portable one, which a strict plan refuses).
template <class ExecutionSpace, class Flavor>
constexpr bool verifyFlavorCompiled()
{
  return std::is_same<Flavor, TeamTiles>::value || verify_spec_avail<ExecutionSpace, Flavor>::value;
}

/// \brief The plan of the path that asking for \p Flavor with \p algo runs on \p ExecutionSpace:
/// kokkos-kk's own path keeps the resident tiles; everything else (the portable kernel, and the
/// specialisations, which take their sizes from the plan bounds only) plans for VerifyTiles.
/// \p nsplit 0 = auto (Impl::autoNsplitHere: those tiles, the space's concurrency and device);
/// \p max_rows caps the rows per tile (0: the tiles' own), for tests and tile experiments.
template <class ExecutionSpace, class Flavor>
VerifyPlan planVerifyFor(PlanBounds const &bounds, int nsplit, bool strict, Algo algo = Algo::Auto, int max_rows = 0)
{
  auto plan = [&](auto tiles) {
    using Tiles = decltype(tiles);
    int const n = nsplit != 0 ? nsplit : Impl::autoNsplitHere<ExecutionSpace, Tiles>(bounds);
    return Impl::planVerify<ExecutionSpace, Tiles>(bounds, n, strict, max_rows);
  };
  if (algo == Algo::Auto && !std::is_same<Flavor, TeamTiles>::value && verifyFlavorCompiled<ExecutionSpace, Flavor>())
    return plan(Impl::ResidentTiles<ExecutionSpace>{});
  return plan(Impl::VerifyTiles<ExecutionSpace>{});
}

/// \brief Enqueues verify attention (split kernel + combine) on \p space; enqueue only.
/// \pre \p ws was made for \p plan with room for the batch's node rows, and the batch is within
/// the plan bounds (the designs check both on the host).
template <class ExecutionSpace, class Flavor = TeamTiles>
VerifyPath verifyAttention(ExecutionSpace const &space, VerifyArgs<typename ExecutionSpace::memory_space> const &args,
                           VerifyWorkspace<typename ExecutionSpace::memory_space> const &ws, VerifyPlan const &plan,
                           Algo algo = Algo::Auto)
{
  if (algo == Algo::Portable)
    return VerifyAttention<ExecutionSpace, Flavor, false>::run(space, args, ws, plan);
  if (!verifyFlavorCompiled<ExecutionSpace, Flavor>())
    return fallBackToPortable(space, args, ws, plan, Flavor::name(), "not compiled into this build");
  return VerifyAttention<ExecutionSpace, Flavor>::run(space, args, ws, plan);
}
} // namespace canopy
