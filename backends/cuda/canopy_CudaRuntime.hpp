/// \file canopy_CudaRuntime.hpp
/// \brief A small host API over the CUDA runtime, usable from plain C++ (no nvcc): availability,
/// device facts, RAII device buffers, streams, events, graph capture/replay in global capture
/// mode. What the designs and their storage need; the measuring tools (L2 flusher, timed replays,
/// peak probes) live in experiments/lab.
/// Errors throw canopy::RuntimeFailure naming the call; nothing here synchronises unless it says so.
#pragma once

#include "canopy_Error.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace canopy::cuda
{
/// \brief True when a CUDA device can be used. Returns false (and the reason in \p why) on ANY
/// error of cudaGetDeviceCount: on a machine without a GPU the runtime reports "CUDA driver version
/// is insufficient" or "no CUDA-capable device", and GPU tests must skip, not fail.
bool cudaAvailable(std::string *why = nullptr);

/// \brief Throws RuntimeFailure("<what>: <cuda error string>") unless \p e is cudaSuccess.
void check(cudaError_t e, char const *what);

/// \brief Facts about a device, read once (cudaGetDeviceProperties + attributes + versions).
struct DeviceInfo
{
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t global_bytes = 0;
  size_t smem_per_block_optin = 0;
  size_t smem_per_sm = 0;
  int sm_clock_khz = 0;   ///< current SM clock from NVML-free attribute (max boost on most drivers)
  int mem_clock_khz = 0;
  int mem_bus_bits = 0;
  int driver_version = 0, runtime_version = 0;
  std::string summary() const;  ///< "NVIDIA H200 (sm_90, 132 SMs, 60 MB L2, driver 13.0, runtime 13.0)"
  /// \brief How numbers from this device are labelled: "<name> (sm_XY) proxy for the sm_120 target"
  /// on any GPU but sm_120; the plain name on an sm_120 card.
  std::string targetLabel() const;
};
DeviceInfo deviceInfo(int device = 0);
/// \brief The calling thread's current device (cudaGetDevice).
int currentDevice();

/// \brief Owning device allocation of \p T elements (cudaMalloc/cudaFree); move-only.
template <class T>
class DeviceBuffer
{
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer const &) = delete;
  DeviceBuffer &operator=(DeviceBuffer const &) = delete;
  DeviceBuffer(DeviceBuffer &&o) noexcept : _ptr(std::exchange(o._ptr, nullptr)), _count(std::exchange(o._count, 0)) {}
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept
  {
    if (this != &o)
    {
      release();
      _ptr = std::exchange(o._ptr, nullptr);
      _count = std::exchange(o._count, 0);
    }
    return *this;
  }

  /// \brief Reallocates to \p count elements; contents are not kept. Synchronising (cudaMalloc):
  /// never under capture.
  void resize(size_t count)
  {
    release();
    if (count == 0)
      return;
    void *p = nullptr;
    check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
    _ptr = static_cast<T *>(p);
    _count = count;
  }

  /// \brief Host -> device copy of \p count elements at element \p offset, ordered on \p stream.
  /// The host memory must stay valid until the stream reaches the copy (pageable memory is staged
  /// by the driver before the call returns).
  void upload(T const *host, size_t count, cudaStream_t stream, size_t offset = 0)
  {
    checkRange(offset, count);
    if (count)
      check(cudaMemcpyAsync(_ptr + offset, host, count * sizeof(T), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync H2D");
  }
  void upload(std::vector<T> const &host, cudaStream_t stream, size_t offset = 0)
  {
    upload(host.data(), host.size(), stream, offset);
  }
  /// \brief Device -> host copy, ordered on \p stream; the caller synchronises before reading.
  void download(T *host, size_t count, cudaStream_t stream, size_t offset = 0) const
  {
    checkRange(offset, count);
    if (count)
      check(cudaMemcpyAsync(host, _ptr + offset, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync D2H");
  }
  /// \brief Sets every byte to \p value on \p stream.
  void fillBytes(int value, cudaStream_t stream)
  {
    if (_count)
      check(cudaMemsetAsync(_ptr, value, bytes(), stream), "cudaMemsetAsync");
  }

  T *data() { return _ptr; }
  T const *data() const { return _ptr; }
  size_t size() const { return _count; }
  size_t bytes() const { return _count * sizeof(T); }

private:
  void release()
  {
    if (_ptr)
      cudaFree(_ptr);  // errors at teardown are not actionable
    _ptr = nullptr;
    _count = 0;
  }
  void checkRange(size_t offset, size_t count) const
  {
    if (offset + count > _count)
      throw RuntimeFailure("DeviceBuffer: copy of " + std::to_string(count) + " elements at " + std::to_string(offset) +
                           " exceeds the " + std::to_string(_count) + " allocated");
  }

  T *_ptr = nullptr;
  size_t _count = 0;
};

/// \brief Owning non-blocking stream (no implicit sync with the legacy default stream).
class Stream
{
public:
  Stream();
  ~Stream();
  Stream(Stream const &) = delete;
  Stream &operator=(Stream const &) = delete;
  cudaStream_t get() const { return _stream; }
  void sync() const;

private:
  cudaStream_t _stream = nullptr;
};

/// \brief Owning timing event.
class Event
{
public:
  Event();
  ~Event();
  Event(Event const &) = delete;
  Event &operator=(Event const &) = delete;
  Event(Event &&o) noexcept : _event(std::exchange(o._event, nullptr)) {}
  void record(cudaStream_t stream);
  void sync() const;
  /// \brief Milliseconds from \p start to this event (both recorded and complete).
  float elapsedMsSince(Event const &start) const;
  cudaEvent_t get() const { return _event; }

private:
  cudaEvent_t _event = nullptr;
};

/// \brief An instantiated CUDA graph. Captured in cudaStreamCaptureModeGlobal, so any
/// capture-unsafe call (a cudaMalloc, a synchronising copy, from any thread) fails the capture
/// instead of being recorded silently.
class Graph
{
public:
  Graph() = default;
  ~Graph();
  Graph(Graph const &) = delete;
  Graph &operator=(Graph const &) = delete;
  Graph(Graph &&o) noexcept;
  Graph &operator=(Graph &&o) noexcept;

  /// \brief Captures what \p enqueue puts on \p stream and instantiates it. If \p enqueue throws,
  /// the capture is ended and discarded and the exception propagates.
  template <class Enqueue>
  static Graph capture(cudaStream_t stream, Enqueue &&enqueue)
  {
    beginCapture(stream);
    try
    {
      enqueue();
    }
    catch (...)
    {
      abortCapture(stream);
      throw;
    }
    return endCapture(stream);
  }

  /// \brief Enqueues one replay on \p stream (no sync).
  void replay(cudaStream_t stream) const;
  size_t numNodes() const;
  bool valid() const { return _exec != nullptr; }

private:
  static void beginCapture(cudaStream_t stream);
  static void abortCapture(cudaStream_t stream) noexcept;
  static Graph endCapture(cudaStream_t stream);
  void reset() noexcept;

  cudaGraph_t _graph = nullptr;
  cudaGraphExec_t _exec = nullptr;
};

/// \brief Whether \p stream is being captured right now (legal inside a capture).
bool isCapturing(cudaStream_t stream);

} // namespace canopy::cuda
