/// \file canopy_Tree.hpp
/// \brief Draft trees as parent arrays: validation, depths, ancestor sets, visibility masks.
#pragma once

#include "canopy_Types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief Checks a draft tree: node 0 is the only root (parent -1), every other node has
/// 0 <= parent[i] < i. Throws InputError naming \p what and the first bad node.
void validateTree(int32_t const *parent, int64_t size, std::string const &what = "tree");
inline void validateTree(std::vector<int32_t> const &parent, std::string const &what = "tree")
{
  validateTree(parent.data(), static_cast<int64_t>(parent.size()), what);
}

/// \brief Depth of each node (root = 0). \pre the tree is valid.
std::vector<int32_t> treeDepths(std::vector<int32_t> const &parent);

/// \brief Ancestor sets as 64-bit masks (bit j set: node j is visible to node i, incl. i itself).
/// \pre valid tree with at most 64 nodes; throws InputError otherwise.
std::vector<uint64_t> ancestorMasks(std::vector<int32_t> const &parent);

/// \brief Visibility of node j from node i by walking parents (the definition; O(depth)).
bool isVisible(int32_t const *parent, int64_t i, int64_t j);

/// \brief Appends one request's mask in the given layout to \p mask (docs/design.md §1):
/// kFull: T x (P+T) row-major, prefix columns 1; kTree: T x T; kParents: nothing.
void appendTreeMask(std::vector<uint8_t> &mask, std::vector<int32_t> const &parent, int64_t prefix_len,
                    MaskLayout layout);

/// \brief Bytes one request's mask occupies in the layout.
int64_t maskBytes(int64_t tree_size, int64_t prefix_len, MaskLayout layout);
} // namespace canopy
