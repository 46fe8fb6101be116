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
namespace Impl
{
template <class MemorySpace>
struct UnmanagedViews
{
  template <class T>
  using type = Kokkos::View<T *, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
};
} // namespace Impl

/// \brief One batch as the kernels read it: the BatchRef it was built from (scalars and raw
/// pointers) and unmanaged Views over the same buffers (SGLang dtypes) in \p MemorySpace, with the
/// extents of \p counts (they only matter to Kokkos bounds checking: the kernels index through the
/// offsets). Building one never allocates or copies.
template <class MemorySpace>
struct VerifyArgs : BatchBuffers<Impl::UnmanagedViews<MemorySpace>::template type>
{
  BatchRef batch;

  VerifyArgs() = default;
  VerifyArgs(BatchRef const &r, BufferCounts const &counts) : batch(r)
  {
    forEachBuffer(
        [&](char const *, BufferExtent extent, auto &view, auto ptr) {
          view = std::decay_t<decltype(view)>(ptr, static_cast<size_t>(std::max<int64_t>(counts.elements(extent), 0)));
        },
        *this, r);
  }
};

/// \brief Args over a BatchRef whose pointers live in \p MemorySpace. The lengths of kv_indices and
/// custom_mask are not in a BatchRef; the plan bounds bound them.
template <class MemorySpace>
VerifyArgs<MemorySpace> makeVerifyArgs(BatchRef const &r, PlanBounds const &bounds)
{
  BufferCounts c;
  c.rows = r.batch_size + 1;
  c.nodes = r.num_nodes;
  c.prefix_tokens = static_cast<int64_t>(bounds.max_batch) * bounds.max_prefix;
  c.mask_bytes = static_cast<int64_t>(bounds.max_batch) * bounds.max_tree * (bounds.max_prefix + bounds.max_tree);
  c.heads = r.num_heads;
  c.slots = r.num_slots;
  return VerifyArgs<MemorySpace>(r, c);
}

/// \brief Args over a VerifyBatch's own buffers, with their allocated extents.
template <class MemorySpace>
VerifyArgs<MemorySpace> makeVerifyArgs(VerifyBatch<MemorySpace> const &batch)
{
  return VerifyArgs<MemorySpace>(batch.ref(), batch.capacity().counts());
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
