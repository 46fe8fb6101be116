/// \file canopy_CudaBatchStorage.hpp
/// \brief Batch buffers in CUDA device memory (DeviceBuffer, no Kokkos CUDA), sized for a graph
/// bucket, with uploads ordered on the storage's own stream: what the CUDA designs run on.
#pragma once

#include "canopy_BatchStorage.hpp"
#include "canopy_CudaRuntime.hpp"

#include <type_traits>

namespace canopy::cuda
{
template <class T>
using MutableDeviceBuffer = DeviceBuffer<std::remove_const_t<T>>;

class CudaBatchStorage final : public BatchStorage
{
public:
  explicit CudaBatchStorage(BatchCapacity const &capacity);

  /// \brief Metadata into the static buffers with cudaMemcpyAsync on stream() (a graph runner's
  /// copy before each replay; capture-unsafe itself, so it is never called under capture).
  /// Throws InputError when the step exceeds the capacity.
  BatchCapacity const &capacity() const override { return _cap; }
  /// \brief q rows and the KV pool (sizes checked against the capacity), ordered on stream().
  void uploadQueries(std::vector<uint16_t> const &q) override;
  void uploadPool(std::vector<uint16_t> const &kv_pool) override;
  /// \brief An FP8 pool's bytes (a buffer of the capacity's slots, allocated on first use) and its
  /// scale; ref() then points at them and kv_pool is null, until the next uploadPool.
  void uploadFp8Pool(std::vector<uint8_t> const &pool, KvDtype dtype, float scale) override;
  /// \brief Every output byte 0xff (a bf16 NaN), so unwritten elements are detected.
  void poisonOutput() override;
  std::vector<uint16_t> downloadOutput() override;
  /// \brief The first \p nodes node rows of the output buffer (up to its capacity), used or not:
  /// lets a test check that rows past the batch (padding) were left alone.
  std::vector<uint16_t> downloadOutputRows(int64_t nodes);
  BatchRef ref() const override;
  ExecContext context() const override { return {static_cast<void *>(_stream.get())}; }
  void sync() override { _stream.sync(); }

  cudaStream_t stream() const { return _stream.get(); }
  /// \brief The q rows in use (after setMetadata) and the whole KV pool, for device-side fills by
  /// measuring tools (experiments/lab) that would take seconds to generate on the host.
  uint16_t *queryData() { return _buffers.q.data(); }
  size_t queryElements() const;
  uint16_t *poolData() { return _buffers.kv_pool.data(); }
  size_t poolElements() const { return _buffers.kv_pool.size(); }

protected:
  void storeMetadata(BatchMetadata const &meta, ModelShape const &shape) override;

private:
  BatchCapacity _cap;
  Stream _stream;
  BatchRef _meta;  // host fields of the last setMetadata
  BatchBuffers<MutableDeviceBuffer> _buffers;
  DeviceBuffer<uint8_t> _fp8;
  Fp8PoolState _fp8_state;
};
} // namespace canopy::cuda
