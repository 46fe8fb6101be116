/// \file canopy_Executor.hpp
/// \brief How a design's run() is executed and timed on one kind of memory: fenced steady clock on
/// hosts; device events, CUDA graphs (one per bucket) and L2 flushes on a GPU.
#pragma once

#include "canopy_BatchStorage.hpp"
#include "canopy_Design.hpp"
#include "canopy_ExperimentConfig.hpp"

#include <map>
#include <memory>
#include <string>

namespace canopy
{
class Executor
{
public:
  virtual ~Executor() = default;
  /// \brief Human-readable device for the environment block and the table footers.
  virtual std::string device() const = 0;
  /// \brief The one device a row ran on, for its `device` column: a GPU by index, name and UUID (one
  /// card of the host, where device() names only the model); the host's CPU otherwise.
  virtual std::string rowDevice() const { return device(); }
  /// \brief Whether \p mode can run here (graphs need a GPU and a capture-safe design).
  virtual bool supports(ExecMode mode, Design const &design, std::string *why) const = 0;
  /// \brief Called once per bucket after the eager warm-up, before timing: captures the graph in
  /// graph mode. Metadata is then copied into the same static buffers before each replay.
  virtual void prepare(Design &design, BatchStorage &storage, ExecMode mode) = 0;
  /// \brief Runs once (eager launch or graph replay) and returns the seconds it took; the L2
  /// (or the host's last-level cache) is flushed first, outside the timed region, when asked.
  virtual double timeRun(Design &design, BatchStorage &storage, ExecMode mode, bool l2_flush) = 0;
  /// \brief Drops per-bucket state (graphs).
  virtual void release() {}
  /// \brief Peaks measured on this device in this run (0 when not measured).
  virtual double peakFlops() { return 0; }
  virtual double peakBytesPerSecond() { return 0; }
  /// \brief The FLOP rate of the matrix instruction the sm_120-style designs may use (mma.sync on a
  /// GPU), for a second bound beside the GEMM-peak one; 0 where it means nothing (hosts).
  virtual double peakMmaSyncFlops() { return 0; }
  /// \brief The fp32 FMA rate of the CUDA cores: the bound of designs without tensor cores (the
  /// portable Kokkos kernels); 0 where not measured (hosts).
  virtual double peakFp32FmaFlops() { return 0; }
  /// \brief The rate at which the SMs fill shared memory with gathered KV rows (`canopy peaks`' copy
  /// ceiling of cp.async at 2 stages of 64 rows, cuda-sm90's producer): the bound of the 64-row tile
  /// designs' copies; 0 where not measured (hosts, GPUs other than sm_90).
  virtual double peakTileCopyBytesPerSecond() { return 0; }
  /// \brief Extra environment facts (GPU name, index, UUID, clocks, driver).
  virtual std::map<std::string, std::string> environment() const { return {}; }
};

std::unique_ptr<Executor> makeHostExecutor();

/// \brief The executor for a design's memory kind; CUDA executors are created once and shared.
Executor &executorFor(MemoryKind kind);

#ifdef CANOPY_HAVE_CUDA_EXECUTOR
std::unique_ptr<Executor> makeCudaExecutor();
#endif
} // namespace canopy
