/// \file canopy_Fp32FmaPeak.cu
/// \brief Throughput kernel for the fp32 FMA ceiling: the rate a design without tensor cores can
/// approach on the GPU at hand (Kokkos has no tensor-core abstraction, so this is the portable
/// kernel's ceiling, beside the mma.sync and GEMM ones of the hand-written designs).
#include "canopy_GpuLabKernels.hpp"

#include <cuda_runtime.h>

namespace canopy::cuda
{
namespace
{
constexpr int CHAINS = 8;   // independent accumulators per thread: cover the FMA latency at 8+ warps/SM
constexpr int UNROLL = 16;  // FMAs per chain per round

__global__ void fp32FmaKernel(int iters, float *sink)
{
  // Operands near 1 that differ per thread, so that nothing folds and nothing overflows.
  float const a = 1.f + 1e-7f * static_cast<float>(threadIdx.x);
  float const b = 1e-7f * static_cast<float>(blockIdx.x % 97);
  float acc[CHAINS];
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
    acc[c] = static_cast<float>(c) * 1e-3f;
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int c = 0; c < CHAINS; ++c)
        acc[c] = fmaf(acc[c], a, b);
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
    s += acc[c];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
} // namespace

int64_t fp32FmaPeakFlops(int blocks, int threads_per_block, int iters)
{
  return int64_t(2) * CHAINS * UNROLL * iters * int64_t(threads_per_block) * blocks;
}

cudaError_t launchFp32FmaPeak(int blocks, int threads_per_block, int iters, float *sink, cudaStream_t stream)
{
  if (blocks <= 0 || threads_per_block <= 0 || threads_per_block > 1024 || iters <= 0)
    return cudaErrorInvalidValue;
  fp32FmaKernel<<<blocks, threads_per_block, 0, stream>>>(iters, sink);
  return cudaGetLastError();
}
} // namespace canopy::cuda
