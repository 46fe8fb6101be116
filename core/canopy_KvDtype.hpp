/// \file canopy_KvDtype.hpp
/// \brief The KV cache's storage type (per batch) and the numerics a design computes with (per run):
/// docs/design.md §8 ("FP8 KV caches"). No Kokkos: plain nvcc compiles it.
#pragma once

#include "canopy_EnumNames.hpp"
#include "canopy_Fp8.hpp"
#include "canopy_Types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// How a KV pool row is stored.
enum class KvDtype
{
  kBf16,               ///< uint16 bf16 bits [slots][576] (the pool of every bf16 path)
  kFp8E4m3,            ///< SGLang fp8_e4m3: uint8 e4m3fn [slots][576], value = decode(byte) * kv_scale
  kFp8E5m2,            ///< SGLang fp8_e5m2: uint8 e5m2 [slots][576], value = decode(byte) * kv_scale
  kFp8E4m3BlockScaled  ///< DeepSeek V3.2: 656 bytes a row: 512 e4m3, 4 fp32 scales (one per 128), 64 bf16 rope
};
template <>
struct EnumNames<KvDtype>
{
  static constexpr char const *kind = "kv dtype";
  static constexpr std::array<std::pair<KvDtype, char const *>, 4> table{{{KvDtype::kBf16, "bf16"},
                                                                          {KvDtype::kFp8E4m3, "fp8-e4m3"},
                                                                          {KvDtype::kFp8E5m2, "fp8-e5m2"},
                                                                          {KvDtype::kFp8E4m3BlockScaled,
                                                                           "fp8-e4m3-blockscaled"}}};
};
inline KvDtype parseKvDtype(std::string const &name, std::string const &what = "kv dtype")
{
  return parseEnum<KvDtype>(name, what);
}

/// What a design multiplies in: the products' input types.
enum class Numerics
{
  kDequant,  ///< KV dequantised before the products, Q and P bf16 (FlashMLA, FlashInfer)
  kFp8Mma    ///< Q and P cast to the KV's FP8 type before the products (SGLang, TensorRT-LLM XQA)
};
template <>
struct EnumNames<Numerics>
{
  static constexpr char const *kind = "numerics";
  static constexpr std::array<std::pair<Numerics, char const *>, 2> table{
      {{Numerics::kDequant, "dequant"}, {Numerics::kFp8Mma, "fp8-mma"}}};
};
inline Numerics parseNumerics(std::string const &name, std::string const &what = "numerics")
{
  return parseEnum<Numerics>(name, what);
}

/// V3.2 layout: 128 latent values share one power-of-two fp32 scale.
constexpr int KV_BLOCK = 128;
constexpr int KV_BLOCKS = D_LATENT / KV_BLOCK;
/// Byte offsets in a V3.2 row: the latent bytes, then the scales, then the bf16 rope values.
constexpr int KV_BLOCKSCALED_SCALES_AT = D_LATENT;
constexpr int KV_BLOCKSCALED_ROPE_AT = D_LATENT + KV_BLOCKS * 4;

/// \brief Bytes of one pool row: 1152, 576, 576 or 656.
constexpr int kvRowBytes(KvDtype dtype)
{
  switch (dtype)
  {
  case KvDtype::kBf16: return 2 * D_QK;
  case KvDtype::kFp8E4m3:
  case KvDtype::kFp8E5m2: return D_QK;
  case KvDtype::kFp8E4m3BlockScaled: return KV_BLOCKSCALED_ROPE_AT + 2 * D_ROPE;
  }
  return 0;
}

/// \brief The FP8 format of a pool's latent bytes (e4m3 for both e4m3 dtypes).
constexpr Fp8Format fp8FormatOf(KvDtype dtype) { return dtype == KvDtype::kFp8E5m2 ? FP8_E5M2 : FP8_E4M3; }

/// \brief Whether \p numerics is defined for \p dtype: fp8-mma casts Q and P to the cache's own FP8
/// type, so it needs a one-scale FP8 cache (bf16 has none; the V3.2 layout keeps its rope part bf16
/// and is dequantised by every kernel that reads it). "" when defined, else the reason.
inline std::string numericsUndefinedFor(KvDtype dtype, Numerics numerics)
{
  if (numerics == Numerics::kFp8Mma && dtype != KvDtype::kFp8E4m3 && dtype != KvDtype::kFp8E5m2)
    return "numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not " + toString(dtype);
  return "";
}

/// \brief A run's rule for \p numerics over its inputs' \p dtypes: true when there are inputs and
/// \p numerics has no meaning for any of them (a mistake, refused before any work); false when it
/// has one for all, or for some (the other inputs' rows are skipped, saying why).
inline bool numericsUndefinedForAll(std::vector<KvDtype> const &dtypes, Numerics numerics)
{
  for (KvDtype const d : dtypes)
    if (numericsUndefinedFor(d, numerics).empty())
      return false;
  return !dtypes.empty();
}
} // namespace canopy
