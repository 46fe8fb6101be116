/// \file canopy_RacecheckNamedBarrier.cu
/// \brief Minimal kernel for a compute-sanitizer racecheck false positive that the tile kernels
/// avoid: a two-stage cp.async pipeline with one __syncthreads per tile, where only some warps
/// (the row groups with live rows) also pass a named barrier between the tile's two reads.
///
/// Every stage is reused only after a __syncthreads that all warps pass, so there is no hazard:
/// the output is checked against the host and is exact. Yet racecheck (CUDA 13.0) reports WAR
/// hazards between a reader's second read of stage s and the copy into s two tiles later, when the
/// idle warps skip the named barrier (`unbalanced`); it reports none when they arrive at a named
/// barrier of their own (`balanced`), which is what rowGroupBarrier() in
/// backends/cuda/canopy_VerifyAttentionKernel.cuh does. experiments/gpu/run_cuda_h200.sh checks runs
/// both under racecheck and records the result.
///
/// Usage: canopy_RacecheckNamedBarrier balanced|unbalanced; exit 0 when the output is exact,
/// 1 when it is not, 2 on bad usage, 3 when no GPU is usable.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace
{
constexpr int WARPS = 8, THREADS = 32 * WARPS, TILE = 1024, TILES = 6;  // TILE 16-byte chunks = 16 KB

__device__ __forceinline__ uint32_t smemAddr(void const *p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void copyTile(uint4 *stage, uint4 const *src)
{
  for (int i = threadIdx.x; i < TILE; i += THREADS)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smemAddr(stage + i)), "l"(src + i) : "memory");
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Warps 0 and 4 (row group 0 of four, two warps each) read; the others only copy.
__global__ void pipeline(uint4 const *src, uint32_t *out, bool balanced)
{
  extern __shared__ uint4 stages[];  // 2 x TILE
  int const warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rg = warp % 4;
  bool const reader = rg == 0;
  uint32_t acc = 0;
  copyTile(stages, src);
  for (int j = 0; j < TILES; ++j)
  {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();  // tile j landed; stage (j + 1) & 1 is no longer read by anyone
    if (j + 1 < TILES)
      copyTile(stages + ((j + 1) & 1) * TILE, src + (j + 1) * TILE);
    uint4 const *st = stages + (j & 1) * TILE;
    if (reader)
    {
      for (int i = lane; i < TILE / 2; i += 32)  // first read (the kernels' Q.K^T)
        acc += st[i].x ^ st[i].y;
      asm volatile("bar.sync %0, 64;\n" ::"r"(1 + rg) : "memory");  // the row group's exchange
      for (int i = TILE / 2 + lane; i < TILE; i += 32)  // second read (the kernels' P.V)
        acc += st[i].z ^ st[i].w;
    }
    else if (balanced)
      asm volatile("bar.sync %0, 64;\n" ::"r"(1 + rg) : "memory");
  }
  out[threadIdx.x] = acc;
}
} // namespace

int main(int argc, char **argv)
{
  if (argc != 2 || (std::strcmp(argv[1], "balanced") && std::strcmp(argv[1], "unbalanced")))
  {
    std::fprintf(stderr, "usage: %s balanced|unbalanced\n", argv[0]);
    return 2;
  }
  bool const balanced = !std::strcmp(argv[1], "balanced");
  std::vector<uint32_t> host(TILES * TILE * 4);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<uint32_t>(i) * 2654435761u;  // distinct values: racecheck ignores equal writes
  uint4 *src = nullptr;
  uint32_t *out = nullptr;
  if (cudaMalloc(&src, host.size() * 4) != cudaSuccess || cudaMalloc(&out, THREADS * 4) != cudaSuccess)
  {
    std::fprintf(stderr, "no usable GPU\n");
    return 3;
  }
  cudaMemcpy(src, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(out, 0xff, THREADS * 4);
  int const smem = 2 * TILE * 16;
  cudaFuncSetAttribute(pipeline, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  pipeline<<<1, THREADS, smem>>>(src, out, balanced);
  std::vector<uint32_t> got(THREADS);
  cudaError_t const e = cudaMemcpy(got.data(), out, THREADS * 4, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
  {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    return 3;
  }
  int bad = 0;
  for (int t = 0; t < THREADS; ++t)
  {
    int const lane = t & 31;
    uint32_t want = 0;
    if ((t >> 5) % 4 == 0)
      for (int j = 0; j < TILES; ++j)
      {
        uint32_t const *tile = host.data() + static_cast<size_t>(j) * TILE * 4;
        for (int i = lane; i < TILE / 2; i += 32)
          want += tile[4 * i] ^ tile[4 * i + 1];
        for (int i = TILE / 2 + lane; i < TILE; i += 32)
          want += tile[4 * i + 2] ^ tile[4 * i + 3];
      }
    bad += got[t] != want;
  }
  std::printf("%s: %d of %d outputs wrong\n", argv[1], bad, THREADS);
  return bad ? 1 : 0;
}
