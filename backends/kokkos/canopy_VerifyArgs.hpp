/// \file canopy_VerifyArgs.hpp
/// \brief What the portable verify kernels take: unmanaged Views over one batch's native buffers,
/// the split workspace, and a launch plan derived from the plan bounds only (never device values).
#pragma once

#include "canopy_Batch.hpp"
#include "canopy_BatchRef.hpp"
#include "canopy_Design.hpp"
#include "canopy_Error.hpp"
#include "canopy_Types.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace canopy
{
/// \brief One batch as the kernels read it: the native buffers (SGLang dtypes) as unmanaged Views
/// in \p MemorySpace. Building one never allocates or copies.
template <class MemorySpace>
struct VerifyArgs
{
  template <class T>
  using View = Kokkos::View<T *, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  int batch_size = 0;  ///< rows of the batch, padded rows included
  int num_heads = 0;
  float sm_scale = 0.f;
  MaskLayout mask_layout = MaskLayout::kFull;

  View<int32_t const> kv_indptr;
  View<int64_t const> kv_indices;
  View<int64_t const> qo_indptr;
  View<int64_t const> out_cache_loc;
  View<uint8_t const> custom_mask;
  View<int64_t const> mask_indptr;
  View<int32_t const> tree_parent;
  View<uint16_t const> q;        ///< bf16 [sum T][H][576]
  View<uint16_t const> kv_pool;  ///< bf16 [num_slots][576]
  View<uint16_t> out;            ///< bf16 [sum T][H][512]
};

/// \brief Unmanaged Views over a BatchRef whose pointers live in \p MemorySpace. The extents of
/// kv_indices and custom_mask are not in a BatchRef; they are bounded by the plan bounds (they only
/// matter to Kokkos bounds checking: the kernels index through the offsets).
template <class MemorySpace>
VerifyArgs<MemorySpace> wrapBatchRef(BatchRef const &r, PlanBounds const &bounds)
{
  using A = VerifyArgs<MemorySpace>;
  auto n = [](int64_t x) { return static_cast<size_t>(std::max<int64_t>(x, 0)); };
  int64_t const rows = r.batch_size + 1;
  int64_t const max_prefix_tokens = static_cast<int64_t>(bounds.max_batch) * bounds.max_prefix;
  int64_t const max_mask = static_cast<int64_t>(bounds.max_batch) * bounds.max_tree * (bounds.max_prefix + bounds.max_tree);
  A a;
  a.batch_size = r.batch_size;
  a.num_heads = r.num_heads;
  a.sm_scale = r.sm_scale;
  a.mask_layout = r.mask_layout;
  a.kv_indptr = typename A::template View<int32_t const>(r.kv_indptr, n(rows));
  a.kv_indices = typename A::template View<int64_t const>(r.kv_indices, n(max_prefix_tokens));
  a.qo_indptr = typename A::template View<int64_t const>(r.qo_indptr, n(rows));
  a.out_cache_loc = typename A::template View<int64_t const>(r.out_cache_loc, n(r.num_nodes));
  a.custom_mask = typename A::template View<uint8_t const>(r.custom_mask, n(max_mask));
  a.mask_indptr = typename A::template View<int64_t const>(r.mask_indptr, n(rows));
  a.tree_parent = typename A::template View<int32_t const>(r.tree_parent, n(r.num_nodes));
  a.q = typename A::template View<uint16_t const>(r.q, n(r.num_nodes * r.num_heads * D_QK));
  a.kv_pool = typename A::template View<uint16_t const>(r.kv_pool, n(r.num_slots * D_QK));
  a.out = typename A::template View<uint16_t>(r.out, n(r.num_nodes * r.num_heads * D_V));
  return a;
}

/// \brief Unmanaged Views over a VerifyBatch's own (managed) buffers, with their real extents.
template <class MemorySpace>
VerifyArgs<MemorySpace> makeVerifyArgs(VerifyBatch<MemorySpace> const &batch)
{
  BatchRef const r = batch.ref();
  VerifyArgs<MemorySpace> a;
  a.batch_size = r.batch_size;
  a.num_heads = r.num_heads;
  a.sm_scale = r.sm_scale;
  a.mask_layout = r.mask_layout;
  a.kv_indptr = batch.kv_indptr;
  a.kv_indices = batch.kv_indices;
  a.qo_indptr = batch.qo_indptr;
  a.out_cache_loc = batch.out_cache_loc;
  a.custom_mask = batch.custom_mask;
  a.mask_indptr = batch.mask_indptr;
  a.tree_parent = batch.tree_parent;
  a.q = batch.q;
  a.kv_pool = batch.kv_pool;
  a.out = batch.out;
  return a;
}

/// \brief Launch plan: everything that sizes a grid or the workspace comes from the plan bounds
/// (max batch, max tree, heads, NSPLIT), so one plan serves every step of a graph bucket.
struct VerifyPlan
{
  int max_batch = 1;
  int max_tree = 1;
  int64_t max_nodes = 1;
  int num_heads = 1;
  int nsplit = 1;            ///< prefix splits; the tree part is one more partial (index nsplit)
  int heads_per_group = 1;   ///< heads folded with tree nodes into the rows of one team's tile
  int num_head_groups = 1;
  int rows_per_tile = 1;     ///< (head, node) rows a team holds at once (multiple of the row block)
  int row_tiles = 1;         ///< row tiles of a request in the league (1: a team walks them itself)
  bool strict = false;       ///< a fallback to another path throws instead of being recorded

  /// Teams of the split kernel: (request, head group, split, row tile), the tree part being the
  /// last split.
  int64_t leagueSize() const { return static_cast<int64_t>(max_batch) * num_head_groups * (nsplit + 1) * row_tiles; }
  int numPartials() const { return nsplit + 1; }
};

/// \brief Split partials: per (partial, node row, head) a normalised 512-wide output and its
/// log-sum-exp; the combine kernel merges them. Rows are indexed by the batch's node row, with a
/// stride of node_capacity (>= sum T of any batch run with it).
template <class MemorySpace>
struct VerifyWorkspace
{
  Kokkos::View<float *, MemorySpace> partial_out;  ///< [partials][node_capacity][H][512]
  Kokkos::View<float *, MemorySpace> partial_lse;  ///< [partials][node_capacity][H]
  int64_t node_capacity = 0;
  int partials = 0;
  int num_heads = 0;

  size_t bytes() const { return (partial_out.size() + partial_lse.size()) * sizeof(float); }
  bool fits(int p, int64_t nodes, int heads) const { return p == partials && heads == num_heads && nodes <= node_capacity; }
};

/// \brief Bytes of workspace a plan needs for \p nodes node rows.
inline size_t workspaceBytes(VerifyPlan const &plan, int64_t nodes)
{
  size_t const per_row = static_cast<size_t>(plan.num_heads) * (D_V + 1) * sizeof(float);
  return static_cast<size_t>(plan.numPartials()) * static_cast<size_t>(std::max<int64_t>(nodes, 1)) * per_row;
}

/// \brief Allocates a workspace for \p plan holding \p nodes node rows.
template <class MemorySpace>
VerifyWorkspace<MemorySpace> makeVerifyWorkspace(VerifyPlan const &plan, int64_t nodes)
{
  VerifyWorkspace<MemorySpace> ws;
  ws.node_capacity = std::max<int64_t>(nodes, 1);
  ws.partials = plan.numPartials();
  ws.num_heads = plan.num_heads;
  size_t const rows = static_cast<size_t>(ws.partials) * static_cast<size_t>(ws.node_capacity) * plan.num_heads;
  ws.partial_out = Kokkos::View<float *, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                                         "canopy::verifyAttention::partial_out"),
                                                      rows * D_V);
  ws.partial_lse = Kokkos::View<float *, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                                         "canopy::verifyAttention::partial_lse"),
                                                      rows);
  return ws;
}
} // namespace canopy
