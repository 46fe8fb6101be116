/// \file canopy_TestProblems.hpp
/// \brief Generated verify problems for tests, one call per shape.
#pragma once

#include "canopy_Generator.hpp"
#include "canopy_TestSeed.hpp"

namespace canopy::test
{
/// \brief A seeded DDTree-like problem (fragmented slots, random bf16, or tree-dominant values) of
/// the given shape, its pool stored as \p kv_dtype (quantised as the serving stacks write it);
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
  g.kv_dtype = kv_dtype;
  g.kv_scale = kv_scale;
  return generateProblem(g);
}
} // namespace canopy::test
