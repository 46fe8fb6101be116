/// \file canopy_MmaSyncPeak.cu
/// \brief Throughput kernels for the mma.sync ceiling: the rate of the instruction the sm_120
/// designs may use, measured on the GPU at hand, next to the cuBLAS GEMM peak (which on Hopper uses
/// wgmma, an instruction the sm_120 designs may not use). The bound that a design of the sm_120
/// instruction set can approach on an H200 is the mma.sync one, so the tables report both.
#include "canopy_GpuLabKernels.hpp"
#include "canopy_VerifyAttentionKernel.cuh"  // the PTX wrappers the designs use

#include <cuda_runtime.h>

namespace canopy::cuda
{
namespace
{
using Impl::ldmatrixX4;
using Impl::mmaBf16;

constexpr int CHAINS = 8;  // independent accumulators per warp: enough to cover the HMMA latency

/// A pair of bf16 values in [-1, 1), different per thread and index: random operands, since
/// zeros run measurably faster on the tensor cores.
__device__ __forceinline__ uint32_t operand(uint32_t i)
{
  uint32_t h = (threadIdx.x + 977u * blockIdx.x) * 0x9e3779b9u + i * 0x85ebca6bu;
  h ^= h >> 15;
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  // Exponent 126 (values in [0.5, 1)) with a random sign and mantissa, in both halves.
  return (h & 0x807f807fu) | 0x3f003f00u;
}

__global__ void mmaRegisterKernel(int iters, float *sink)
{
  uint32_t a[4], b[CHAINS][2];
  for (int i = 0; i < 4; ++i)
    a[i] = operand(i);
  for (int c = 0; c < CHAINS; ++c)
    b[c][0] = operand(8 + 2 * c), b[c][1] = operand(9 + 2 * c);
  float d[CHAINS][4] = {};
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
      mmaBf16(d[c], a, b[c][0], b[c][1]);
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
    s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// The Q.K^T inner loop of cuda-sm120 without anything around it: B fragments from one
// ldmatrix.x4 (16 keys x 16 dims) of 32 rows of 1168 bytes (the padded K tile), shared by MREP
// A fragments: MREP = 1 is the 16-rows-per-warp tile (one ldmatrix per 2 mma, 4 accumulator
// chains), MREP = 2 the 32-rows-per-warp tile of cuda-sm120-w32 (per 4 mma, 8 chains).
constexpr int LDS_ROWS = 32;
constexpr int LDS_ROW_BYTES = 1168;

template <int MREP>
__global__ void mmaLdmatrixKernel(int iters, float *sink)
{
  extern __shared__ __align__(16) unsigned char tile[];
  for (int i = threadIdx.x; i < LDS_ROWS * LDS_ROW_BYTES / 4; i += blockDim.x)
    reinterpret_cast<uint32_t *>(tile)[i] = operand(i);
  __syncthreads();
  uint32_t a[MREP][4];
  for (int m = 0; m < MREP; ++m)
    for (int i = 0; i < 4; ++i)
      a[m][i] = operand(4 * m + i);
  int const lane = threadIdx.x & 31;
  uint32_t const base = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  float d[MREP][4][4] = {};
  // 72 mma per round either way: 18 k-steps x 4, or 9 x 8.
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int ks = 0; ks < 18 / MREP; ++ks)
#pragma unroll
      for (int np = 0; np < 2; ++np)
      {
        uint32_t const addr = base + ((np * 2 + (lane >> 4)) * 8 + (lane & 7)) * LDS_ROW_BYTES +
                              (ks * 16 + ((lane >> 3) & 1) * 8) * 2;
        uint32_t r[4];
        ldmatrixX4(r, addr);
#pragma unroll
        for (int m = 0; m < MREP; ++m)
        {
          mmaBf16(d[m][np * 2], a[m], r[0], r[1]);
          mmaBf16(d[m][np * 2 + 1], a[m], r[2], r[3]);
        }
      }
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < MREP; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      s += d[m][c][0] + d[m][c][1] + d[m][c][2] + d[m][c][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
} // namespace

int64_t mmaSyncPeakFlops(MmaFeed feed, int blocks, int warps_per_block, int iters)
{
  int64_t const mma_per_iter = feed == MmaFeed::kRegisters ? CHAINS : 18 * 4;
  return int64_t(2) * 16 * 8 * 16 * mma_per_iter * iters * int64_t(warps_per_block) * blocks;
}

size_t mmaSyncPeakSharedBytes(MmaFeed feed)
{
  return feed == MmaFeed::kRegisters ? 0 : size_t(LDS_ROWS) * LDS_ROW_BYTES;
}

cudaError_t launchMmaSyncPeak(MmaFeed feed, int blocks, int warps_per_block, int iters, size_t smem_bytes,
                              float *sink, cudaStream_t stream)
{
  if (blocks <= 0 || warps_per_block <= 0 || warps_per_block > 32 || iters <= 0 ||
      smem_bytes < mmaSyncPeakSharedBytes(feed))
    return cudaErrorInvalidValue;
  // Above 48 KB the dynamic shared memory needs the opt-in attribute (both kernels: the register
  // kernel uses it only to pin blocks per SM).
  void const *kernel = feed == MmaFeed::kRegisters ? reinterpret_cast<void const *>(mmaRegisterKernel)
                       : feed == MmaFeed::kLdmatrix ? reinterpret_cast<void const *>(mmaLdmatrixKernel<1>)
                                                    : reinterpret_cast<void const *>(mmaLdmatrixKernel<2>);
  cudaError_t const e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
  if (e != cudaSuccess)
    return e;
  if (feed == MmaFeed::kRegisters)
    mmaRegisterKernel<<<blocks, 32 * warps_per_block, smem_bytes, stream>>>(iters, sink);
  else if (feed == MmaFeed::kLdmatrix)
    mmaLdmatrixKernel<1><<<blocks, 32 * warps_per_block, smem_bytes, stream>>>(iters, sink);
  else
    mmaLdmatrixKernel<2><<<blocks, 32 * warps_per_block, smem_bytes, stream>>>(iters, sink);
  return cudaGetLastError();
}
} // namespace canopy::cuda
