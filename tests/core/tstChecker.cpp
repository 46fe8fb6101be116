/// \file tstChecker.cpp
/// \brief The checker must fail every wrong semantics at every prefix length it is used at: the fp64
/// reference run with a mutation (self only, causal over the tree, siblings visible, no prefix,
/// wrong scale), rounded to bf16 like a design's output, is rejected; the correct one passes. A
/// check is both value modes: random (the prefix carries the attention) and tree-dominant (the
/// visible tree keys do); a design must pass both.
#include "canopy_Bf16.hpp"
#include "canopy_Generator.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Reference.hpp"
#include "canopy_TestSeed.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

std::vector<uint16_t> asBf16(std::vector<double> const &v)
{
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = floatToBf16(static_cast<float>(v[i]));
  return out;
}

HostProblem problemAt(int64_t prefix, ValueMode values)
{
  GeneratorOptions g;
  g.batch = 1;
  g.num_heads = 2;
  g.tree_size = 17;
  g.prefix_len = prefix;
  g.mask_layout = MaskLayout::kParents;
  g.values = values;
  g.seed = test::testSeed(500 + static_cast<uint64_t>(prefix));
  return generateProblem(g);
}

TEST(Checker, rejectsEveryWrongSemanticsAtEveryPrefixLength)
{
  Mutation const mutations[] = {Mutation::kSelfOnly, Mutation::kCausalTree, Mutation::kSiblingsVisible,
                                Mutation::kNoPrefix, Mutation::kWrongScale};
  for (int64_t P : {16, 512, 4096, 16384})
  {
    bool rejected[5] = {};
    for (ValueMode values : {ValueMode::kRandom, ValueMode::kTreeDominant})
    {
      HostProblem const p = problemAt(P, values);
      std::vector<double> const ref = referenceAttention(p);
      std::string const where = "P=" + std::to_string(P) + " values=" + toString(values);
      ErrorStats const ok = compareToReference(ref, asBf16(ref).data(), ref.size());
      EXPECT_TRUE(ok.pass) << where << ": the correct output fails (rel " << ok.rel_l2 << ", worst row "
                           << ok.worst_row_rel_l2 << ")";
      for (int m = 0; m < 5; ++m)
      {
        std::vector<double> const wrong = mutatedReference(p, mutations[m]);
        ErrorStats const e = compareToReference(ref, asBf16(wrong).data(), ref.size());
        std::printf("%-10s %-14s %-17s rel-L2 %.2e  worst row %.2e  max %.1f ulps  %s\n", ("P=" + std::to_string(P)).c_str(),
                    toString(values).c_str(), toString(mutations[m]).c_str(), e.rel_l2, e.worst_row_rel_l2, e.max_ulps,
                    e.pass ? "PASSES" : "rejected");
        rejected[m] = rejected[m] || !e.pass;
        // Tree-dominant values exist to catch visibility bugs: each tree mutation on its own.
        if (values == ValueMode::kTreeDominant && m < 3)
          EXPECT_FALSE(e.pass) << where << ": " << toString(mutations[m]) << " passes under tree-dominant values";
      }
    }
    for (int m = 0; m < 5; ++m)
      EXPECT_TRUE(rejected[m]) << "P=" << P << ": " << toString(mutations[m]) << " passes both value modes";
  }
}

TEST(Checker, treeDominantValuesPutTheAttentionOnTheTree)
{
  // With tree-dominant values and a long prefix, dropping the prefix changes little while dropping
  // the ancestors changes a lot; with random values it is the other way round.
  for (ValueMode values : {ValueMode::kRandom, ValueMode::kTreeDominant})
  {
    HostProblem const p = problemAt(4096, values);
    std::vector<double> const ref = referenceAttention(p);
    double const no_prefix = compareToReference(ref, asBf16(mutatedReference(p, Mutation::kNoPrefix)).data(), ref.size()).rel_l2;
    double const self_only = compareToReference(ref, asBf16(mutatedReference(p, Mutation::kSelfOnly)).data(), ref.size()).rel_l2;
    if (values == ValueMode::kTreeDominant)
      EXPECT_GT(self_only, 10 * no_prefix) << "self-only " << self_only << ", no-prefix " << no_prefix;
    else
      EXPECT_GT(no_prefix, 10 * self_only) << "self-only " << self_only << ", no-prefix " << no_prefix;
  }
}

TEST(Checker, treeDominantValuesOfAnFp8PoolStayInItsDtypeAndPutTheAttentionOnTheTree)
{
  // A pool already stored as FP8 (a trace's seeded pool) made tree-dominant afterwards: only the
  // tree rows change, they stay in the pool's dtype and scale, and the attention moves to the tree.
  for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    SCOPED_TRACE(toString(dtype));
    HostProblem p = problemAt(4096, ValueMode::kRandom);
    quantisePool(p, dtype, dtype == KvDtype::kFp8E4m3BlockScaled ? 1.0f : 0.0371f);
    HostProblem const before = p;
    makeTreeDominant(p, 77);
    EXPECT_EQ(p.kv_dtype, dtype);
    EXPECT_EQ(p.kv_scale, before.kv_scale);
    ASSERT_EQ(p.kv_pool_fp8.size(), before.kv_pool_fp8.size());
    size_t const row = static_cast<size_t>(kvRowBytes(dtype));
    auto rowOf = [row](HostProblem const &h, int64_t slot) {
      return std::vector<uint8_t>(h.kv_pool_fp8.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(slot) * row),
                                  h.kv_pool_fp8.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(slot + 1) * row));
    };
    for (int64_t slot : p.meta.kv_indices)
      ASSERT_EQ(rowOf(p, slot), rowOf(before, slot)) << "prefix slot " << slot;
    for (int64_t slot : p.meta.out_cache_loc)
    {
      EXPECT_NE(rowOf(p, slot), rowOf(before, slot)) << "tree slot " << slot;
      EXPECT_EQ(fp8RowProblem(dtype, p.kv_pool_fp8.data() + static_cast<size_t>(slot) * row), "");
    }
    std::vector<double> const ref = referenceAttention(p);
    double const no_prefix = compareToReference(ref, asBf16(mutatedReference(p, Mutation::kNoPrefix)).data(), ref.size()).rel_l2;
    double const self_only = compareToReference(ref, asBf16(mutatedReference(p, Mutation::kSelfOnly)).data(), ref.size()).rel_l2;
    EXPECT_GT(self_only, 10 * no_prefix) << "self-only " << self_only << ", no-prefix " << no_prefix;
  }
}

TEST(Checker, perRowErrorSeesOneWrongRowThatTheGlobalFigureHides)
{
  HostProblem const p = problemAt(64, ValueMode::kRandom);
  std::vector<double> const ref = referenceAttention(p);
  std::vector<uint16_t> out = asBf16(ref);
  // Row 5 scaled by 1.3: 30% wrong in one of 34 rows is about 5% of the global norm... and fails
  // per row even when the global tolerance is loosened.
  for (int c = 0; c < D_V; ++c)
    out[5 * D_V + c] = floatToBf16(1.3f * bf16ToFloat(out[5 * D_V + c]));
  ErrorStats const e = compareToReference(ref, out.data(), ref.size());
  EXPECT_FALSE(e.pass);
  EXPECT_EQ(e.worst_row, 5);
  EXPECT_NEAR(e.worst_row_rel_l2, 0.3, 0.01);
  EXPECT_LT(e.rel_l2, 0.1);
  EXPECT_GT(e.max_ulps, 8);
}
} // namespace
