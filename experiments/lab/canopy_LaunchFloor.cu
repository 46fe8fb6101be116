/// \file canopy_LaunchFloor.cu
/// \brief The launch-floor kernel: a grid that does nothing but start and retire its blocks, with the
/// block shape and shared-memory request of a design's kernel, so that a graph of such launches
/// times the part of a small step that no kernel body can remove (graph launch, block dispatch,
/// the gap between dependent kernels).
#include "canopy_GpuLabKernels.hpp"

#include <cuda_runtime.h>

namespace canopy::cuda
{
namespace
{
__global__ void launchFloorKernel(int *sink)
{
  extern __shared__ int smem[];
  // One store per block, read from shared memory, so that neither the block nor its shared-memory
  // request can be optimised away.
  if (threadIdx.x == 0)
  {
    smem[0] = static_cast<int>(blockIdx.x);
    sink[blockIdx.x] = smem[0];
  }
}
} // namespace

cudaError_t prepareLaunchFloorGrid(size_t smem_bytes)
{
  return cudaFuncSetAttribute(launchFloorKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes));
}

cudaError_t launchFloorGrid(int blocks, int threads_per_block, size_t smem_bytes, int *sink, cudaStream_t stream)
{
  if (blocks <= 0 || threads_per_block <= 0 || threads_per_block > 1024 || smem_bytes < sizeof(int) || !sink)
    return cudaErrorInvalidValue;
  launchFloorKernel<<<blocks, threads_per_block, smem_bytes, stream>>>(sink);
  return cudaGetLastError();
}
} // namespace canopy::cuda
