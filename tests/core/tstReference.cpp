/// \file tstReference.cpp
/// \brief The fp64 reference against independent formulas: P=0/T=1, chain = causal, star, random
/// trees in every mask layout, padded rows.
#include "canopy_Bf16.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Random.hpp"
#include "canopy_Reference.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace
{
using namespace canopy;

double val(std::vector<uint16_t> const &v, size_t i) { return bf16ToFloat(v[i]); }

// Attention of one query row over an explicit list of pool slots, written from the formula with a
// two-pass softmax in long double (deliberately not the structure of the reference).
std::vector<double> naiveAttention(HostProblem const &p, int64_t row, int h, std::vector<int64_t> const &slots)
{
  int const H = p.shape.num_heads;
  std::vector<long double> s(slots.size());
  long double mx = -INFINITY;
  for (size_t k = 0; k < slots.size(); ++k)
  {
    long double dot = 0;
    for (int d = 0; d < D_QK; ++d)
      dot += static_cast<long double>(val(p.q, (row * H + h) * D_QK + d)) * val(p.kv_pool, slots[k] * D_QK + d);
    s[k] = dot * static_cast<float>(p.shape.sm_scale);  // sm_scale is a float in the native API
    mx = std::max(mx, s[k]);
  }
  long double z = 0;
  for (auto &x : s)
    z += (x = std::exp(x - mx));
  std::vector<double> o(D_V, 0.0);
  for (int d = 0; d < D_V; ++d)
  {
    long double acc = 0;
    for (size_t k = 0; k < slots.size(); ++k)
      acc += s[k] / z * val(p.kv_pool, slots[k] * D_QK + d);
    o[d] = static_cast<double>(acc);
  }
  return o;
}

HostProblem makeProblem(std::vector<RequestSpec> const &reqs, MaskLayout layout, int heads, int64_t slots, uint64_t seed)
{
  HostProblem p;
  p.shape.num_heads = heads;
  p.num_slots = slots;
  p.meta = buildMetadata(reqs, layout);
  fillRandomValues(p, seed);
  return p;
}

void expectMatchesNaive(HostProblem const &p, std::vector<std::vector<std::vector<int64_t>>> const &visible_slots)
{
  auto const ref = referenceAttention(p);
  int const H = p.shape.num_heads;
  for (int b = 0; b < p.meta.batchSize(); ++b)
    for (int64_t i = 0; i < p.meta.treeSize(b); ++i)
      for (int h = 0; h < H; ++h)
      {
        int64_t const row = p.meta.qo_indptr[b] + i;
        auto const o = naiveAttention(p, row, h, visible_slots[b][i]);
        for (int d = 0; d < D_V; ++d)
          ASSERT_NEAR(ref[(row * H + h) * D_V + d], o[d], 1e-12) << "b " << b << " node " << i << " head " << h;
      }
}

TEST(Reference, emptyPrefixSingleNodeIsItsOwnValue)
{
  // P = 0, T = 1: softmax over one key is 1, so out = V row of the node, whatever q is.
  RequestSpec r{{}, {-1}, {5}};
  for (auto layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
  {
    HostProblem const p = makeProblem({r}, layout, 4, 8, 3);
    auto const ref = referenceAttention(p);
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < D_V; ++d)
        ASSERT_EQ(ref[h * D_V + d], val(p.kv_pool, 5 * D_QK + d));
  }
}

TEST(Reference, chainTreeEqualsCausalAttention)
{
  RequestSpec r;
  r.prefix_slots = {9, 2, 7, 11};
  for (int i = 0; i < 6; ++i)
  {
    r.parent.push_back(i - 1);
    r.tree_slots.push_back(20 + 2 * i);
  }
  std::vector<std::vector<int64_t>> vis;
  for (int i = 0; i < 6; ++i)
  {
    std::vector<int64_t> s = r.prefix_slots;  // causal: prefix + tree tokens 0..i
    for (int j = 0; j <= i; ++j)
      s.push_back(r.tree_slots[j]);
    vis.push_back(s);
  }
  for (auto layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
    expectMatchesNaive(makeProblem({r}, layout, 3, 40, 11), {vis});
}

TEST(Reference, starTreeSeesRootAndItself)
{
  RequestSpec r;
  r.prefix_slots = {1, 3};
  r.parent = {-1, 0, 0, 0, 0};
  r.tree_slots = {10, 12, 14, 16, 18};
  std::vector<std::vector<int64_t>> vis;
  for (int i = 0; i < 5; ++i)
  {
    std::vector<int64_t> s = r.prefix_slots;
    s.push_back(10);
    if (i > 0)
      s.push_back(r.tree_slots[i]);
    vis.push_back(s);
  }
  for (auto layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
    expectMatchesNaive(makeProblem({r}, layout, 2, 20, 5), {vis});
}

TEST(Reference, randomTreesAllLayoutsAgree)
{
  GeneratorOptions g;
  g.batch = 3;
  g.num_heads = 2;
  g.tree_size = 12;
  g.prefix_len = 40;
  g.ragged = true;
  g.padded_rows = 2;
  g.seed = 77;
  std::vector<std::vector<double>> outs;
  for (auto layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
  {
    g.mask_layout = layout;
    HostProblem const p = generateProblem(g);
    // Visible slots from the parents, for the naive check.
    std::vector<std::vector<std::vector<int64_t>>> vis(p.meta.batchSize());
    for (int b = 0; b < p.meta.batchSize(); ++b)
      for (int64_t i = 0; i < p.meta.treeSize(b); ++i)
      {
        std::vector<int64_t> s(p.meta.kv_indices.begin() + p.meta.kv_indptr[b],
                               p.meta.kv_indices.begin() + p.meta.kv_indptr[b + 1]);
        for (int64_t k = i; k >= 0; k = p.meta.tree_parent[p.meta.qo_indptr[b] + k])
          s.push_back(p.meta.out_cache_loc[p.meta.qo_indptr[b] + k]);
        vis[b].push_back(s);
      }
    expectMatchesNaive(p, vis);
    outs.push_back(referenceAttention(p));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(Reference, compareDetectsPoisonNanAndWrongValues)
{
  std::vector<double> ref{1.0, -2.0, 0.5, 4.0};
  std::vector<uint16_t> out;
  for (double r : ref)
    out.push_back(floatToBf16(static_cast<float>(r)));
  EXPECT_TRUE(compareToReference(ref, out.data(), out.size()).pass);
  auto poisoned = out;
  poisoned[2] = BF16_POISON;
  auto e = compareToReference(ref, poisoned.data(), poisoned.size());
  EXPECT_FALSE(e.pass);
  EXPECT_EQ(e.num_bad, 1);
  EXPECT_EQ(e.first_bad, 2);
  auto wrong = out;
  wrong[3] = floatToBf16(4.5f);
  EXPECT_FALSE(compareToReference(ref, wrong.data(), wrong.size()).pass);
  EXPECT_FALSE(compareToReference(ref, out.data(), out.size() - 1).pass) << "a short output must fail";
}
} // namespace
