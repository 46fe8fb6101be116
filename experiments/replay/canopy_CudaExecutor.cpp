/// \file canopy_CudaExecutor.cpp
/// \brief GPU execution for the replay engine: device events around each launch or graph replay,
/// one CUDA graph per bucket (captured in global mode after the eager warm-up), L2 flushes outside
/// the timed region, and the roofline peaks measured once per run on the same GPU.
#include "canopy_CudaRuntime.hpp"
#include "canopy_GpuLab.hpp"
#include "canopy_Executor.hpp"

#include <memory>
#include <optional>
#include <vector>

namespace canopy
{
namespace
{
class CudaExecutor final : public Executor
{
public:
  std::string device() const override
  {
    std::string why;
    if (!cuda::cudaAvailable(&why))
      return "no GPU (" + why + ")";
    cuda::DeviceInfo const &d = info();
    return "GPU: " + d.summary() + " — " + d.targetLabel();
  }

  bool supports(ExecMode mode, Design const &design, std::string *why) const override
  {
    std::string reason;
    if (!cuda::cudaAvailable(&reason))
    {
      if (why)
        *why = "no usable GPU: " + reason;
      return false;
    }
    if (mode == ExecMode::kGraph && !design.captureSafe())
    {
      if (why)
        *why = design.name() + " is not capture-safe";
      return false;
    }
    return true;
  }

  void prepare(Design &design, BatchStorage &storage, ExecMode mode) override
  {
    _graph.reset();
    if (mode != ExecMode::kGraph)
      return;
    cudaStream_t const stream = streamOf(storage);
    storage.sync();  // the bucket's metadata and values are in place before capture
    _graph.emplace(cuda::Graph::capture(stream, [&] { design.run(storage.ref(), storage.context()); }));
  }

  double timeRun(Design &design, BatchStorage &storage, ExecMode mode, bool l2_flush) override
  {
    cudaStream_t const stream = streamOf(storage);
    if (l2_flush && !_flusher)  // created on first use: constructing the executor must not touch CUDA
      _flusher = std::make_unique<cuda::L2Flusher>();
    if (mode == ExecMode::kGraph && (!_graph || !_graph->valid()))
      throw RuntimeFailure("graph replay requested before a graph was captured for this bucket");
    // One sample through the lab's timed-launch loop (the one the peaks and timeGraph use): the
    // flush outside the events, a synchronisation after each sample.
    std::vector<double> const ms = cuda::timedLaunchesMs(
        stream, 1, "verify run",
        [&] {
          if (l2_flush)
            _flusher->flush(stream);
        },
        [&] {
          if (mode == ExecMode::kGraph)
            _graph->replay(stream);
          else
            design.run(storage.ref(), storage.context());
        });
    cuda::check(cudaGetLastError(), "verify launch");
    return ms.front() * 1e-3;
  }

  void release() override { _graph.reset(); }

  double peakFlops() override { return peaks().bf16_flops; }
  double peakBytesPerSecond() override { return peaks().copy_bytes_per_s; }
  double peakMmaSyncFlops() override { return peaks().mma_sync_flops; }
  double peakFp32FmaFlops() override { return peaks().fp32_fma_flops; }

  std::map<std::string, std::string> environment() const override
  {
    std::map<std::string, std::string> env;
    if (!cuda::cudaAvailable())
      return env;
    cuda::DeviceInfo const &d = info();
    env["gpu"] = d.name;
    env["gpu_cc"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
    env["gpu_sms"] = std::to_string(d.sm_count);
    env["gpu_sm_clock_mhz"] = std::to_string(d.sm_clock_khz / 1000);
    env["gpu_mem_clock_mhz"] = std::to_string(d.mem_clock_khz / 1000);
    env["cuda_driver"] = std::to_string(d.driver_version);
    env["cuda_runtime"] = std::to_string(d.runtime_version);
    if (_peaks)
      env["peaks"] = _peaks->describe();
    return env;
  }

private:
  static cudaStream_t streamOf(BatchStorage const &storage)
  {
    return static_cast<cudaStream_t>(storage.context().cuda_stream);
  }
  cuda::DeviceInfo const &info() const
  {
    if (!_info)
      _info = cuda::deviceInfo();
    return *_info;
  }
  cuda::Peaks const &peaks()
  {
    if (!_peaks)
    {
      cuda::Stream s;
      _peaks = cuda::measurePeaks(s.get());
    }
    return *_peaks;
  }

  mutable std::optional<cuda::DeviceInfo> _info;
  std::optional<cuda::Peaks> _peaks;
  std::optional<cuda::Graph> _graph;
  std::unique_ptr<cuda::L2Flusher> _flusher;
};

} // namespace

std::unique_ptr<Executor> makeCudaExecutor() { return std::make_unique<CudaExecutor>(); }
} // namespace canopy
