/// \file canopy_SoftmaxState.cuh
/// \brief The online softmax state of one row, shared by the tile kernels and the split combine
/// (included by canopy_VerifyAttentionKernel.cuh). Host and device: the host path (exp2 instead of
/// MUFU.EX2) is what tests/cuda/tstSoftmaxState.cu runs, on any machine with nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace canopy::cuda::Impl
{
constexpr float NEG_INF = -__builtin_huge_valf();

/// 2^x with one MUFU.EX2 (flush-to-zero). exp2f adds a denormal range fix-up of three
/// instructions per call (seen in the sm_90 SASS); softmax weights below 2^-126 do not matter.
__host__ __device__ __forceinline__ float fastExp2(float x)
{
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);  // host builds (tests of SoftmaxState)
#endif
}

/// The online softmax of one row in log2 units, the one state the tile kernels (a block of keys at
/// a time) and the split combine (a split at a time) keep: m is the reference max of the scaled
/// scores seen so far, l the sum of 2^(x - m) over them; outputs accumulated alongside are
/// relative to the same m. lse() = m + log2(l) is what a split hands to the combine.
struct SoftmaxState
{
  /// Lazy rescaling: the tile kernels move m only when a block's max exceeds it by more than
  /// RESCALE_SLACK, so weights stay <= 2^8 (exact in fp32, fine in bf16) and rescaling O (128
  /// multiplies per thread in the 16-row tile, 181 of ~940 instructions per warp and tile when it
  /// ran every tile) happens a few times per split.
  static constexpr float RESCALE_SLACK = 8.f;

  float m = NEG_INF;
  float l = 0.f;

  /// Takes in a block of keys whose largest scaled score is \p mx (-inf: none visible). Returns
  /// alpha, the factor the caller applies to l and to its accumulated outputs (1 when m stays), and
  /// sets \p msub, what the block's scaled scores subtract before exp2; the caller then adds the
  /// block's weights to l. m = -inf (nothing visible yet) always moves, and msub = 0 then keeps
  /// -inf - -inf = NaN out.
  __host__ __device__ __forceinline__ float advance(float mx, float &msub)
  {
    bool const move = mx > m + RESCALE_SLACK || m == NEG_INF;
    float const mnew = move ? fmaxf(m, mx) : m;
    float const alpha = mnew == NEG_INF || mnew == m ? 1.f : fastExp2(m - mnew);
    msub = mnew == NEG_INF ? 0.f : mnew;
    m = mnew;
    return alpha;
  }

  /// Merges a part of the row's keys, given by its lse \p x (a split's partial: its O normalised by
  /// its own sum), into this state, whose m must already be the max over all parts (the combine's
  /// first pass sets it, so the weights of the second pass do not depend on each other): returns
  /// the part's weight 2^(x - m) and adds it to l. A part with x = -inf (no visible key) must be
  /// skipped by the caller.
  __host__ __device__ __forceinline__ float mergePart(float x)
  {
    float const w = exp2f(x - m);
    l += w;
    return w;
  }

  __host__ __device__ __forceinline__ float lse() const { return m + log2f(l); }
};
} // namespace canopy::cuda::Impl
