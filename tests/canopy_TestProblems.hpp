/// \file canopy_TestProblems.hpp
/// \brief Generated verify problems for tests, one call per shape.
#pragma once

#include "canopy_Bf16.hpp"
#include "canopy_Generator.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_TestSeed.hpp"

namespace canopy::test
{
/// \brief Multiplies latent block k (columns 128 k .. 128 k + 127) of every bf16 pool row by 2^k, so
/// that a block-scaled FP8 pool quantised from it has a different scale in each block of a row (drawn
/// values put the same amax, hence the same scale, in every block: a kernel reading another block's
/// scale would pass). Exact: powers of two.
inline void spreadBlockMagnitudes(HostProblem &p)
{
  for (size_t row = 0; row < p.kv_pool.size() / D_QK; ++row)
    for (int d = 0; d < D_LATENT; ++d)
    {
      uint16_t &x = p.kv_pool[row * D_QK + static_cast<size_t>(d)];
      x = floatToBf16(bf16ToFloat(x) * static_cast<float>(1 << (d / KV_BLOCK)));
    }
}

/// \brief \p p's bf16 pool stored as \p kv_dtype, as the serving stacks write it (quantisePool); a
/// block-scaled pool from spreadBlockMagnitudes' values, so that each block has its own scale.
inline HostProblem storedAs(HostProblem p, KvDtype kv_dtype, float kv_scale)
{
  if (kv_dtype == KvDtype::kFp8E4m3BlockScaled)
    spreadBlockMagnitudes(p);
  quantisePool(p, kv_dtype, kv_scale);
  return p;
}

/// \brief A seeded DDTree-like problem (fragmented slots, random bf16, or tree-dominant values) of
/// the given shape, its pool stored as \p kv_dtype (storedAs);
/// \p seed goes through testSeed (CANOPY_TEST_SEED shifts it).
inline HostProblem problemOf(int batch, int heads, int tree, int64_t prefix, MaskLayout mask, uint64_t seed,
                             bool ragged = false, int padded = 0, ValueMode values = ValueMode::kRandom,
                             KvDtype kv_dtype = KvDtype::kBf16, float kv_scale = 1.0f)
{
  GeneratorOptions g;
  g.batch = batch;
  g.num_heads = heads;
  g.tree_size = tree;
  g.prefix_len = prefix;
  g.mask_layout = mask;
  g.seed = testSeed(seed);
  g.ragged = ragged;
  g.padded_rows = padded;
  g.values = values;
  return storedAs(generateProblem(g), kv_dtype, kv_scale);
}
} // namespace canopy::test
