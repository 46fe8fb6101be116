/// \file canopy_Types.hpp
/// \brief Model shape (absorbed MLA), mask layouts and their names.
#pragma once

#include "canopy_EnumNames.hpp"

#include <cmath>
#include <cstdint>
#include <string>

namespace canopy
{
/// Absorbed-MLA widths (DeepSeek-V3 / Kimi-K2). K is the whole 576-wide row, V its first 512 columns.
constexpr int D_LATENT = 512;
constexpr int D_ROPE = 64;
constexpr int D_QK = D_LATENT + D_ROPE;
constexpr int D_V = D_LATENT;

/// \brief Attention shape of one GPU's share of the model.
struct ModelShape
{
  int num_heads = 8;                         ///< query heads on this GPU (Kimi-K2 at TP8)
  double sm_scale = 1.0 / std::sqrt(192.0);  ///< softmax scale (qk_nope 128 + rope 64)
};

/// How tree visibility reaches the kernel (docs/design.md §1).
enum class MaskLayout
{
  kFull,    ///< SGLang default: per request T x (P+T) bytes
  kTree,    ///< SGLang QLEN_ONLY: per request T x T bytes
  kParents  ///< no mask: the kernel derives visibility from tree_parent
};

template <>
struct EnumNames<MaskLayout>
{
  static constexpr char const *kind = "mask layout";
  static constexpr std::array<std::pair<MaskLayout, char const *>, 3> table{
      {{MaskLayout::kFull, "full"}, {MaskLayout::kTree, "tree"}, {MaskLayout::kParents, "parents"}}};
};
/// \brief Parses "full", "tree" or "parents"; throws InputError naming \p what otherwise.
inline MaskLayout parseMaskLayout(std::string const &name, std::string const &what = "mask layout")
{
  return parseEnum<MaskLayout>(name, what);
}
} // namespace canopy
