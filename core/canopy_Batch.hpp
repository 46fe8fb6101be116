/// \file canopy_Batch.hpp
/// \brief Owning Kokkos Views over a verify batch's native buffers in one memory space, sized for a
/// capacity (graph bucket), with host->space upload of a HostProblem and download of the output.
#pragma once

#include "canopy_BatchCapacity.hpp"
#include "canopy_BatchRef.hpp"
#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_Problem.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace canopy
{
template <class MemorySpace>
class VerifyBatch
{
public:
  template <class T> using View = Kokkos::View<T *, Kokkos::LayoutRight, MemorySpace>;

  VerifyBatch() = default;
  explicit VerifyBatch(BatchCapacity const &cap) : _cap(cap)
  {
    auto n = [](int64_t x) { return static_cast<size_t>(std::max<int64_t>(x, 1)); };
    kv_indptr = View<int32_t>("canopy::batch::kv_indptr", n(cap.max_batch + 1));
    kv_indices = View<int64_t>("canopy::batch::kv_indices", n(cap.max_prefix_tokens));
    qo_indptr = View<int64_t>("canopy::batch::qo_indptr", n(cap.max_batch + 1));
    out_cache_loc = View<int64_t>("canopy::batch::out_cache_loc", n(cap.max_nodes));
    custom_mask = View<uint8_t>("canopy::batch::custom_mask", n(cap.max_mask_bytes));
    mask_indptr = View<int64_t>("canopy::batch::mask_indptr", n(cap.max_batch + 1));
    tree_parent = View<int32_t>("canopy::batch::tree_parent", n(cap.max_nodes));
    q = View<uint16_t>("canopy::batch::q", n(cap.max_nodes * cap.num_heads * D_QK));
    kv_pool = View<uint16_t>("canopy::batch::kv_pool", n(cap.num_slots * D_QK));
    out = View<uint16_t>("canopy::batch::out", n(cap.max_nodes * cap.num_heads * D_V));
  }

  BatchCapacity const &capacity() const { return _cap; }

  /// \brief Copies a step's metadata into the static buffers (prefix of each), as a graph runner
  /// does before a replay. Throws InputError when the step exceeds the capacity.
  void setMetadata(BatchMetadata const &meta, ModelShape const &shape)
  {
    checkFits(meta);
    copyPrefix(kv_indptr, meta.kv_indptr);
    copyPrefix(kv_indices, meta.kv_indices);
    copyPrefix(qo_indptr, meta.qo_indptr);
    copyPrefix(out_cache_loc, meta.out_cache_loc);
    copyPrefix(custom_mask, meta.custom_mask);
    copyPrefix(mask_indptr, meta.mask_indptr);
    copyPrefix(tree_parent, meta.tree_parent);
    _ref_meta = {meta.batchSize(), shape.num_heads, meta.numNodes(), _cap.num_slots,
                 static_cast<float>(shape.sm_scale), meta.mask_layout};
  }

  /// \brief Uploads metadata, q and the KV pool.
  void upload(HostProblem const &p)
  {
    if (p.num_slots > _cap.num_slots || p.shape.num_heads != _cap.num_heads)
      throw InputError("batch: problem needs " + std::to_string(p.num_slots) + " slots and " +
                       std::to_string(p.shape.num_heads) + " heads, buffers hold " + std::to_string(_cap.num_slots) +
                       " and " + std::to_string(_cap.num_heads));
    setMetadata(p.meta, p.shape);
    uploadQueries(p.q);
    uploadPool(p.kv_pool);
  }

  /// \brief q rows of the current step (after setMetadata).
  void uploadQueries(std::vector<uint16_t> const &host_q)
  {
    if (host_q.size() > q.extent(0))
      throw InputError("batch: " + std::to_string(host_q.size()) + " q elements exceed the capacity");
    copyPrefix(q, host_q);
  }
  /// \brief The KV pool (once per trace when every step shares it).
  void uploadPool(std::vector<uint16_t> const &host_pool)
  {
    if (host_pool.size() > kv_pool.extent(0))
      throw InputError("batch: a pool of " + std::to_string(host_pool.size() / D_QK) + " slots exceeds the capacity of " +
                       std::to_string(_cap.num_slots));
    copyPrefix(kv_pool, host_pool);
  }

  /// \brief Fills the whole output buffer with a NaN pattern so unwritten elements are detected.
  void poisonOutput() const { Kokkos::deep_copy(out, BF16_POISON); }

  /// \brief The output rows in use, copied to the host.
  std::vector<uint16_t> downloadOutput() const
  {
    size_t const count = static_cast<size_t>(_ref_meta.num_nodes) * _cap.num_heads * D_V;
    std::vector<uint16_t> host(count);
    if (count == 0)
      return host;
    Kokkos::View<uint16_t *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(), count);
    Kokkos::deep_copy(h, Kokkos::subview(out, std::pair<size_t, size_t>(0, count)));
    return host;
  }

  BatchRef ref() const
  {
    BatchRef r = _ref_meta;
    r.kv_indptr = kv_indptr.data();
    r.kv_indices = kv_indices.data();
    r.qo_indptr = qo_indptr.data();
    r.out_cache_loc = out_cache_loc.data();
    r.custom_mask = custom_mask.data();
    r.mask_indptr = mask_indptr.data();
    r.tree_parent = tree_parent.data();
    r.q = q.data();
    r.kv_pool = kv_pool.data();
    r.out = out.data();
    return r;
  }

  View<int32_t> kv_indptr;
  View<int64_t> kv_indices;
  View<int64_t> qo_indptr;
  View<int64_t> out_cache_loc;
  View<uint8_t> custom_mask;
  View<int64_t> mask_indptr;
  View<int32_t> tree_parent;
  View<uint16_t> q;
  View<uint16_t> kv_pool;
  View<uint16_t> out;

private:
  void checkFits(BatchMetadata const &m) const
  {
    auto over = [](char const *what, int64_t need, int64_t have) {
      if (need > have)
        throw InputError(std::string("batch: ") + what + " needs " + std::to_string(need) + ", capacity is " +
                         std::to_string(have));
    };
    over("batch size", m.batchSize(), _cap.max_batch);
    over("tree nodes", m.numNodes(), _cap.max_nodes);
    over("prefix tokens", static_cast<int64_t>(m.kv_indices.size()), _cap.max_prefix_tokens);
    over("mask bytes", static_cast<int64_t>(m.custom_mask.size()), _cap.max_mask_bytes);
  }

  template <class T>
  static void copyPrefix(View<T> const &dst, std::vector<T> const &src)
  {
    if (src.empty())
      return;
    Kokkos::View<T const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(src.data(), src.size());
    Kokkos::deep_copy(Kokkos::subview(dst, std::pair<size_t, size_t>(0, src.size())), h);
  }

  BatchCapacity _cap;
  BatchRef _ref_meta;
};
} // namespace canopy
