/// \file canopy_VerifyAttention_cuda_spec.hpp
/// \brief Kokkos::Cuda specialisation of the verify dispatch (backends/kokkos/canopy_VerifyAttention_spec.hpp):
/// `kokkos-team` on a Kokkos::Cuda instance reaches the hand-written tile kernel of the device's
/// architecture (cuda-sm90 on sm_90, cuda-sm120 elsewhere) on exec.cuda_stream(), Kokkos Kernels
/// style (availability trait + specialisation). The args' BatchRef -> makeVerifyParams (as the CUDA
/// designs) -> the same launcher that design calls. Algo::Portable still runs the TeamPolicy kernel. Compiled where the build has both a CUDA Kokkos and the CUDA designs.
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA) && defined(CANOPY_HAVE_CUDA_DESIGNS)

#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaParams.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_VerifyAttentionCuda.hpp"
#include "kokkos/canopy_VerifyAttention_spec.hpp"

#define CANOPY_HAVE_CUDA_SPECIALISATION

namespace canopy
{
template <>
struct verify_spec_avail<Kokkos::Cuda, TeamTiles> : std::true_type
{
};

/// Name of the specialised path in result rows: kokkos-team[cuda-sm90] on an sm_90 GPU,
/// kokkos-team[cuda-sm120] on every other.
inline std::string cudaSpecPath(cuda::SpecialisedTile const &k) { return std::string("kokkos-team[") + k.design + "]"; }

/// \pre The tile kernel's prepare() was called once outside any graph capture (it raises the
/// kernel's shared-memory limit, which is not a stream operation): the design's plan() does.
template <>
struct VerifyAttention<Kokkos::Cuda, TeamTiles, true>
{
  using MemorySpace = Kokkos::Cuda::memory_space;
  static VerifyPath run(Kokkos::Cuda const &space, VerifyArgs<MemorySpace> const &a,
                        VerifyWorkspace<MemorySpace> const &ws, VerifyPlan const &plan)
  {
    PlanBounds bounds;
    bounds.max_batch = plan.max_batch;
    bounds.max_tree = plan.max_tree;
    bounds.max_nodes = plan.max_nodes;
    cuda::VerifyParams p = cuda::makeVerifyParams(a.batch, bounds, plan.nsplit);
    // The portable workspace holds (nsplit + 1) x node_capacity x H fp32 rows of O and lse: more
    // than this kernel's nsplit x rows layout, which reuses the memory as plain scratch.
    p.partial_o = ws.partial_out.data();
    p.partial_lse = ws.partial_lse.data();
    p.partial_rows = ws.node_capacity * ws.num_heads;
    p.partial_bf16 = false;
    cuda::SpecialisedTile const k = cuda::specialisedTile();
    if (char const *why = cuda::verifyParamsProblem(p))
      return fallBackToPortable(space, a, ws, plan, cudaSpecPath(k), why);
    cuda::check(k.launch(p, space.cuda_stream()), k.design);
    return {cudaSpecPath(k), false};
  }
};
} // namespace canopy

#endif // KOKKOS_ENABLE_CUDA && CANOPY_HAVE_CUDA_DESIGNS
