/// \file example_Attention.hpp
/// \brief The row math both example designs share: one (node, head) row of tree-verify attention,
/// straight from docs/design.md §1 (two passes over the visible keys: the row's maximum score, then
/// the softmax-weighted sum of V), in fp32 from bf16 inputs. Host and device: the Kokkos design
/// calls it on the host, the CUDA design from one GPU thread per row.
#pragma once

#include "canopy_Bf16.hpp"
#include "canopy_BatchRef.hpp"
#include "canopy_Types.hpp"

#include <cmath>
#include <cstdint>

namespace example
{
using canopy::BatchRef;

/// Whether tree node \p j of request \p b is visible to its node \p i (both local indices), in the
/// batch's mask layout. EXAMPLE_DELIBERATE_BUG makes it causal (every j <= i): the wrong design the
/// installed-tree test expects `canopy check` to fail.
CANOPY_HOST_DEVICE_INLINE bool treeVisible(BatchRef const &r, int b, int64_t i, int64_t j, int64_t prefix, int64_t tree)
{
#ifdef EXAMPLE_DELIBERATE_BUG
  (void)r, (void)b, (void)prefix, (void)tree;
  return j <= i;
#else
  switch (r.mask_layout)
  {
  case canopy::MaskLayout::kFull: return r.custom_mask[r.mask_indptr[b] + i * (prefix + tree) + prefix + j] != 0;
  case canopy::MaskLayout::kTree: return r.custom_mask[r.mask_indptr[b] + i * tree + j] != 0;
  case canopy::MaskLayout::kParents: break;
  }
  int32_t const *parent = r.tree_parent + r.qo_indptr[b];
  for (int64_t k = i; k >= 0; k = parent[k])
    if (k == j)
      return true;
  return false;
#endif
}

/// Pool slot of key \p k of request \p b: the prefix tokens first, then the tree nodes.
CANOPY_HOST_DEVICE_INLINE int64_t keySlot(BatchRef const &r, int b, int64_t k, int64_t prefix)
{
  return k < prefix ? r.kv_indices[r.kv_indptr[b] + k] : r.out_cache_loc[r.qo_indptr[b] + (k - prefix)];
}

/// out[row] for row = node * H + head of request \p b.
CANOPY_HOST_DEVICE_INLINE void attendRow(BatchRef const &r, int b, int64_t row)
{
  int64_t const node = row / r.num_heads, first = r.qo_indptr[b];
  int64_t const i = node - first, tree = r.qo_indptr[b + 1] - first;
  int64_t const prefix = r.kv_indptr[b + 1] - r.kv_indptr[b];
  uint16_t const *q = r.q + row * canopy::D_QK;
  auto score = [&](int64_t k) {
    uint16_t const *key = r.kv_pool + keySlot(r, b, k, prefix) * canopy::D_QK;
    float s = 0.f;
    for (int d = 0; d < canopy::D_QK; ++d)
      s += canopy::bf16ToFloat(q[d]) * canopy::bf16ToFloat(key[d]);
    return s * r.sm_scale;
  };
  auto visible = [&](int64_t k) { return k < prefix || treeVisible(r, b, i, k - prefix, prefix, tree); };

  float max_score = -INFINITY;
  for (int64_t k = 0; k < prefix + tree; ++k)
    if (visible(k))
      max_score = fmaxf(max_score, score(k));
  float acc[canopy::D_V] = {};
  float sum = 0.f;
  for (int64_t k = 0; k < prefix + tree; ++k)
  {
    if (!visible(k))
      continue;
    float const p = expf(score(k) - max_score);
    uint16_t const *v = r.kv_pool + keySlot(r, b, k, prefix) * canopy::D_QK;  // V: the first D_V columns
    sum += p;
    for (int d = 0; d < canopy::D_V; ++d)
      acc[d] += p * canopy::bf16ToFloat(v[d]);
  }
  uint16_t *out = r.out + row * canopy::D_V;
  for (int d = 0; d < canopy::D_V; ++d)
    out[d] = canopy::floatToBf16(acc[d] / sum);
}

/// The request that tree row \p node belongs to (binary search over qo_indptr).
CANOPY_HOST_DEVICE_INLINE int requestOf(BatchRef const &r, int64_t node)
{
  int lo = 0, hi = r.batch_size;  // qo_indptr[lo] <= node < qo_indptr[hi]
  while (hi - lo > 1)
  {
    int const mid = (lo + hi) / 2;
    (r.qo_indptr[mid] <= node ? lo : hi) = mid;
  }
  return lo;
}
} // namespace example
