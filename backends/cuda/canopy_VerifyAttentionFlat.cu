/// \file canopy_VerifyAttentionFlat.cu
/// \brief cuda-flat: the in-house baseline with the structure of SGLang's Triton extend kernel.
#include "canopy_VerifyAttentionKernel.cuh"

namespace canopy::cuda
{
namespace Impl
{
// One block per (request, head, 32-node query tile: the extend kernel's BLOCK_M for head dims
// above 256); 2 row groups x 2 warps that split the K and V columns as in the sm120 tile, so both
// designs share the MMA code and differ only in structure: no head folding (each KV row is fetched
// once per head and per query tile), no split-K (the whole prefix walked serially by one block),
// and V fetched a second time into its own buffer after K. (16-node tiles with 2 warps spilled
// 24 B on sm_90.)
// 2 KB of visibility words: 32 nodes x 512 tree keys, so trees past 512 nodes rebuild the window
// (a path the tests reach here and in cuda-sm120 only with H = 1).
using FlatConfig = TileConfig<2, 2, false, true, 2048>;

__global__ void __launch_bounds__(FlatConfig::THREADS, 1) flatKernel(VerifyParams const p)
{
  verifyTile<FlatConfig, float>(p, blockIdx.z, blockIdx.x, 0, blockIdx.y);
}

cudaError_t prepareFlat()
{
  return cudaFuncSetAttribute(flatKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FlatConfig::SMEM_BYTES);
}
} // namespace Impl

size_t flatSharedBytes() { return Impl::FlatConfig::SMEM_BYTES; }

cudaError_t launchVerifyFlat(VerifyParams const &p, cudaStream_t stream)
{
  VerifyParams q = p;
  q.nsplit = 1;
  if (verifyParamsProblem(q) || q.batch.kv_dtype != KvDtype::kBf16)
    return cudaErrorInvalidValue;
  if (q.max_batch == 0 || q.max_tree == 0 || q.max_nodes == 0)
    return cudaSuccess;
  using Cfg = Impl::FlatConfig;
  if (q.batch.num_heads > 65535)
    return cudaErrorInvalidConfiguration;
  dim3 const grid((q.max_tree + Cfg::M_TILE - 1) / Cfg::M_TILE, q.batch.num_heads, q.max_batch);
  Impl::flatKernel<<<grid, Cfg::THREADS, Cfg::SMEM_BYTES, stream>>>(q);
  return cudaGetLastError();
}
} // namespace canopy::cuda
