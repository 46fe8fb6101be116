/// \file canopy_BatchCapacity.hpp
/// \brief Sizes of a batch's buffers (no Kokkos: the storage interface and the replay engine use it).
#pragma once

#include "canopy_Problem.hpp"

#include <cstdint>

namespace canopy
{
/// \brief Capacity of a batch's buffers: a graph bucket's worth (docs/design.md §4).
struct BatchCapacity
{
  int max_batch = 0;
  int64_t max_nodes = 0;       ///< sum T
  int64_t max_prefix_tokens = 0;  ///< sum P
  int64_t max_mask_bytes = 0;
  int64_t num_slots = 0;
  int num_heads = 0;

  static BatchCapacity of(HostProblem const &p)
  {
    return {p.meta.batchSize(), p.meta.numNodes(), static_cast<int64_t>(p.meta.kv_indices.size()),
            static_cast<int64_t>(p.meta.custom_mask.size()), p.num_slots, p.shape.num_heads};
  }
};
} // namespace canopy
