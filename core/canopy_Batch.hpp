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
#include <type_traits>
#include <vector>

namespace canopy
{
namespace Impl
{
/// Owning 1-D Views in \p MemorySpace, mutable whatever the BatchBuffers constness (they are filled).
template <class MemorySpace>
struct OwningViews
{
  template <class T>
  using type = Kokkos::View<std::remove_const_t<T> *, Kokkos::LayoutRight, MemorySpace>;
};
} // namespace Impl

template <class MemorySpace>
class VerifyBatch : public BatchBuffers<Impl::OwningViews<MemorySpace>::template type>
{
public:
  VerifyBatch() = default;
  explicit VerifyBatch(BatchCapacity const &cap) : _cap(cap)
  {
    BufferCounts const counts = cap.counts();
    forEachBuffer(
        [&](char const *name, BufferExtent extent, auto &view) {
          view = std::decay_t<decltype(view)>(std::string("canopy::batch::") + name,
                                              static_cast<size_t>(counts.elements(extent)));
        },
        *this);
  }

  BatchCapacity const &capacity() const { return _cap; }

  /// \brief Copies a step's metadata into the static buffers (prefix of each), as a graph runner
  /// does before a replay. Throws InputError when the step exceeds the capacity.
  void setMetadata(BatchMetadata const &meta, ModelShape const &shape)
  {
    _cap.checkFits(meta, shape, "batch");
    forEachMetadataBuffer([](char const *, BufferExtent, auto const &view, auto const &host) { copyPrefix(view, host); },
                          *this, meta);
    _ref_meta = _cap.scalarsFor(meta, shape);
  }

  /// \brief Uploads metadata, q and the KV pool.
  void upload(HostProblem const &p)
  {
    if (p.num_slots > _cap.num_slots)
      throw InputError("batch: problem needs " + std::to_string(p.num_slots) + " slots, buffers hold " +
                       std::to_string(_cap.num_slots));
    setMetadata(p.meta, p.shape);
    uploadQueries(p.q);
    uploadPool(p.kv_pool);
  }

  /// \brief q rows of the current step (after setMetadata).
  void uploadQueries(std::vector<uint16_t> const &host_q)
  {
    if (host_q.size() > this->q.extent(0))
      throw InputError("batch: " + std::to_string(host_q.size()) + " q elements exceed the capacity");
    copyPrefix(this->q, host_q);
  }
  /// \brief The KV pool (once per trace when every step shares it).
  void uploadPool(std::vector<uint16_t> const &host_pool)
  {
    if (host_pool.size() > this->kv_pool.extent(0))
      throw InputError("batch: a pool of " + std::to_string(host_pool.size() / D_QK) + " slots exceeds the capacity of " +
                       std::to_string(_cap.num_slots));
    copyPrefix(this->kv_pool, host_pool);
  }

  /// \brief Fills the whole output buffer with a NaN pattern so unwritten elements are detected.
  void poisonOutput() const { Kokkos::deep_copy(this->out, BF16_POISON); }

  /// \brief The output rows in use, copied to the host.
  std::vector<uint16_t> downloadOutput() const
  {
    size_t const count = static_cast<size_t>(_ref_meta.num_nodes) * _cap.num_heads * D_V;
    std::vector<uint16_t> host(count);
    if (count == 0)
      return host;
    Kokkos::View<uint16_t *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(), count);
    Kokkos::deep_copy(h, Kokkos::subview(this->out, std::pair<size_t, size_t>(0, count)));
    return host;
  }

  BatchRef ref() const
  {
    BatchRef r = _ref_meta;
    forEachBuffer([](char const *, BufferExtent, auto &ptr, auto const &view) { ptr = view.data(); }, r, *this);
    return r;
  }

private:
  template <class View, class T>
  static void copyPrefix(View const &dst, std::vector<T> const &src)
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
