/// \file tstFp8.cpp
/// \brief FP8 encode/decode against hand-checked values (448, 2^-9, subnormals, ties, overflow, NaN
/// encodings) and against a brute-force nearest-value search over all 256 bytes, for e4m3fn and e5m2.
#include "canopy_Fp8.hpp"
#include "canopy_KvDtype.hpp"
#include "canopy_Random.hpp"
#include "canopy_TestSeed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace
{
using namespace canopy;

float const inf = std::numeric_limits<float>::infinity();
float const nan = std::numeric_limits<float>::quiet_NaN();

TEST(Fp8, e4m3HandCheckedValues)
{
  struct Case
  {
    float value;
    uint8_t byte;
  };
  // S.EEEE.MMM, bias 7: 1.0 = 0.0111.000; 448 = 1.75 * 2^8 = 0.1111.110; 2^-9 = 0.0000.001 (the
  // smallest subnormal); 2^-6 = 0.0001.000 (the smallest normal).
  Case const cases[] = {{1.0f, 0x38},        {-2.0f, 0xc0},        {448.0f, 0x7e},      {-448.0f, 0xfe},
                        {0.001953125f, 0x01}, {0.015625f, 0x08},    {7 * 0.001953125f, 0x07},
                        {0.0f, 0x00},         {-0.0f, 0x80},
                        {1.0625f, 0x38},     // tie between 1 and 1.125: to the even mantissa (1)
                        {1.1875f, 0x3a},     // tie between 1.125 and 1.25: to 1.25
                        {1.07f, 0x39},       // above the tie: up
                        {0.0009765625f, 0x00},  // 2^-10, half the smallest subnormal: tie to 0
                        {0.00146484375f, 0x01}, // 1.5 * 2^-10: up to 2^-9
                        {464.0f, 0x7e},      // tie between 448 and 480 (NaN in e4m3fn): to 448
                        {465.0f, 0x7f},      // rounds to 480: no such value, NaN (torch, no clamp)
                        {1000.0f, 0x7f},     {-1000.0f, 0xff},   {inf, 0x7f},      {-inf, 0xff},
                        {nan, 0x7f}};
  for (Case const &c : cases)
    EXPECT_EQ(floatToFp8(c.value, FP8_E4M3), c.byte) << c.value;
  EXPECT_EQ(fp8ToFloat(0x7e, FP8_E4M3), 448.0f);
  EXPECT_EQ(fp8ToFloat(0x01, FP8_E4M3), 0.001953125f);
  EXPECT_EQ(fp8ToFloat(0x07, FP8_E4M3), 7 * 0.001953125f);
  EXPECT_EQ(fp8ToFloat(0x08, FP8_E4M3), 0.015625f);
  EXPECT_EQ(fp8ToFloat(0xb9, FP8_E4M3), -1.125f);
  EXPECT_TRUE(std::signbit(fp8ToFloat(0x80, FP8_E4M3)));
  EXPECT_EQ(fp8ToFloat(0x78, FP8_E4M3), 256.0f) << "exponent all ones is a normal binade in e4m3fn";
  EXPECT_TRUE(std::isnan(fp8ToFloat(0x7f, FP8_E4M3)));
  EXPECT_TRUE(std::isnan(fp8ToFloat(0xff, FP8_E4M3)));
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(fp8IsNan(static_cast<uint8_t>(b), FP8_E4M3), b == 0x7f || b == 0xff) << b;
}

TEST(Fp8, e5m2HandCheckedValues)
{
  // S.EEEEE.MM, bias 15: 1.0 = 0.01111.00; 57344 = 1.75 * 2^15; 2^-16 the smallest subnormal.
  EXPECT_EQ(floatToFp8(1.0f, FP8_E5M2), 0x3c);
  EXPECT_EQ(floatToFp8(57344.0f, FP8_E5M2), 0x7b);
  EXPECT_EQ(floatToFp8(0.001953125f, FP8_E5M2), 0x18);  // 2^-9: a normal in e5m2
  EXPECT_EQ(floatToFp8(std::ldexp(1.0f, -16), FP8_E5M2), 0x01);
  EXPECT_EQ(floatToFp8(std::ldexp(1.0f, -14), FP8_E5M2), 0x04);
  EXPECT_EQ(floatToFp8(std::ldexp(1.0f, -17), FP8_E5M2), 0x00);  // tie to 0
  EXPECT_EQ(floatToFp8(1.125f, FP8_E5M2), 0x3c);   // tie between 1 and 1.25: to 1
  EXPECT_EQ(floatToFp8(1.375f, FP8_E5M2), 0x3e);   // tie between 1.25 and 1.5: to 1.5
  EXPECT_EQ(floatToFp8(61440.0f, FP8_E5M2), 0x7c); // tie between 57344 and 65536: to even, Inf
  EXPECT_EQ(floatToFp8(60000.0f, FP8_E5M2), 0x7b);
  EXPECT_EQ(floatToFp8(-1e6f, FP8_E5M2), 0xfc);
  EXPECT_EQ(floatToFp8(inf, FP8_E5M2), 0x7c);
  EXPECT_EQ(floatToFp8(-inf, FP8_E5M2), 0xfc);
  EXPECT_TRUE(fp8IsNan(floatToFp8(nan, FP8_E5M2), FP8_E5M2));
  EXPECT_EQ(fp8ToFloat(0x7b, FP8_E5M2), 57344.0f);
  EXPECT_EQ(fp8ToFloat(0x01, FP8_E5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8ToFloat(0x7c, FP8_E5M2), inf);
  EXPECT_EQ(fp8ToFloat(0xfc, FP8_E5M2), -inf);
  for (int b = 0; b < 256; ++b)
  {
    bool const is_nan = (b & 0x7f) > 0x7c;
    EXPECT_EQ(fp8IsNan(static_cast<uint8_t>(b), FP8_E5M2), is_nan) << b;
    EXPECT_EQ(std::isnan(fp8ToFloat(static_cast<uint8_t>(b), FP8_E5M2)), is_nan) << b;
  }
}

/// The nearest FP8 value by search over all bytes: ties to the even byte (the even mantissa);
/// beyond the largest finite value by half a step or more, the format's overflow byte.
uint8_t nearestBySearch(float x, Fp8Format fmt)
{
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int b = 0; b < 256; ++b)
  {
    float const v = fp8ToFloat(static_cast<uint8_t>(b), fmt);
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(x))
      continue;
    double const d = std::abs(static_cast<double>(v) - x);
    if (d < best_d || (d == best_d && (b & 1) == 0))
    {
      best_d = d;
      best = static_cast<uint8_t>(b);
    }
  }
  double const max = fmt.has_inf ? FP8_E5M2_MAX : FP8_E4M3_MAX;
  double const step = fmt.has_inf ? 8192.0 : 32.0;  // spacing in the top binade
  double const a = std::abs(static_cast<double>(x));
  if (a > max + step / 2 || (a == max + step / 2))  // the tie goes to the (odd) max's even neighbour
    return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | (fmt.has_inf ? 0x7c : 0x7f));
  return best;
}

TEST(Fp8, encodingIsTheNearestValueTiesToEven)
{
  SplitMix64 rng(test::testSeed(46));
  for (Fp8Format fmt : {FP8_E4M3, FP8_E5M2})
  {
    for (int b = 0; b < 256; ++b)  // every value encodes to itself
    {
      float const v = fp8ToFloat(static_cast<uint8_t>(b), fmt);
      if (!fp8IsNan(static_cast<uint8_t>(b), fmt))
        EXPECT_EQ(floatToFp8(v, fmt), b) << "byte " << b;
    }
    for (int i = 0; i < 20000; ++i)
    {
      // Log-uniform magnitudes from far below the smallest subnormal to past the largest value.
      float const mag = std::exp2(static_cast<float>(rng.uniform() * 44.0 - 26.0));
      float const x = rng.uniform() < 0.5 ? -mag : mag;
      ASSERT_EQ(floatToFp8(x, fmt), nearestBySearch(x, fmt)) << x << (fmt.has_inf ? " e5m2" : " e4m3");
    }
  }
}

TEST(Fp8, rowBytesOfEachDtype)
{
  EXPECT_EQ(kvRowBytes(KvDtype::kBf16), 1152);
  EXPECT_EQ(kvRowBytes(KvDtype::kFp8E4m3), 576);
  EXPECT_EQ(kvRowBytes(KvDtype::kFp8E5m2), 576);
  EXPECT_EQ(kvRowBytes(KvDtype::kFp8E4m3BlockScaled), 656);
  EXPECT_EQ(parseKvDtype("fp8-e4m3-blockscaled"), KvDtype::kFp8E4m3BlockScaled);
  EXPECT_THROW(parseKvDtype("fp8"), InputError);
  EXPECT_EQ(numericsUndefinedFor(KvDtype::kFp8E5m2, Numerics::kFp8Mma), "");
  EXPECT_NE(numericsUndefinedFor(KvDtype::kBf16, Numerics::kFp8Mma), "");
  EXPECT_NE(numericsUndefinedFor(KvDtype::kFp8E4m3BlockScaled, Numerics::kFp8Mma), "");
  // Over a run's inputs: refused only when there are inputs and none gives it a meaning.
  using Dtypes = std::vector<KvDtype>;
  EXPECT_TRUE(numericsUndefinedForAll(Dtypes{KvDtype::kBf16, KvDtype::kFp8E4m3BlockScaled}, Numerics::kFp8Mma));
  EXPECT_FALSE(numericsUndefinedForAll(Dtypes{KvDtype::kBf16, KvDtype::kFp8E4m3}, Numerics::kFp8Mma));
  EXPECT_FALSE(numericsUndefinedForAll(Dtypes{KvDtype::kBf16}, Numerics::kDequant));
  EXPECT_FALSE(numericsUndefinedForAll(Dtypes{}, Numerics::kFp8Mma));
}
} // namespace
