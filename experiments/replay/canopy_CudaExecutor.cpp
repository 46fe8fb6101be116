/// \file canopy_CudaExecutor.cpp
/// \brief GPU execution for the replay engine: device events around each launch or graph replay,
/// one CUDA graph per bucket (captured in global mode after the eager warm-up), L2 flushes outside
/// the timed region, and the roofline peaks measured once per run on the same GPU.
#include "canopy_CudaRuntime.hpp"
#include "canopy_DeviceRecord.hpp"
#include "canopy_GpuLab.hpp"
#include "canopy_Executor.hpp"

#include <cstdio>
#include <cstdlib>
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

  std::string rowDevice() const override
  {
    if (!cuda::cudaAvailable())
      return device();
    Identity const &id = identity();
    return gpuRowDevice(id.index, info().name, id.uuid);
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
  double peakTileCopyBytesPerSecond() override
  {
    for (cuda::CopyCeiling const &c : peaks().copy_ceilings)
      if (c.probe.mechanism == cuda::CopyMechanism::kCpAsync && c.probe.cluster == 1 && c.probe.stages == 2 &&
          c.probe.keys == 64)
        return c.smem_bytes_per_s;
    return 0;
  }

  std::map<std::string, std::string> environment() const override
  {
    std::map<std::string, std::string> env;
    if (!cuda::cudaAvailable())
      return env;
    cuda::DeviceInfo const &d = info();
    env["gpu"] = d.name;
    Identity const &id = identity();
    env["gpu_index"] = id.index;
    env["gpu_uuid"] = id.uuid;
    env["gpu_pci_bus_id"] = id.pci_bus_id;
    char const *visible = std::getenv("CUDA_VISIBLE_DEVICES");
    env["cuda_visible_devices"] = visible ? visible : "(unset: every GPU visible)";
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
  /// Which card of the host this process runs on: what tells two GPUs of one model apart.
  struct Identity
  {
    std::string index;       ///< nvidia-smi's index (or UUID) as CUDA_VISIBLE_DEVICES pinned it
    std::string uuid;        ///< GPU-xxxxxxxx-...
    std::string pci_bus_id;  ///< domain:bus:device
  };

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
  Identity const &identity() const
  {
    if (!_identity)
    {
      int const ordinal = cuda::currentDevice();
      cudaDeviceProp prop{};
      cuda::check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
      unsigned char bytes[16];
      for (int i = 0; i < 16; ++i)
        bytes[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
      char bus[32];
      std::snprintf(bus, sizeof bus, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
      _identity = Identity{visibleDeviceIndex(std::getenv("CUDA_VISIBLE_DEVICES"), ordinal), gpuUuidText(bytes), bus};
    }
    return *_identity;
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
  mutable std::optional<Identity> _identity;
  std::optional<cuda::Peaks> _peaks;
  std::optional<cuda::Graph> _graph;
  std::unique_ptr<cuda::L2Flusher> _flusher;
};

} // namespace

std::unique_ptr<Executor> makeCudaExecutor() { return std::make_unique<CudaExecutor>(); }
} // namespace canopy
