/// \file canopy_HostExecutor.cpp
/// \brief Eager execution on the Kokkos host backend, timed with a fenced steady clock.
#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Executor.hpp"
#include "canopy_Runtime.hpp"


#include <chrono>
#include <fstream>
#include <vector>

namespace canopy
{
namespace
{
std::string cpuModel()
{
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

class HostExecutor final : public Executor
{
public:
  std::string device() const override { return "host: " + cpuModel(); }
  bool supports(ExecMode mode, Design const &, std::string *why) const override
  {
    if (mode == ExecMode::kGraph)
    {
      if (why)
        *why = "graph replay needs a GPU; host designs run eagerly";
      return false;
    }
    return true;
  }
  void prepare(Design &, BatchStorage &, ExecMode) override {}
  double timeRun(Design &design, BatchStorage &storage, ExecMode, bool l2_flush) override
  {
    if (l2_flush)
      flushCaches();
    storage.sync();
    fenceAll("canopy::replay::before_run");
    auto const t0 = std::chrono::steady_clock::now();
    design.run(storage.ref(), storage.context());
    storage.sync();
    fenceAll("canopy::replay::after_run");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

private:
  // Writing a buffer larger than any last-level cache we run on evicts the inputs, the host
  // analogue of the GPU's L2 flush.
  void flushCaches()
  {
    if (_flush.empty())
      _flush.assign(size_t{256} << 20 >> 3, 0);
    for (size_t i = 0; i < _flush.size(); i += 8)
      _flush[i] += 1;
  }
  std::vector<uint64_t> _flush;
};
} // namespace

std::unique_ptr<Executor> makeHostExecutor() { return std::make_unique<HostExecutor>(); }

Executor &executorFor(MemoryKind kind)
{
  static std::unique_ptr<Executor> host = makeHostExecutor();
  if (kind != MemoryKind::kCudaDevice)
    return *host;
#ifdef CANOPY_HAVE_CUDA_EXECUTOR
  static std::unique_ptr<Executor> cuda = makeCudaExecutor();
  return *cuda;
#else
  throw InputError("this build has no CUDA executor");
#endif
}
} // namespace canopy
