/// \file canopy_Fp8Convert.cuh
/// \brief FP8 pool bytes to the bf16 values the tensor cores read (dequant numerics, docs/design.md
/// §8). Every e4m3fn and e5m2 value is a bf16 value (3 or 2 mantissa bits, exponents inside bf16's
/// range), so the conversion is exact; a power-of-two block scale keeps it exact. A one-scale pool's
/// fp32 scale is not applied here: the kernels fold it into the score scale and the output
/// (kv_scale times a product of decoded values), so no rounding is added by it.
#pragma once

#include "canopy_KvDtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace canopy::cuda::Impl
{
/// Two FP8 values (the low and high byte of \p two) of pool dtype \p KV (e5m2 for fp8-e5m2, e4m3fn
/// for the others) as f16x2, low byte in the low half: the conversion of sm_89 and later, exact.
template <KvDtype KV>
__device__ __forceinline__ __half2 fp8x2ToHalf2(uint16_t two)
{
  uint32_t h;
  if constexpr (KV != KvDtype::kFp8E5m2)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(two));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h) : "h"(two));
  return *reinterpret_cast<__half2 *>(&h);
}

/// Four FP8 values (bytes of \p four, lowest first) times \p scale as two bf16x2 words, value k at
/// bf16 position k. \p scale is 1 or a power of two (exact); f16 -> f32 -> bf16 is exact for FP8 values.
template <KvDtype KV>
__device__ __forceinline__ uint2 fp8x4ToBf16x4(uint32_t four, float scale)
{
  float2 const lo = __half22float2(fp8x2ToHalf2<KV>(static_cast<uint16_t>(four & 0xffffu)));
  float2 const hi = __half22float2(fp8x2ToHalf2<KV>(static_cast<uint16_t>(four >> 16)));
  __nv_bfloat162 const a = __floats2bfloat162_rn(lo.x * scale, lo.y * scale);
  __nv_bfloat162 const b = __floats2bfloat162_rn(hi.x * scale, hi.y * scale);
  return make_uint2(*reinterpret_cast<uint32_t const *>(&a), *reinterpret_cast<uint32_t const *>(&b));
}

/// One 16-byte chunk of FP8 values (16 of them) as two 16-byte chunks of bf16: values 0-7, then 8-15.
template <KvDtype KV>
__device__ __forceinline__ void fp8x16ToBf16x16(uint4 const &v, float scale, uint4 &first, uint4 &second)
{
  uint2 const a = fp8x4ToBf16x4<KV>(v.x, scale), b = fp8x4ToBf16x4<KV>(v.y, scale);
  uint2 const c = fp8x4ToBf16x4<KV>(v.z, scale), d = fp8x4ToBf16x4<KV>(v.w, scale);
  first = make_uint4(a.x, a.y, b.x, b.y);
  second = make_uint4(c.x, c.y, d.x, d.y);
}

/// 16 bytes to shared memory (a 32-bit shared-window address).
__device__ __forceinline__ void stShared16(uint32_t addr, uint4 const &v)
{
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
} // namespace canopy::cuda::Impl
