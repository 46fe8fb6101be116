#include "canopy_CudaRuntime.hpp"

#include "canopy_VerifyAttentionCuda.hpp"

#include <algorithm>
#include <cstdio>

namespace canopy::cuda
{
bool cudaAvailable(std::string *why)
{
  int count = 0;
  cudaError_t const e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
  {
    if (why)
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (count == 0)
  {
    if (why)
      *why = "no CUDA device";
    return false;
  }
  return true;
}

void check(cudaError_t e, char const *what)
{
  if (e != cudaSuccess)
    throw RuntimeFailure(std::string(what) + ": " + cudaGetErrorString(e));
}

DeviceInfo deviceInfo(int device)
{
  DeviceInfo d;
  d.device = device;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  d.global_bytes = prop.totalGlobalMem;
  d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  d.smem_per_sm = prop.sharedMemPerMultiprocessor;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device) == cudaSuccess)
    d.sm_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess)
    d.mem_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
    d.mem_bus_bits = v;
  cudaGetLastError();
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  return d;
}

int currentDevice()
{
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

std::string DeviceInfo::targetLabel() const
{
  if (cc_major == 12 && cc_minor == 0)
    return name;
  return name + " (sm_" + std::to_string(cc_major) + std::to_string(cc_minor) + ") proxy for the sm_120 target";
}

std::string DeviceInfo::summary() const
{
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %d SMs, %.0f MB L2, %.0f GB, driver %d.%d, runtime %d.%d)",
                name.c_str(), cc_major, cc_minor, sm_count, l2_bytes / 1048576.0, global_bytes / 1073741824.0,
                driver_version / 1000, (driver_version % 1000) / 10, runtime_version / 1000,
                (runtime_version % 1000) / 10);
  return buf;
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&_stream, cudaStreamNonBlocking), "cudaStreamCreate"); }
Stream::~Stream()
{
  if (_stream)
    cudaStreamDestroy(_stream);
}
void Stream::sync() const { check(cudaStreamSynchronize(_stream), "cudaStreamSynchronize"); }

Event::Event() { check(cudaEventCreate(&_event), "cudaEventCreate"); }
Event::~Event()
{
  if (_event)
    cudaEventDestroy(_event);
}
void Event::record(cudaStream_t stream) { check(cudaEventRecord(_event, stream), "cudaEventRecord"); }
void Event::sync() const { check(cudaEventSynchronize(_event), "cudaEventSynchronize"); }
float Event::elapsedMsSince(Event const &start) const
{
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start._event, _event), "cudaEventElapsedTime");
  return ms;
}

Graph::~Graph() { reset(); }
Graph::Graph(Graph &&o) noexcept : _graph(std::exchange(o._graph, nullptr)), _exec(std::exchange(o._exec, nullptr)) {}
Graph &Graph::operator=(Graph &&o) noexcept
{
  if (this != &o)
  {
    reset();
    _graph = std::exchange(o._graph, nullptr);
    _exec = std::exchange(o._exec, nullptr);
  }
  return *this;
}
void Graph::reset() noexcept
{
  if (_exec)
    cudaGraphExecDestroy(_exec);
  if (_graph)
    cudaGraphDestroy(_graph);
  _exec = nullptr;
  _graph = nullptr;
}

void Graph::beginCapture(cudaStream_t stream)
{
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture (global mode)");
}

void Graph::abortCapture(cudaStream_t stream) noexcept
{
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream, &g);
  if (g)
    cudaGraphDestroy(g);
  cudaGetLastError();
}

Graph Graph::endCapture(cudaStream_t stream)
{
  Graph out;
  check(cudaStreamEndCapture(stream, &out._graph), "cudaStreamEndCapture (a capture-unsafe call inside?)");
  check(cudaGraphInstantiate(&out._exec, out._graph, 0), "cudaGraphInstantiate");
  return out;
}

void Graph::replay(cudaStream_t stream) const
{
  if (!_exec)
    throw RuntimeFailure("Graph::replay: no instantiated graph");
  check(cudaGraphLaunch(_exec, stream), "cudaGraphLaunch");
}

size_t Graph::numNodes() const
{
  size_t n = 0;
  if (_graph)
    check(cudaGraphGetNodes(_graph, nullptr, &n), "cudaGraphGetNodes");
  return n;
}

bool isCapturing(cudaStream_t stream)
{
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status == cudaStreamCaptureStatusActive;
}

} // namespace canopy::cuda
