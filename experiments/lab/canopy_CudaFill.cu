/// \file canopy_CudaFill.cu
/// \brief Device-side random bf16 fill (benchmark pools and GEMM operands: gigabytes that would take
/// seconds to generate on the host and to upload).
#include "canopy_GpuLabKernels.hpp"

#include <cuda_bf16.h>

namespace canopy::cuda
{
namespace
{
__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fillKernel(uint16_t *dst, size_t n, uint64_t seed, float scale)
{
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
  {
    uint64_t const r = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
    float const u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    __nv_bfloat16 const v = __float2bfloat16_rn(scale * (2.f * u - 1.f));
    dst[i] = *reinterpret_cast<uint16_t const *>(&v);
  }
}
} // namespace

cudaError_t fillRandomBf16(uint16_t *dst, size_t n, uint64_t seed, float scale, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  size_t blocks = (n + 255) / 256;
  if (blocks > 65536)
    blocks = 65536;
  fillKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(dst, n, seed, scale);
  return cudaGetLastError();
}
} // namespace canopy::cuda
