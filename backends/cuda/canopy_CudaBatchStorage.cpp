#include "canopy_CudaBatchStorage.hpp"

#include "canopy_VerifyAttentionCuda.hpp"

#include <algorithm>

namespace canopy
{
namespace cuda
{
namespace
{
template <class T>
void uploadPrefix(DeviceBuffer<T> &dst, std::vector<T> const &src, cudaStream_t stream)
{
  if (!src.empty())
    dst.upload(src.data(), src.size(), stream);
}
} // namespace

CudaBatchStorage::CudaBatchStorage(BatchCapacity const &cap) : _cap(cap)
{
  BufferCounts const counts = cap.counts();
  forEachBuffer([&](char const *, BufferExtent extent, auto &buffer) { buffer.resize(counts.elements(extent)); },
                _buffers);
  // Offsets start as an empty batch, so a run before any setMetadata reads zeros, not garbage.
  _buffers.kv_indptr.fillBytes(0, _stream.get());
  _buffers.qo_indptr.fillBytes(0, _stream.get());
  _buffers.mask_indptr.fillBytes(0, _stream.get());
}

void CudaBatchStorage::storeMetadata(BatchMetadata const &m, ModelShape const &shape)
{
  _cap.checkFits(m, shape, "cuda batch");
  forEachMetadataBuffer([&](char const *, BufferExtent, auto &buffer, auto const &host) { uploadPrefix(buffer, host, _stream.get()); },
                        _buffers, m);
  _meta = _cap.scalarsFor(m, shape);
}

void CudaBatchStorage::uploadQueries(std::vector<uint16_t> const &q)
{
  if (q.size() > _buffers.q.size())
    throw InputError("cuda batch: " + std::to_string(q.size()) + " q elements exceed the capacity of " +
                     std::to_string(_buffers.q.size()));
  uploadPrefix(_buffers.q, q, _stream.get());
}

void CudaBatchStorage::uploadPool(std::vector<uint16_t> const &kv_pool)
{
  if (kv_pool.size() > _buffers.kv_pool.size())
    throw InputError("cuda batch: a pool of " + std::to_string(kv_pool.size() / D_QK) + " slots exceeds the " +
                     std::to_string(_cap.num_slots) + " the buffers hold");
  uploadPrefix(_buffers.kv_pool, kv_pool, _stream.get());
  _fp8_state = {};
}

void CudaBatchStorage::uploadFp8Pool(std::vector<uint8_t> const &pool, KvDtype dtype, float scale)
{
  checkFp8Pool(pool, dtype, scale, _cap.num_slots);
  size_t const bytes = static_cast<size_t>(_cap.num_slots) * kvRowBytes(dtype);
  if (_fp8.size() != bytes)
    _fp8.resize(bytes);
  uploadPrefix(_fp8, pool, _stream.get());
  _fp8_state = {dtype, scale};
}

size_t CudaBatchStorage::queryElements() const
{
  return static_cast<size_t>(std::max<int64_t>(_meta.num_nodes, 0)) * _cap.num_heads * D_QK;
}

void CudaBatchStorage::poisonOutput() { _buffers.out.fillBytes(0xff, _stream.get()); }

std::vector<uint16_t> CudaBatchStorage::downloadOutput()
{
  return downloadOutputRows(std::max<int64_t>(_meta.num_nodes, 0));
}

std::vector<uint16_t> CudaBatchStorage::downloadOutputRows(int64_t nodes)
{
  size_t const count = static_cast<size_t>(std::min<int64_t>(nodes, _cap.max_nodes)) * _cap.num_heads * D_V;
  std::vector<uint16_t> host(count);
  _buffers.out.download(host.data(), count, _stream.get());
  _stream.sync();
  return host;
}

BatchRef CudaBatchStorage::ref() const
{
  BatchRef r = _meta;
  // ref() is const, the buffers are not: the output pointer is the one the kernels write.
  forEachBuffer([](char const *, BufferExtent, auto &ptr, auto const &buffer) { ptr = const_cast<std::decay_t<decltype(ptr)>>(buffer.data()); },
                r, _buffers);
  return withPool(r, _fp8_state, _fp8.data());
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
