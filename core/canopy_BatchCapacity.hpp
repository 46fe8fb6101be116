/// \file canopy_BatchCapacity.hpp
/// \brief Sizes of a batch's buffers (no Kokkos: the storage interface and the replay engine use it).
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_Error.hpp"
#include "canopy_Problem.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

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
  /// \brief The capacity that holds every problem of \p steps (a graph bucket's buffers); the heads
  /// are the last step's (a bucket's steps share them).
  template <class Steps>
  static BatchCapacity covering(Steps const &steps)
  {
    BatchCapacity cap;
    for (HostProblem const &p : steps)
    {
      BatchCapacity const c = of(p);
      cap.max_batch = std::max(cap.max_batch, c.max_batch);
      cap.max_nodes = std::max(cap.max_nodes, c.max_nodes);
      cap.max_prefix_tokens = std::max(cap.max_prefix_tokens, c.max_prefix_tokens);
      cap.max_mask_bytes = std::max(cap.max_mask_bytes, c.max_mask_bytes);
      cap.num_slots = std::max(cap.num_slots, c.num_slots);
      cap.num_heads = c.num_heads;
    }
    return cap;
  }

  /// \brief Buffer counts of a full bucket (every buffer at least one element, so none is null).
  BufferCounts counts() const
  {
    auto n = [](int64_t x) { return x > 1 ? x : int64_t{1}; };
    return {n(max_batch + 1), n(max_nodes), n(max_prefix_tokens), n(max_mask_bytes), num_heads, num_slots};
  }

  /// \brief Throws InputError (prefixed with \p who) when \p m or \p shape does not fit.
  void checkFits(BatchMetadata const &m, ModelShape const &shape, std::string const &who) const
  {
    auto over = [&](char const *what, int64_t need, int64_t have) {
      if (need > have)
        throw InputError(who + ": " + what + " needs " + std::to_string(need) + ", capacity is " + std::to_string(have));
    };
    over("batch size", m.batchSize(), max_batch);
    over("tree nodes", m.numNodes(), max_nodes);
    over("prefix tokens", static_cast<int64_t>(m.kv_indices.size()), max_prefix_tokens);
    over("mask bytes", static_cast<int64_t>(m.custom_mask.size()), max_mask_bytes);
    if (shape.num_heads != num_heads)
      throw InputError(who + ": " + std::to_string(shape.num_heads) + " heads, buffers hold " + std::to_string(num_heads));
  }

  /// \brief The scalars of a BatchRef over buffers of this capacity holding \p m (pointers unset).
  BatchRef scalarsFor(BatchMetadata const &m, ModelShape const &shape) const
  {
    BatchRef r;
    r.batch_size = m.batchSize();
    r.num_heads = shape.num_heads;
    r.num_nodes = m.numNodes();
    r.num_slots = num_slots;
    r.sm_scale = static_cast<float>(shape.sm_scale);
    r.mask_layout = m.mask_layout;
    return r;
  }
};
} // namespace canopy
