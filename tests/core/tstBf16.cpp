/// \file tstBf16.cpp
/// \brief bf16 conversions: round-to-nearest-even incl. ties, NaN and Inf preserved, subnormals.
#include "canopy_Bf16.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace
{
float fromBits(uint32_t u)
{
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, exactValuesRoundTrip)
{
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 65536.0f, -3.0e38f})
  {
    uint16_t const b = canopy::floatToBf16(f);
    EXPECT_EQ(canopy::floatToBf16(canopy::bf16ToFloat(b)), b) << f;
  }
  EXPECT_EQ(canopy::floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(canopy::floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(canopy::bf16ToFloat(0x3f80), 1.0f);
}

TEST(Bf16, tiesRoundToEven)
{
  // 0x3f80_8000 is exactly halfway between 0x3f80 (even) and 0x3f81: goes down to even.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x3f808000u)), 0x3f80);
  // 0x3f81_8000 is halfway between 0x3f81 (odd) and 0x3f82 (even): goes up to even.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x3f818000u)), 0x3f82);
  // Just above / below halfway round to nearest.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x3f807fffu)), 0x3f80);
  // Negative ties behave the same on the magnitude.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0xbf808000u)), 0xbf80);
  EXPECT_EQ(canopy::floatToBf16(fromBits(0xbf818000u)), 0xbf82);
}

TEST(Bf16, nanStaysNanInfStaysInf)
{
  float const inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(canopy::floatToBf16(inf), 0x7f80);
  EXPECT_EQ(canopy::floatToBf16(-inf), 0xff80);
  EXPECT_TRUE(std::isnan(canopy::bf16ToFloat(canopy::floatToBf16(std::nanf("")))));
  // A NaN whose payload lives only in the low 16 bits would truncate to Inf without the quiet bit.
  uint16_t const b = canopy::floatToBf16(fromBits(0x7f800001u));
  EXPECT_TRUE(canopy::bf16IsNan(b));
  EXPECT_TRUE(std::isnan(canopy::bf16ToFloat(b)));
  EXPECT_TRUE(canopy::bf16IsNan(canopy::floatToBf16(fromBits(0xff800001u))));
  // The largest finite float rounds up to Inf (overflow), as IEEE rounding does.
  EXPECT_EQ(canopy::floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_TRUE(canopy::bf16IsNan(canopy::BF16_POISON));
}

TEST(Bf16, subnormals)
{
  // Smallest float subnormal rounds to zero; a bf16 subnormal survives exactly.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x00000001u)), 0x0000);
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x00010000u)), 0x0001);
  EXPECT_EQ(canopy::bf16ToFloat(0x0001), fromBits(0x00010000u));
  // Halfway between two bf16 subnormals, ties to even.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x00008000u)), 0x0000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(canopy::floatToBf16(fromBits(0x007fffffu)), 0x0080);
}

TEST(Bf16, relativeErrorBoundedOnRandomValues)
{
  uint32_t x = 12345;
  for (int i = 0; i < 100000; ++i)
  {
    x = x * 1664525u + 1013904223u;
    float const f = fromBits((x & 0x807fffffu) | (((x >> 23) % 200 + 27) << 23));
    float const r = canopy::bf16ToFloat(canopy::floatToBf16(f));
    EXPECT_LE(std::abs(r - f), std::abs(f) * (1.0f / 256.0f)) << f;
  }
}
} // namespace
