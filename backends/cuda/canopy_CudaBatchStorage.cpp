#include "canopy_CudaBatchStorage.hpp"

#include "canopy_VerifyAttentionCuda.hpp"

#include <algorithm>

namespace canopy
{
namespace cuda
{
namespace
{
size_t atLeastOne(int64_t x) { return static_cast<size_t>(std::max<int64_t>(x, 1)); }

template <class T>
void uploadPrefix(DeviceBuffer<T> &dst, std::vector<T> const &src, cudaStream_t stream)
{
  if (!src.empty())
    dst.upload(src.data(), src.size(), stream);
}
} // namespace

CudaBatchStorage::CudaBatchStorage(BatchCapacity const &cap) : _cap(cap)
{
  _kv_indptr.resize(atLeastOne(cap.max_batch + 1));
  _kv_indices.resize(atLeastOne(cap.max_prefix_tokens));
  _qo_indptr.resize(atLeastOne(cap.max_batch + 1));
  _out_cache_loc.resize(atLeastOne(cap.max_nodes));
  _custom_mask.resize(atLeastOne(cap.max_mask_bytes));
  _mask_indptr.resize(atLeastOne(cap.max_batch + 1));
  _tree_parent.resize(atLeastOne(cap.max_nodes));
  _q.resize(atLeastOne(cap.max_nodes * cap.num_heads * D_QK));
  _kv_pool.resize(atLeastOne(cap.num_slots * D_QK));
  _out.resize(atLeastOne(cap.max_nodes * cap.num_heads * D_V));
  // Offsets start as an empty batch, so a run before any setMetadata reads zeros, not garbage.
  _kv_indptr.fillBytes(0, _stream.get());
  _qo_indptr.fillBytes(0, _stream.get());
  _mask_indptr.fillBytes(0, _stream.get());
}

void CudaBatchStorage::storeMetadata(BatchMetadata const &m, ModelShape const &shape)
{
  auto over = [](char const *what, int64_t need, int64_t have) {
    if (need > have)
      throw InputError(std::string("cuda batch: ") + what + " needs " + std::to_string(need) + ", capacity is " +
                       std::to_string(have));
  };
  over("batch size", m.batchSize(), _cap.max_batch);
  over("tree nodes", m.numNodes(), _cap.max_nodes);
  over("prefix tokens", static_cast<int64_t>(m.kv_indices.size()), _cap.max_prefix_tokens);
  over("mask bytes", static_cast<int64_t>(m.custom_mask.size()), _cap.max_mask_bytes);
  if (shape.num_heads != _cap.num_heads)
    throw InputError("cuda batch: " + std::to_string(shape.num_heads) + " heads, buffers hold " +
                     std::to_string(_cap.num_heads));
  cudaStream_t const s = _stream.get();
  uploadPrefix(_kv_indptr, m.kv_indptr, s);
  uploadPrefix(_kv_indices, m.kv_indices, s);
  uploadPrefix(_qo_indptr, m.qo_indptr, s);
  uploadPrefix(_out_cache_loc, m.out_cache_loc, s);
  uploadPrefix(_custom_mask, m.custom_mask, s);
  uploadPrefix(_mask_indptr, m.mask_indptr, s);
  uploadPrefix(_tree_parent, m.tree_parent, s);
  _meta = BatchRef{};
  _meta.batch_size = m.batchSize();
  _meta.num_heads = shape.num_heads;
  _meta.num_nodes = m.numNodes();
  _meta.num_slots = _cap.num_slots;
  _meta.sm_scale = static_cast<float>(shape.sm_scale);
  _meta.mask_layout = m.mask_layout;
}

void CudaBatchStorage::uploadQueries(std::vector<uint16_t> const &q)
{
  if (q.size() > _q.size())
    throw InputError("cuda batch: " + std::to_string(q.size()) + " q elements exceed the capacity of " +
                     std::to_string(_q.size()));
  uploadPrefix(_q, q, _stream.get());
}

void CudaBatchStorage::uploadPool(std::vector<uint16_t> const &kv_pool)
{
  if (kv_pool.size() > _kv_pool.size())
    throw InputError("cuda batch: a pool of " + std::to_string(kv_pool.size() / D_QK) + " slots exceeds the " +
                     std::to_string(_cap.num_slots) + " the buffers hold");
  uploadPrefix(_kv_pool, kv_pool, _stream.get());
}

size_t CudaBatchStorage::queryElements() const
{
  return static_cast<size_t>(std::max<int64_t>(_meta.num_nodes, 0)) * _cap.num_heads * D_QK;
}

void CudaBatchStorage::poisonOutput() { _out.fillBytes(0xff, _stream.get()); }

std::vector<uint16_t> CudaBatchStorage::downloadOutput()
{
  return downloadOutputRows(std::max<int64_t>(_meta.num_nodes, 0));
}

std::vector<uint16_t> CudaBatchStorage::downloadOutputRows(int64_t nodes)
{
  size_t const count = static_cast<size_t>(std::min<int64_t>(nodes, _cap.max_nodes)) * _cap.num_heads * D_V;
  std::vector<uint16_t> host(count);
  _out.download(host.data(), count, _stream.get());
  _stream.sync();
  return host;
}

BatchRef CudaBatchStorage::ref() const
{
  BatchRef r = _meta;
  r.num_slots = _cap.num_slots;
  r.kv_indptr = _kv_indptr.data();
  r.kv_indices = _kv_indices.data();
  r.qo_indptr = _qo_indptr.data();
  r.out_cache_loc = _out_cache_loc.data();
  r.custom_mask = _custom_mask.data();
  r.mask_indptr = _mask_indptr.data();
  r.tree_parent = _tree_parent.data();
  r.q = _q.data();
  r.kv_pool = _kv_pool.data();
  r.out = const_cast<uint16_t *>(_out.data());
  return r;
}
} // namespace cuda

std::unique_ptr<BatchStorage> makeCudaBatchStorage(BatchCapacity const &capacity)
{
  std::string why;
  if (!cuda::cudaAvailable(&why))
    throw InputError("CUDA device memory is not available here: " + why);
  return std::make_unique<cuda::CudaBatchStorage>(capacity);
}
} // namespace canopy
