/// \file canopy_VerifyAttentionLaunch.cuh
/// \brief The launch shape every split-K tile design shares: the tile kernel over (m-tile, split) x
/// request, then the split combine when nsplit > 1. Included by the designs' .cu files; the combine
/// kernel itself lives in one translation unit (canopy_VerifyAttentionSm120.cu) and is reached
/// through launchCombine, so each cubin holds one copy of it.
#pragma once

#include "canopy_VerifyAttentionCuda.hpp"
#include "canopy_VerifyAttentionKernel.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace canopy::cuda::Impl
{
/// The split combine over every (node, head) row of the bucket: the splits' partials merged through
/// SoftmaxState into `out`. Enqueue only.
cudaError_t launchCombine(VerifyParams const &p, cudaStream_t stream);

/// Raises each of \p kernels' dynamic shared-memory limit to \p bytes (the designs' prepare steps:
/// once, outside capture); stops at the first error and returns it.
inline cudaError_t allowSharedMemory(std::initializer_list<void const *> kernels, int bytes)
{
  for (void const *k : kernels)
    if (cudaError_t const e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}

/// Whether a tile config's kernel reads FP8 pools (Cfg::READS_FP8): the others refuse them at launch.
template <class Cfg, class = void>
struct ReadsFp8 : std::false_type
{
};
template <class Cfg>
struct ReadsFp8<Cfg, std::void_t<decltype(Cfg::READS_FP8)>> : std::bool_constant<Cfg::READS_FP8>
{
};

/// Row tiles of \p p's bucket (its largest tree's (node, head) rows in M_TILE-row tiles), rounded up
/// to whole clusters of \p cluster.
template <class Cfg>
int64_t rowTiles(VerifyParams const &p, int cluster = 1)
{
  int64_t const m_tiles = (static_cast<int64_t>(p.max_tree) * p.batch.num_heads + Cfg::M_TILE - 1) / Cfg::M_TILE;
  return (m_tiles + cluster - 1) / cluster * cluster;
}

/// Split kernel over (m-tile, split) x request, then the combine when nsplit > 1. x = split *
/// m_tiles + m-tile: the m-tiles of one split are neighbours in launch order, so the CTAs that
/// read the same KV rows run together and all but the first find them in L2. With \p cluster > 1
/// the grid is launched in thread-block clusters of that many consecutive m-tiles of one split
/// (m_tiles rounded up to whole clusters; a padded tile past every request's rows exits at once).
/// The grid depends on the bucket's bounds only (capture-safe).
template <class Cfg, class KernelF32, class KernelBf16>
cudaError_t launchSplit(VerifyParams const &p, cudaStream_t stream, KernelF32 f32, KernelBf16 bf16, int cluster = 1)
{
  if (verifyParamsProblem(p) || cluster < 1 || (p.batch.kv_dtype != KvDtype::kBf16 && !ReadsFp8<Cfg>::value))
    return cudaErrorInvalidValue;
  if (p.max_batch == 0 || p.max_tree == 0 || p.max_nodes == 0)
    return cudaSuccess;
  int64_t const m_tiles = rowTiles<Cfg>(p, cluster);
  int64_t const gx = m_tiles * (p.nsplit);
  if (gx > 0x7fffffff)
    return cudaErrorInvalidConfiguration;
  dim3 const grid(static_cast<unsigned>(gx), static_cast<unsigned>(p.max_batch));
  int const mt = static_cast<int>(m_tiles);
  cudaError_t e = cudaSuccess;
  if (cluster == 1)
  {
    if (p.partial_bf16)
      bf16<<<grid, ctaThreads<Cfg>(), Cfg::SMEM_BYTES, stream>>>(p, mt);
    else
      f32<<<grid, ctaThreads<Cfg>(), Cfg::SMEM_BYTES, stream>>>(p, mt);
    e = cudaGetLastError();
  }
  else
  {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(ctaThreads<Cfg>());
    cfg.dynamicSmemBytes = Cfg::SMEM_BYTES;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = p.partial_bf16 ? cudaLaunchKernelEx(&cfg, bf16, p, mt) : cudaLaunchKernelEx(&cfg, f32, p, mt);
  }
  if (e != cudaSuccess || p.nsplit == 1)
    return e;
  return launchCombine(p, stream);
}
} // namespace canopy::cuda::Impl
