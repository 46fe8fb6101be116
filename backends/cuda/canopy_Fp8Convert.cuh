/// \file canopy_Fp8Convert.cuh
/// \brief FP8 pool bytes to the bf16 values the tensor cores read (dequant numerics, docs/design.md
/// §8), and floats to FP8 (fp8-mma numerics: Q and the softmax weights). Every e4m3fn and e5m2
/// value is a bf16 value (3 or 2 mantissa bits, exponents inside bf16's range), so the conversion
/// to bf16 is exact; a power-of-two block scale keeps it exact. A one-scale pool's fp32 scale is
/// not applied here: the kernels fold it into the score scale and the output (kv_scale times a
/// product of decoded values), so no rounding is added by it.
#pragma once

#include "canopy_KvDtype.hpp"

#include <cuda_bf16.h>

#include <cstdint>

namespace canopy::cuda::Impl
{
/// Two FP8 values of pool dtype \p KV, bytes \p sel of \p four (a __byte_perm selector putting them
/// in the high bytes of two halfwords), as bf16x2 by bit placement: the sign stays the top bit,
/// exponent and mantissa move under bf16's (4 places right for e4m3, 3 for e5m2), which reads as
/// the value times 2^-120 (2^-112): one multiply by 2^120 (2^112) restores it, subnormals
/// included (bf16 arithmetic keeps them). Integer and FMA-pipe instructions only: the same speed
/// as the sm_89+ conversion instructions (cvt.rn.f16x2.e4m3x2, then to bf16) in cuda-sm90's
/// producer, measured side by side (docs/results/fp8-dequant.md), and it builds for any target.
template <KvDtype KV>
__device__ __forceinline__ __nv_bfloat162 fp8x2ToBf16x2(uint32_t four, uint32_t sel)
{
  constexpr bool E5M2 = KV == KvDtype::kFp8E5m2;
  uint32_t const x = __byte_perm(four, 0u, sel);
  uint32_t const h = ((x & 0x7f007f00u) >> (E5M2 ? 3 : 4)) | (x & 0x80008000u);
  __nv_bfloat162 const v = *reinterpret_cast<__nv_bfloat162 const *>(&h);
  __nv_bfloat16 const bias = __float2bfloat16_rn(E5M2 ? 0x1p112f : 0x1p120f);
  return __hmul2(v, __nv_bfloat162(bias, bias));
}

/// Four FP8 values (bytes of \p four, lowest first) times \p scale as two bf16x2 words, value k at
/// bf16 position k. \p scale is 1 or a power of two (exact).
template <KvDtype KV>
__device__ __forceinline__ uint2 fp8x4ToBf16x4(uint32_t four, float scale)
{
  __nv_bfloat162 a = fp8x2ToBf16x2<KV>(four, 0x1404u), b = fp8x2ToBf16x2<KV>(four, 0x3424u);
  if (scale != 1.f)
  {
    __nv_bfloat16 const s = __float2bfloat16_rn(scale);
    a = __hmul2(a, __nv_bfloat162(s, s));
    b = __hmul2(b, __nv_bfloat162(s, s));
  }
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

/// Two floats to FP8 of pool dtype \p KV (fp8-mma numerics: Q and the softmax weights cast to the
/// pool's type), \p lo in the low byte: round to nearest, ties to even, as the host encoder
/// (core/canopy_Fp8.hpp), except that a magnitude past the largest finite value saturates to it
/// (the instruction has only the saturating form) where the host encoder gives NaN (e4m3fn) or
/// infinity (e5m2). Q past +-448 and weights above 1 do not occur in verify attention.
template <KvDtype KV>
__device__ __forceinline__ uint32_t floatsToFp8x2(float lo, float hi)
{
  uint16_t d;
  if constexpr (KV == KvDtype::kFp8E5m2)
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

/// Four floats to four FP8 bytes, \p a in the lowest.
template <KvDtype KV>
__device__ __forceinline__ uint32_t floatsToFp8x4(float a, float b, float c, float d)
{
  return floatsToFp8x2<KV>(a, b) | floatsToFp8x2<KV>(c, d) << 16;
}

/// Eight bf16 values (one 16-byte chunk) to eight FP8 bytes, value k in byte k.
template <KvDtype KV>
__device__ __forceinline__ uint2 bf16x8ToFp8x8(uint4 const &v)
{
  auto lo = [](uint32_t w) { return __uint_as_float(w << 16); };
  auto hi = [](uint32_t w) { return __uint_as_float(w & 0xffff0000u); };
  return make_uint2(floatsToFp8x4<KV>(lo(v.x), hi(v.x), lo(v.y), hi(v.y)),
                    floatsToFp8x4<KV>(lo(v.z), hi(v.z), lo(v.w), hi(v.w)));
}

/// 4, 8 and 16 bytes to shared memory (a 32-bit shared-window address).
__device__ __forceinline__ void stShared4(uint32_t addr, uint32_t v)
{
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void stShared8(uint32_t addr, uint2 const &v)
{
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ void stShared16(uint32_t addr, uint4 const &v)
{
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
} // namespace canopy::cuda::Impl
