/// \file canopy_KvTileLoad.hpp
/// \brief How the portable split kernels read KV pool rows into their fp32 tiles, one type per kv
/// dtype (docs/design.md §8): bf16 bits widened; FP8 bytes decoded by core/canopy_Fp8.hpp and
/// multiplied by their scale in the load, so that the tile holds exactly the values a bf16 pool of
/// the dequantised numbers would have given, and the products, softmax and combine are the bf16
/// path's. The dtype is a template parameter of the kernels, chosen once per launch (withKvDtype):
/// a bf16 tile load is the code it was, with no per-element test of the dtype.
#pragma once

#include "canopy_Bf16.hpp"
#include "canopy_BatchRef.hpp"
#include "canopy_Error.hpp"
#include "canopy_Fp8.hpp"
#include "canopy_KvDtype.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace canopy::Impl
{
/// \brief Eight FP8 bytes, 8-byte aligned, as moved from global memory.
struct alignas(8) Fp8x8
{
  uint32_t w[2];
};

/// \brief The FP8 format of \p DT as scalar constants: device code builds the Fp8Format from them
/// (a namespace-scope constexpr object of class type is host-only in CUDA without
/// --expt-relaxed-constexpr, which Kokkos' CUDA builds do not pass).
template <KvDtype DT>
struct Fp8Decoder
{
  static constexpr int EXP_BITS = fp8FormatOf(DT).exp_bits;
  static constexpr int MAN_BITS = fp8FormatOf(DT).man_bits;
  static constexpr int BIAS = fp8FormatOf(DT).bias;
  static constexpr bool HAS_INF = fp8FormatOf(DT).has_inf;

  KOKKOS_FORCEINLINE_FUNCTION static float decode(uint32_t byte)
  {
    return fp8ToFloat(static_cast<uint8_t>(byte), Fp8Format{EXP_BITS, MAN_BITS, BIAS, HAS_INF});
  }
  /// Bytes 0..3 of \p w (memory order, little endian) times \p scale.
  KOKKOS_FORCEINLINE_FUNCTION static void decode4(uint32_t w, float scale, Float4 &out)
  {
    Float4 x;
    for (int i = 0; i < 4; ++i)
      x.v[i] = decode((w >> (8 * i)) & 0xffu) * scale;
    out = x;
  }
};

/// \brief The reads of one kv dtype. Each type offers:
/// - row(slot, dst): the whole dequantised row, dst[0..576) (the resident tiles);
/// - piece(slot, d) and widen(piece, d, lo, hi): 8 values from column d (a multiple of 8) as raw
///   bytes in flight, then as fp32 (the row-tile kernels load a stage's pieces into registers
///   before they compute and widen them into scratch after). A piece travels as a Bf16x8, 16
///   bytes, whatever it holds, so the kernels keep one register array for Q and K pieces.
/// \pre the row-tile kernels: the pool 16-byte aligned (every row is a multiple of 16 bytes).
template <KvDtype DT>
struct KvTileLoad;

/// bf16 bits [slots][576], as stored.
template <>
struct KvTileLoad<KvDtype::kBf16>
{
  uint16_t const *pool;

  KOKKOS_INLINE_FUNCTION explicit KvTileLoad(BatchRef const &b) : pool(b.kv_pool) {}
  KOKKOS_FORCEINLINE_FUNCTION void row(int64_t slot, float *dst) const
  {
    uint16_t const *src = pool + slot * D_QK;
    for (int d = 0; d < D_QK; ++d)
      dst[d] = bf16ToFloat(src[d]);
  }
  KOKKOS_FORCEINLINE_FUNCTION Bf16x8 piece(int64_t slot, int d) const { return load16<Bf16x8>(pool + slot * D_QK + d); }
  KOKKOS_FORCEINLINE_FUNCTION void widen(Bf16x8 const &x, int, Float4 &lo, Float4 &hi) const
  {
    widenBf16x8(x, 1.f, lo, hi);
  }
};

/// fp8-e4m3 and fp8-e5m2 (SGLang's pools): bytes [slots][576], value = decode(byte) * kv_scale.
/// A piece holds its 8 bytes in words 0 and 1.
template <KvDtype DT>
struct KvTileLoadOneScale
{
  using Decoder = Fp8Decoder<DT>;
  uint8_t const *pool;
  float scale;

  KOKKOS_INLINE_FUNCTION explicit KvTileLoadOneScale(BatchRef const &b) : pool(b.kv_pool_fp8), scale(b.kv_scale) {}
  KOKKOS_FORCEINLINE_FUNCTION void row(int64_t slot, float *dst) const
  {
    uint8_t const *src = pool + slot * D_QK;
    for (int d = 0; d < D_QK; ++d)
      dst[d] = Decoder::decode(src[d]) * scale;
  }
  KOKKOS_FORCEINLINE_FUNCTION Bf16x8 piece(int64_t slot, int d) const
  {
    Fp8x8 const x = loadAligned<Fp8x8>(pool + slot * D_QK + d);
    return Bf16x8{{x.w[0], x.w[1], 0u, 0u}};
  }
  KOKKOS_FORCEINLINE_FUNCTION void widen(Bf16x8 const &x, int, Float4 &lo, Float4 &hi) const
  {
    Decoder::decode4(x.w[0], scale, lo);
    Decoder::decode4(x.w[1], scale, hi);
  }
};
template <>
struct KvTileLoad<KvDtype::kFp8E4m3> : KvTileLoadOneScale<KvDtype::kFp8E4m3>
{
  using KvTileLoadOneScale::KvTileLoadOneScale;
};
template <>
struct KvTileLoad<KvDtype::kFp8E5m2> : KvTileLoadOneScale<KvDtype::kFp8E5m2>
{
  using KvTileLoadOneScale::KvTileLoadOneScale;
};

/// fp8-e4m3-blockscaled (DeepSeek V3.2): 656-byte rows, 512 e4m3 latent bytes, 4 fp32 scales (one
/// per 128), 64 bf16 rope values. A latent piece holds its 8 bytes in words 0 and 1 and its
/// block's scale bits in word 2 (8 values never straddle a 128-value block); a rope piece is 8
/// bf16, as the bf16 pool's.
template <>
struct KvTileLoad<KvDtype::kFp8E4m3BlockScaled>
{
  using Decoder = Fp8Decoder<KvDtype::kFp8E4m3BlockScaled>;
  static constexpr int ROW = kvRowBytes(KvDtype::kFp8E4m3BlockScaled);
  uint8_t const *pool;

  KOKKOS_INLINE_FUNCTION explicit KvTileLoad(BatchRef const &b) : pool(b.kv_pool_fp8) {}
  KOKKOS_FORCEINLINE_FUNCTION void row(int64_t slot, float *dst) const
  {
    uint8_t const *src = pool + slot * ROW;
    for (int blk = 0; blk < KV_BLOCKS; ++blk)
    {
      float scale;
      memcpy(&scale, src + KV_BLOCKSCALED_SCALES_AT + 4 * blk, 4);
      for (int d = blk * KV_BLOCK; d < (blk + 1) * KV_BLOCK; ++d)
        dst[d] = Decoder::decode(src[d]) * scale;
    }
    for (int d = 0; d < D_ROPE; ++d)
    {
      uint16_t bits;
      memcpy(&bits, src + KV_BLOCKSCALED_ROPE_AT + 2 * d, 2);
      dst[D_LATENT + d] = bf16ToFloat(bits);
    }
  }
  KOKKOS_FORCEINLINE_FUNCTION Bf16x8 piece(int64_t slot, int d) const
  {
    uint8_t const *src = pool + slot * ROW;
    if (d >= D_LATENT)
      return load16<Bf16x8>(src + KV_BLOCKSCALED_ROPE_AT + 2 * (d - D_LATENT));
    Fp8x8 const x = loadAligned<Fp8x8>(src + d);
    uint32_t const scale_bits = loadAligned<uint32_t>(src + KV_BLOCKSCALED_SCALES_AT + 4 * (d / KV_BLOCK));
    return Bf16x8{{x.w[0], x.w[1], scale_bits, 0u}};
  }
  KOKKOS_FORCEINLINE_FUNCTION void widen(Bf16x8 const &x, int d, Float4 &lo, Float4 &hi) const
  {
    if (d >= D_LATENT)
    {
      widenBf16x8(x, 1.f, lo, hi);
      return;
    }
    float scale;
    memcpy(&scale, &x.w[2], 4);
    Decoder::decode4(x.w[0], scale, lo);
    Decoder::decode4(x.w[1], scale, hi);
  }
};

/// \brief A kv dtype as a type, for the kernels' template argument.
template <KvDtype DT>
using KvDtypeConstant = std::integral_constant<KvDtype, DT>;

/// \brief Calls \p f with the KvDtypeConstant of \p dtype: the one place a launch turns the batch's
/// runtime dtype into the kernel's compile-time one.
template <class F>
void withKvDtype(KvDtype dtype, F &&f)
{
  switch (dtype)
  {
  case KvDtype::kBf16: f(KvDtypeConstant<KvDtype::kBf16>{}); return;
  case KvDtype::kFp8E4m3: f(KvDtypeConstant<KvDtype::kFp8E4m3>{}); return;
  case KvDtype::kFp8E5m2: f(KvDtypeConstant<KvDtype::kFp8E5m2>{}); return;
  case KvDtype::kFp8E4m3BlockScaled: f(KvDtypeConstant<KvDtype::kFp8E4m3BlockScaled>{}); return;
  }
  throw InputError("kv dtype: unknown value " + std::to_string(static_cast<int>(dtype)));
}
} // namespace canopy::Impl
