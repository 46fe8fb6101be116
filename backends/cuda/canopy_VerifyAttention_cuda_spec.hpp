/// \file canopy_VerifyAttention_cuda_spec.hpp
/// \brief Kokkos::Cuda specialisation of the verify dispatch (backends/kokkos/canopy_VerifyAttention_spec.hpp):
/// Views -> VerifyParams -> the same cuda-sm120 launchers, on exec.cuda_stream(). Compiled only when
/// the user's Kokkos has the CUDA backend (none of our registries provides one: the CUDA designs
/// reach the launchers without Kokkos, through canopy_CudaDesigns.cpp).
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)

#include "canopy_CudaRuntime.hpp"
#include "canopy_VerifyAttentionCuda.hpp"
#include "kokkos/canopy_VerifyAttention_spec.hpp"

namespace canopy
{
/// Flavour asking for the hand-written sm_120 tile (mma.sync, <= 99 KB shared memory).
struct CudaSm120Tiles
{
  static constexpr char const *name() { return "cuda-sm120"; }
};

template <>
struct verify_spec_avail<Kokkos::Cuda, CudaSm120Tiles> : std::true_type
{
};

/// \pre cuda::prepareVerifyKernels() was called once outside any graph capture (it raises the
/// kernels' shared-memory limit, which is not a stream operation).
template <>
struct VerifyAttention<Kokkos::Cuda, CudaSm120Tiles, true>
{
  using MemorySpace = Kokkos::Cuda::memory_space;
  static VerifyPath run(Kokkos::Cuda const &space, VerifyArgs<MemorySpace> const &a,
                        VerifyWorkspace<MemorySpace> const &ws, VerifyPlan const &plan)
  {
    cuda::VerifyParams p;
    p.kv_indptr = a.kv_indptr.data();
    p.kv_indices = a.kv_indices.data();
    p.qo_indptr = a.qo_indptr.data();
    p.out_cache_loc = a.out_cache_loc.data();
    p.custom_mask = a.custom_mask.data();
    p.mask_indptr = a.mask_indptr.data();
    p.tree_parent = a.tree_parent.data();
    p.q = a.q.data();
    p.kv_pool = a.kv_pool.data();
    p.out = a.out.data();
    p.batch_size = a.batch_size;
    p.num_heads = a.num_heads;
    p.sm_scale = a.sm_scale;
    p.mask = a.mask_layout == MaskLayout::kFull   ? cuda::MaskMode::kFull
             : a.mask_layout == MaskLayout::kTree ? cuda::MaskMode::kTree
                                                  : cuda::MaskMode::kParents;
    p.max_batch = plan.max_batch;
    p.max_tree = plan.max_tree;
    p.max_nodes = plan.max_nodes;
    p.nsplit = plan.nsplit;
    // The portable workspace holds (nsplit + 1) x node_capacity x H fp32 rows of O and lse: enough
    // for this kernel's nsplit x rows layout, which reuses the memory as plain scratch.
    p.partial_o = ws.partial_out.data();
    p.partial_lse = ws.partial_lse.data();
    p.partial_rows = ws.node_capacity * ws.num_heads;
    p.partial_bf16 = false;
    if (char const *why = cuda::verifyParamsProblem(p))
      return fallBackToPortable(space, a, ws, plan, CudaSm120Tiles::name(), why);
    cuda::check(cuda::launchVerifySm120(p, space.cuda_stream()), "launchVerifySm120");
    return {CudaSm120Tiles::name(), false};
  }
};
} // namespace canopy

#endif // KOKKOS_ENABLE_CUDA
