/// \file canopy_Bf16.hpp
/// \brief bf16 stored as uint16_t bits (Debian's Kokkos 3.4 has no bhalf_t), usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

/// Host and device inline (the Kokkos and CUDA kernels call these), without needing Kokkos.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define CANOPY_HOST_DEVICE_INLINE __host__ __device__ inline
#else
#define CANOPY_HOST_DEVICE_INLINE inline
#endif

namespace canopy
{
/// \brief bits -> float: bf16 is the top half of an IEEE binary32, so this is exact.
CANOPY_HOST_DEVICE_INLINE float bf16ToFloat(uint16_t bits)
{
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/// \brief float -> bits, round to nearest, ties to even. NaN stays NaN (quiet bit forced so that
/// truncation cannot turn a NaN payload into Inf); Inf stays Inf; subnormals round like any value.
CANOPY_HOST_DEVICE_INLINE uint16_t floatToBf16(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t const lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

/// \brief Bit pattern of a quiet NaN, used to poison outputs before a run.
constexpr uint16_t BF16_POISON = 0x7fc1;

CANOPY_HOST_DEVICE_INLINE bool bf16IsNan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }
} // namespace canopy
