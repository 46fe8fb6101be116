/// \file canopy_FloatPack.hpp
/// \brief A fixed-width pack of fp32 lanes for the kernels' register blocks: a GCC/Clang vector
/// type in builds without a device backend, a plain array (one lane per loop step) elsewhere.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstring>

// Why a pack type and not plain loops: GCC 12 does not keep float accumulator *arrays* of a
// register block in registers (it leaves one row in memory, a store-forwarding chain per FMA), so
// the plain-loop score block ran at 45-60 GFLOP/s on a Zen 4 core; the same block over vector-typed
// accumulators runs at 110 GFLOP/s (96% of the core's FMA peak). Device compilers (nvcc, hipcc,
// SYCL) get the array form, which they unroll and keep in registers themselves.
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__HIPCC__) && !defined(__SYCL_DEVICE_ONLY__) && \
    !defined(KOKKOS_ENABLE_CUDA) && !defined(KOKKOS_ENABLE_HIP) && !defined(KOKKOS_ENABLE_SYCL) &&         \
    !defined(KOKKOS_ENABLE_OPENMPTARGET)
#define CANOPY_FLOAT_PACK_VECTOR 1
#else
#define CANOPY_FLOAT_PACK_VECTOR 0
#endif

namespace canopy::Impl
{
template <int W>
struct FloatPack
{
  static_assert(W >= 1 && (W & (W - 1)) == 0, "pack width is a power of two");
  static constexpr int WIDTH = W;
#if CANOPY_FLOAT_PACK_VECTOR
  typedef float Vector __attribute__((vector_size(W * sizeof(float))));
  Vector v;

  KOKKOS_FORCEINLINE_FUNCTION static FloatPack zero()
  {
    FloatPack p;
    p.v = Vector{};
    return p;
  }
  KOKKOS_FORCEINLINE_FUNCTION static FloatPack load(float const *src)
  {
    FloatPack p;
    memcpy(&p.v, src, sizeof(p.v));  // unaligned load
    return p;
  }
  KOKKOS_FORCEINLINE_FUNCTION void store(float *dst) const { memcpy(dst, &v, sizeof(v)); }
  /// this += s * b (one FMA per lane where the target has FMA)
  KOKKOS_FORCEINLINE_FUNCTION void fma(float s, FloatPack const &b) { v += s * b.v; }
  KOKKOS_FORCEINLINE_FUNCTION void scale(float s) { v *= s; }
#else
  float v[W];

  KOKKOS_FORCEINLINE_FUNCTION static FloatPack zero()
  {
    FloatPack p;
    for (int i = 0; i < W; ++i)
      p.v[i] = 0.f;
    return p;
  }
  KOKKOS_FORCEINLINE_FUNCTION static FloatPack load(float const *src)
  {
    FloatPack p;
    for (int i = 0; i < W; ++i)
      p.v[i] = src[i];
    return p;
  }
  KOKKOS_FORCEINLINE_FUNCTION void store(float *dst) const
  {
    for (int i = 0; i < W; ++i)
      dst[i] = v[i];
  }
  KOKKOS_FORCEINLINE_FUNCTION void fma(float s, FloatPack const &b)
  {
    for (int i = 0; i < W; ++i)
      v[i] += s * b.v[i];
  }
  KOKKOS_FORCEINLINE_FUNCTION void scale(float s)
  {
    for (int i = 0; i < W; ++i)
      v[i] *= s;
  }
#endif
};
} // namespace canopy::Impl
