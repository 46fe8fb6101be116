/// \file tstTree.cpp
/// \brief Tree validation (each kind of bad tree, with the node named) and mask builders vs a brute-force walk.
#include "canopy_Error.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Tree.hpp"

#include <gtest/gtest.h>

namespace
{
using canopy::InputError;

void expectRejected(std::vector<int32_t> const &parent, std::string const &fragment)
{
  try
  {
    canopy::validateTree(parent, "tree");
    FAIL() << "accepted a bad tree, expected: " << fragment;
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Tree, acceptsValidTrees)
{
  EXPECT_NO_THROW(canopy::validateTree(std::vector<int32_t>{}, "empty"));
  EXPECT_NO_THROW(canopy::validateTree(std::vector<int32_t>{-1}, "single"));
  EXPECT_NO_THROW(canopy::validateTree(std::vector<int32_t>{-1, 0, 1, 1, 0, 4}, "branchy"));
}

TEST(Tree, rejectsRootWithParent) { expectRejected({0, 0}, "node 0 is the root and must have parent -1"); }
TEST(Tree, rejectsSecondRoot) { expectRejected({-1, 0, -1}, "node 2 has parent -1: a second root"); }
TEST(Tree, rejectsForwardParent) { expectRejected({-1, 0, 3, 0}, "node 2 has parent 3"); }
TEST(Tree, rejectsSelfParent) { expectRejected({-1, 1}, "node 1 has parent 1"); }
TEST(Tree, rejectsOutOfRangeParent) { expectRejected({-1, 0, -7}, "node 2 has parent -7"); }

TEST(Tree, depthsAndAncestorMasks)
{
  std::vector<int32_t> const parent{-1, 0, 1, 0, 3, 3};
  EXPECT_EQ(canopy::treeDepths(parent), (std::vector<int32_t>{0, 1, 2, 1, 2, 2}));
  auto const m = canopy::ancestorMasks(parent);
  EXPECT_EQ(m[0], 0b1u);
  EXPECT_EQ(m[2], 0b111u);
  EXPECT_EQ(m[5], 0b101001u);
  EXPECT_THROW(canopy::ancestorMasks(std::vector<int32_t>(65, 0)), InputError);
}

// Both SGLang layouts against the definition (walk up the parents), on generated DDTree-like trees.
TEST(TreeMask, layoutsMatchAncestorWalk)
{
  for (uint64_t seed = 1; seed <= 20; ++seed)
  {
    int const t = 1 + static_cast<int>(seed * 7 % 70);
    int64_t const p = static_cast<int64_t>(seed % 5) * 3;
    auto const parent = canopy::makeDraftTree(t, seed);
    ASSERT_NO_THROW(canopy::validateTree(parent));
    std::vector<uint8_t> full, tree, none;
    canopy::appendTreeMask(full, parent, p, canopy::MaskLayout::kFull);
    canopy::appendTreeMask(tree, parent, p, canopy::MaskLayout::kTree);
    canopy::appendTreeMask(none, parent, p, canopy::MaskLayout::kParents);
    ASSERT_EQ(static_cast<int64_t>(full.size()), canopy::maskBytes(t, p, canopy::MaskLayout::kFull));
    ASSERT_EQ(static_cast<int64_t>(tree.size()), t * t);
    EXPECT_TRUE(none.empty());
    for (int i = 0; i < t; ++i)
    {
      for (int64_t c = 0; c < p; ++c)
        ASSERT_EQ(full[i * (p + t) + c], 1) << "prefix column " << c << " of node " << i;
      for (int j = 0; j < t; ++j)
      {
        bool const visible = canopy::isVisible(parent.data(), i, j);
        ASSERT_EQ(full[i * (p + t) + p + j] != 0, visible) << "seed " << seed << " full (" << i << "," << j << ")";
        ASSERT_EQ(tree[i * t + j] != 0, visible) << "seed " << seed << " tree (" << i << "," << j << ")";
        if (t <= 64)
          ASSERT_EQ(((canopy::ancestorMasks(parent)[i] >> j) & 1u) != 0, visible);
      }
    }
  }
}

TEST(Tree, draftTreesAreDdtreeLike)
{
  for (uint64_t seed = 1; seed <= 10; ++seed)
  {
    auto const parent = canopy::makeDraftTree(33, seed);
    ASSERT_EQ(parent.size(), 33u);
    canopy::validateTree(parent);
    auto const depth = canopy::treeDepths(parent);
    int const max_depth = *std::max_element(depth.begin(), depth.end());
    EXPECT_LE(max_depth, 15);
    EXPECT_GE(max_depth, 5) << "a spine is expected";
    // some node has >= 2 children (side branches)
    std::vector<int> children(33, 0);
    for (size_t i = 1; i < parent.size(); ++i)
      ++children[parent[i]];
    EXPECT_GE(*std::max_element(children.begin(), children.end()), 2);
  }
  EXPECT_EQ(canopy::makeDraftTree(33, 5), canopy::makeDraftTree(33, 5));
}
} // namespace
