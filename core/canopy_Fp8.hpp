/// \file canopy_Fp8.hpp
/// \brief FP8 bytes (OCP e4m3fn and e5m2, as torch.float8_e4m3fn / float8_e5m2 store them) to and
/// from float, exactly, on host and device. Encoding rounds to nearest, ties to even, and does not
/// clamp, as torch's `.to(fp8)` does: e4m3fn has no infinity, so a magnitude that rounds above 448
/// becomes NaN (0x7f / 0xff); e5m2 rounds above 57344 to infinity. docs/design.md §8 ("FP8 KV caches").
#pragma once

#include "canopy_Bf16.hpp"

#include <cstdint>
#include <cstring>

namespace canopy
{
/// The two FP8 formats: exponent and mantissa bits (the sign is the top bit).
struct Fp8Format
{
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;  ///< e5m2: exponent all ones is IEEE-like (Inf, NaN); e4m3fn: only S.1111.111 is NaN
};
constexpr Fp8Format FP8_E4M3{4, 3, 7, false};
constexpr Fp8Format FP8_E5M2{5, 2, 15, true};

/// Largest finite values: 1.75 * 2^8 and 1.75 * 2^15.
constexpr float FP8_E4M3_MAX = 448.0f;
constexpr float FP8_E5M2_MAX = 57344.0f;

/// \brief byte -> float, exact (every FP8 value is a float).
CANOPY_HOST_DEVICE_INLINE float fp8ToFloat(uint8_t byte, Fp8Format fmt)
{
  uint32_t const sign = static_cast<uint32_t>(byte >> 7) << 31;
  int const e = (byte >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1);
  uint32_t const m = byte & ((1u << fmt.man_bits) - 1);
  int const e_max = (1 << fmt.exp_bits) - 1;
  uint32_t u;
  if (fmt.has_inf && e == e_max)
    u = sign | 0x7f800000u | (m << (23 - fmt.man_bits)) | (m ? 0x00400000u : 0u);
  else if (!fmt.has_inf && e == e_max && m == (1u << fmt.man_bits) - 1)
    u = sign | 0x7fc00000u;
  else if (e == 0)
  {
    // Subnormal: m * 2^(1 - bias - man_bits), exact in float.
    float const mag = static_cast<float>(m) * (1.0f / static_cast<float>(1u << (fmt.bias - 1 + fmt.man_bits)));
    memcpy(&u, &mag, sizeof(u));
    u |= sign;
  }
  else
    u = sign | (static_cast<uint32_t>(e - fmt.bias + 127) << 23) | (m << (23 - fmt.man_bits));
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/// \brief float -> byte, round to nearest, ties to even, no clamp (see the file comment).
CANOPY_HOST_DEVICE_INLINE uint8_t floatToFp8(float f, Fp8Format fmt)
{
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  uint8_t const sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t const abs_bits = u & 0x7fffffffu;
  uint8_t const nan = 0x7f;                                      // S.11111.11 and S.1111.111
  uint8_t const inf_or_nan = fmt.has_inf ? uint8_t{0x7c} : nan;  // e4m3fn: overflow is NaN
  if (abs_bits > 0x7f800000u)
    return static_cast<uint8_t>(sign | nan);
  if (abs_bits == 0x7f800000u)
    return static_cast<uint8_t>(sign | inf_or_nan);
  int const min_normal_exp = 1 - fmt.bias;  // unbiased exponent of the smallest normal
  int const e = static_cast<int>(abs_bits >> 23) - 127;
  // Work in units of the FP8 spacing at this magnitude: q = |f| / 2^(exp - man_bits), rounded to
  // an integer (ties to even) on the float's exact bits, then rebuilt as exponent and mantissa.
  int const exp = e < min_normal_exp ? min_normal_exp : e;
  int const shift = exp - fmt.man_bits;  // value of one unit: 2^shift
  // |f| = mant24 * 2^(e - 23) with the implicit bit (denormal floats: far below every FP8 value).
  uint64_t const mant24 = (abs_bits >> 23) == 0 ? 0 : ((abs_bits & 0x7fffffu) | 0x800000u);
  int const rshift = shift - (e - 23);  // bits dropped: >= 20 for every normal float
  uint64_t q;
  if (rshift >= 64 || mant24 == 0)
    q = 0;
  else
  {
    uint64_t const kept = mant24 >> rshift;
    uint64_t const rem = mant24 & ((uint64_t{1} << rshift) - 1);
    uint64_t const half = uint64_t{1} << (rshift - 1);
    q = kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
  }
  // q counts units of 2^shift: below 2^(man_bits+1) it is mantissa (with the implicit bit) at
  // exponent exp; rounding up may carry into the next binade, handled by the generic rebuild.
  int const max_exp = fmt.has_inf ? ((1 << fmt.exp_bits) - 2) - fmt.bias : ((1 << fmt.exp_bits) - 1) - fmt.bias;
  if (q == 0)
    return sign;
  int biased = 0;
  uint32_t man = 0;
  int qexp = exp;
  if (q >= (uint64_t{2} << fmt.man_bits))  // carried into the next binade
  {
    q >>= 1;
    ++qexp;
  }
  if (q < (uint64_t{1} << fmt.man_bits))  // subnormal (only at the smallest exponent)
  {
    biased = 0;
    man = static_cast<uint32_t>(q);
  }
  else
  {
    biased = qexp + fmt.bias;
    man = static_cast<uint32_t>(q) & ((1u << fmt.man_bits) - 1);
  }
  uint32_t const mmax = (1u << fmt.man_bits) - 1;
  if (qexp > max_exp || (!fmt.has_inf && qexp == max_exp && man == mmax))
    return static_cast<uint8_t>(sign | inf_or_nan);
  return static_cast<uint8_t>(sign | (biased << fmt.man_bits) | man);
}

/// \brief Whether \p byte is a NaN encoding of \p fmt (e4m3fn: 0x7f, 0xff; e5m2: exponent all
/// ones with a non-zero mantissa).
CANOPY_HOST_DEVICE_INLINE bool fp8IsNan(uint8_t byte, Fp8Format fmt)
{
  uint8_t const abs = byte & 0x7fu;
  return fmt.has_inf ? abs > 0x7cu : abs == 0x7fu;
}
} // namespace canopy
