/// \file canopy_VerifyAttentionSm120.cu
/// \brief cuda-sm120 and cuda-sm120-w32: split-K flash-decode over the native SGLang buffers,
/// heads x tree nodes folded into 64-row MMA tiles (16 rows per warp, or 32 in the w32 tile of
/// canopy_VerifyAttentionWide.cuh), plus the split combine kernel and the launch-side checks.
#include "canopy_VerifyAttentionKernel.cuh"
#include "canopy_VerifyAttentionLaunch.cuh"
#include "canopy_VerifyAttentionWide.cuh"

#include <cmath>
#include <mutex>

namespace canopy::cuda
{
namespace Impl
{
// 64 (node, head) rows per CTA: with H = 8 that is 8 tree nodes, so a KV row fetched into shared
// memory feeds 64 query rows; 4 row groups x 2 K/V halves = 8 warps. 8 warps, not 9 or 12: the
// register file is split over 4 sub-partitions, so 9 warps cap a thread at 168 registers (ptxas
// spilled 508 B there) while 8 allow 255 for the 72 (Q) + 128 (O) + 16 (scores) this tile holds.
// 4 KB of visibility words: the whole of a 1024-node tree for up to 32 nodes per tile (H >= 2);
// with H = 1 (64 nodes) a window of 512 tree keys, rebuilt once per 512 keys.
using Sm120Config = TileConfig<4, 2, true, false, 4096>;
static_assert(Sm120Config::M_TILE == SM120_M_TILE && Sm120Config::N_TILE == SM120_N_TILE,
              "suggestNsplit counts in the cuda-sm120 tile: keep SM120_M_TILE / SM120_N_TILE in step");

template <class PartialT>
__global__ void __launch_bounds__(Sm120Config::THREADS, 1) sm120Kernel(VerifyParams const p, int m_tiles)
{
  int const mt = blockIdx.x % m_tiles;
  int const split = blockIdx.x / m_tiles;
  verifyTile<Sm120Config, PartialT>(p, blockIdx.y, mt, split, 0);
}

template <class PartialT>
__global__ void __launch_bounds__(WideConfig::THREADS, 1) sm120WideKernel(VerifyParams const p, int m_tiles)
{
  verifyTileWide<PartialT>(p, blockIdx.y, blockIdx.x % m_tiles, blockIdx.x / m_tiles);
}

/// One block per (node, head) row, COMBINE_COLS output columns per thread: the splits' partials
/// merged through SoftmaxState (weights 2^(lse_s - max) over the splits). Rows past the live sum T
/// (read from qo_indptr at run time) exit.
constexpr int COMBINE_COLS = 4;
constexpr int COMBINE_THREADS = D_V / COMBINE_COLS;
constexpr int COMBINE_BATCH = 8;  ///< splits whose partials a thread has in flight together

/// Four consecutive columns of a partial row as floats (fp32 or bf16 partials).
template <class PartialT>
__device__ __forceinline__ float4 loadPartial4(PartialT const *src)
{
  if constexpr (sizeof(PartialT) == 4)
    return *reinterpret_cast<float4 const *>(src);
  else
  {
    uint2 const raw = *reinterpret_cast<uint2 const *>(src);
    float2 const a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 const *>(&raw.x));
    float2 const b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 const *>(&raw.y));
    return float4{a.x, a.y, b.x, b.y};
  }
}

template <class PartialT>
__global__ void __launch_bounds__(COMBINE_THREADS) combineKernel(VerifyParams const p)
{
  int64_t const row = blockIdx.x;
  if (row >= p.batch.qo_indptr[p.batch.batch_size] * p.batch.num_heads)
    return;
  int const c = threadIdx.x * COMBINE_COLS;
  uint16_t *orow = p.batch.out + row * p.out_row_stride + c;
  if (row >= p.partial_rows)
  {
    // Workspace smaller than the batch (grow strategy used past its warm-up size): NaN, never stale.
    *reinterpret_cast<uint2 *>(orow) = make_uint2(0x7fc07fc0u, 0x7fc07fc0u);
    return;
  }
  int const ns = p.nsplit;
  float const *lse = p.partial_lse + row * ns;
  // The splits merged into the row's softmax state: m first (the max lse), then each split's weight.
  SoftmaxState st;
  for (int s = 0; s < ns; ++s)
    st.m = fmaxf(st.m, lse[s]);
  // The partials in batches of COMBINE_BATCH splits: all of a batch's loads are issued before its
  // first weight is used, so a row waits on ns / COMBINE_BATCH memory round trips instead of ~ns / 2
  // (the loop the compiler unrolled by two); the weights still merge in split order, so the result
  // is the same bit for bit.
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < ns; s0 += COMBINE_BATCH)
  {
    float ls[COMBINE_BATCH];
    float4 v[COMBINE_BATCH];
#pragma unroll
    for (int k = 0; k < COMBINE_BATCH; ++k)
    {
      ls[k] = s0 + k < ns ? lse[s0 + k] : NEG_INF;
      PartialT const *src = static_cast<PartialT const *>(p.partial_o) + (row * ns + s0 + k) * D_V + c;
      v[k] = ls[k] == NEG_INF ? float4{} : loadPartial4(src);
    }
#pragma unroll
    for (int k = 0; k < COMBINE_BATCH; ++k)
    {
      if (ls[k] == NEG_INF)
        continue;  // empty split (or past ns): its O was never written, nor read
      float const w = st.mergePart(ls[k]);
      acc[0] += w * v[k].x, acc[1] += w * v[k].y, acc[2] += w * v[k].z, acc[3] += w * v[k].w;
    }
  }
  float const inv = 1.f / st.l;  // 0 visible keys cannot happen (a node sees itself); 0/0 = NaN if it did
  *reinterpret_cast<uint2 *>(orow) =
      make_uint2(packBf16(acc[0] * inv, acc[1] * inv), packBf16(acc[2] * inv, acc[3] * inv));
}

cudaError_t launchCombine(VerifyParams const &p, cudaStream_t stream)
{
  int64_t const rows = p.max_nodes * p.batch.num_heads;
  if (p.partial_bf16)
    combineKernel<__nv_bfloat16><<<static_cast<unsigned>(rows), COMBINE_THREADS, 0, stream>>>(p);
  else
    combineKernel<float><<<static_cast<unsigned>(rows), COMBINE_THREADS, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t prepareFlat();
} // namespace Impl

size_t verifyWorkspaceBytes(int64_t rows, int nsplit, bool partial_bf16)
{
  if (nsplit <= 1 || rows <= 0)
    return 0;
  size_t const r = static_cast<size_t>(rows) * static_cast<size_t>(nsplit);
  size_t const o = r * partialRowBytes(partial_bf16);
  return o + r * sizeof(float) + PARTIAL_LSE_ALIGN;  // + alignment slack for the lse array
}

size_t sm120SharedBytes() { return Impl::Sm120Config::SMEM_BYTES; }
size_t sm120WideSharedBytes() { return Impl::WideConfig::SMEM_BYTES; }

cudaError_t prepareVerifyKernels()
{
  static std::once_flag once;
  static cudaError_t status = cudaSuccess;
  std::call_once(once, [] {
    status = Impl::allowSharedMemory({reinterpret_cast<void const *>(Impl::sm120Kernel<float>),
                                      reinterpret_cast<void const *>(Impl::sm120Kernel<__nv_bfloat16>)},
                                     Impl::Sm120Config::SMEM_BYTES);
    if (status == cudaSuccess)
      status = Impl::allowSharedMemory({reinterpret_cast<void const *>(Impl::sm120WideKernel<float>),
                                        reinterpret_cast<void const *>(Impl::sm120WideKernel<__nv_bfloat16>)},
                                       Impl::WideConfig::SMEM_BYTES);
    if (status == cudaSuccess)
      status = Impl::prepareFlat();
  });
  return status;
}

char const *verifyParamsProblem(VerifyParams const &p)
{
  if (!p.batch.kv_indptr || !p.batch.qo_indptr || !p.batch.q || !p.batch.out ||
      !(p.batch.kv_dtype == KvDtype::kBf16 ? static_cast<void const *>(p.batch.kv_pool) : p.batch.kv_pool_fp8))
    return "a required buffer (kv_indptr, qo_indptr, q, the pool of its kv dtype, out) is null";
  if (p.batch.kv_dtype != KvDtype::kBf16 && !(p.batch.kv_scale > 0.f && std::isfinite(p.batch.kv_scale)))
    return "kv_scale must be finite and > 0";
  if (!p.batch.kv_indices || !p.batch.out_cache_loc)
    return "kv_indices or out_cache_loc is null";
  if (p.batch.mask_layout == MaskLayout::kParents ? !p.batch.tree_parent : (!p.batch.custom_mask || !p.batch.mask_indptr))
    return "the mask layout's buffers (custom_mask + mask_indptr, or tree_parent) are null";
  if (p.q_row_stride < D_QK || p.kv_row_stride < D_QK || p.out_row_stride < D_V || p.q_row_stride % 8 ||
      p.kv_row_stride % 8 || p.out_row_stride % 8)
    return "row strides must cover the row (576 / 576 / 512) and be multiples of 8 elements (16-byte rows)";
  if (p.batch.num_heads < 1)
    return "num_heads must be >= 1";
  if (p.batch.batch_size < 0 || p.batch.batch_size > p.max_batch || p.max_batch > 65535)
    return "batch_size must be within [0, max_batch] and max_batch <= 65535";
  if (p.max_tree < 0 || p.max_nodes < 0)
    return "max_tree and max_nodes must be >= 0";
  if (p.max_tree > MAX_TREE)
    return "max_tree exceeds the largest tree the kernels serve (cuda::MAX_TREE)";
  if (p.nsplit < 1 || p.nsplit > MAX_NSPLIT)
    return "nsplit must be within [1, 256]";
  if (p.nsplit > 1 && (!p.partial_o || !p.partial_lse))
    return "nsplit > 1 needs the split workspace (partial_o, partial_lse)";
  if (!(p.batch.sm_scale > 0.f))
    return "sm_scale must be > 0";
  return nullptr;
}


cudaError_t launchVerifySm120(VerifyParams const &p, cudaStream_t stream)
{
  return Impl::launchSplit<Impl::Sm120Config>(p, stream, Impl::sm120Kernel<float>, Impl::sm120Kernel<__nv_bfloat16>);
}

cudaError_t launchVerifySm120Wide(VerifyParams const &p, cudaStream_t stream)
{
  return Impl::launchSplit<Impl::WideConfig>(p, stream, Impl::sm120WideKernel<float>, Impl::sm120WideKernel<__nv_bfloat16>);
}
} // namespace canopy::cuda
