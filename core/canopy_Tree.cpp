#include "canopy_Tree.hpp"

#include "canopy_Rules.hpp"

#include "canopy_Error.hpp"

namespace canopy
{
void validateTree(int32_t const *parent, int64_t size, std::string const &what)
{
  for (int64_t i = 0; i < size; ++i)
  {
    std::string const problem = rules::parentProblem(i, parent[i]);
    if (!problem.empty())
      throw InputError(what + ": " + problem);
  }
}

std::vector<int32_t> treeDepths(std::vector<int32_t> const &parent)
{
  std::vector<int32_t> depth(parent.size(), 0);
  for (size_t i = 1; i < parent.size(); ++i)
    depth[i] = depth[parent[i]] + 1;
  return depth;
}

std::vector<uint64_t> ancestorMasks(std::vector<int32_t> const &parent)
{
  if (parent.size() > 64)
    throw InputError("tree: " + std::to_string(parent.size()) + " nodes exceed the 64 that an ancestor bitmask holds");
  validateTree(parent);
  std::vector<uint64_t> mask(parent.size(), 0);
  for (size_t i = 0; i < parent.size(); ++i)
    mask[i] = (parent[i] >= 0 ? mask[parent[i]] : 0) | (uint64_t{1} << i);
  return mask;
}

bool isVisible(int32_t const *parent, int64_t i, int64_t j)
{
  for (int64_t k = i; k >= 0; k = parent[k])
    if (k == j)
      return true;
  return false;
}

int64_t maskBytes(int64_t tree_size, int64_t prefix_len, MaskLayout layout)
{
  switch (layout)
  {
  case MaskLayout::kFull: return tree_size * (prefix_len + tree_size);
  case MaskLayout::kTree: return tree_size * tree_size;
  case MaskLayout::kParents: return 0;
  }
  return 0;
}

void appendTreeMask(std::vector<uint8_t> &mask, std::vector<int32_t> const &parent, int64_t prefix_len,
                    MaskLayout layout)
{
  if (layout == MaskLayout::kParents)
    return;
  int64_t const t = static_cast<int64_t>(parent.size());
  int64_t const prefix_cols = layout == MaskLayout::kFull ? prefix_len : 0;
  size_t const base = mask.size();
  mask.resize(base + static_cast<size_t>(t * (prefix_cols + t)), 0);
  // Mark ancestors by walking up from each node: O(T * depth), no 64-node limit.
  for (int64_t i = 0; i < t; ++i)
  {
    uint8_t *row = mask.data() + base + i * (prefix_cols + t);
    for (int64_t c = 0; c < prefix_cols; ++c)
      row[c] = 1;
    for (int64_t k = i; k >= 0; k = parent[k])
      row[prefix_cols + k] = 1;
  }
}
} // namespace canopy
