#include "canopy_CudaRuntime.hpp"

#include "canopy_VerifyAttentionCuda.hpp"

#include <cublas_v2.h>

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

L2Flusher::L2Flusher(size_t bytes)
{
  if (bytes == 0)
  {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    bytes = 2 * std::max<size_t>(deviceInfo(dev).l2_bytes, size_t(1) << 20);
  }
  _buffer.resize(bytes);
}

void L2Flusher::flush(cudaStream_t stream)
{
  _value = (_value + 1) & 0xff;  // a new value each time: no chance of a skipped identical write
  _buffer.fillBytes(_value, stream);
}

TimingStats summarize(std::vector<double> s)
{
  TimingStats t;
  t.samples = static_cast<int>(s.size());
  if (s.empty())
    return t;
  std::sort(s.begin(), s.end());
  auto rank = [&](double q) { return s[std::min(s.size() - 1, static_cast<size_t>(q * (s.size() - 1) + 0.5))]; };
  t.median_ms = rank(0.5);
  t.p10_ms = rank(0.1);
  t.p90_ms = rank(0.9);
  t.min_ms = s.front();
  return t;
}

namespace
{
/// Times \p reps calls of \p launch, one event pair around each, after \p before (untimed, e.g. an
/// L2 flush); one synchronisation at the end. Shared by the graph timing and the peak measurements.
template <class Before, class Launch>
TimingStats timeLaunches(cudaStream_t stream, int reps, char const *what, Before &&before, Launch &&launch)
{
  std::vector<Event> start(reps), stop(reps);
  for (int i = 0; i < reps; ++i)
  {
    before();
    start[i].record(stream);
    launch();
    stop[i].record(stream);
  }
  check(cudaStreamSynchronize(stream), (std::string("cudaStreamSynchronize (") + what + ")").c_str());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i)
    ms[i] = stop[i].elapsedMsSince(start[i]);
  return summarize(ms);
}

/// Median milliseconds of \p reps timed calls of \p launch (the peak measurements).
template <class Launch>
double medianLaunchMs(cudaStream_t stream, int reps, char const *what, Launch &&launch)
{
  return timeLaunches(stream, reps, what, [] {}, launch).median_ms;
}

void checkBlas(cublasStatus_t s, char const *what)
{
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeFailure(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}
} // namespace

TimingStats timeGraph(Graph const &graph, cudaStream_t stream, int samples, int warmup, L2Flusher *flusher)
{
  for (int i = 0; i < warmup; ++i)
    graph.replay(stream);
  return timeLaunches(
      stream, samples, "timeGraph",
      [&] {
        if (flusher)
          flusher->flush(stream);
      },
      [&] { graph.replay(stream); });
}

double measureBf16GemmFlops(cudaStream_t stream, int n, int reps)
{
  size_t const elems = static_cast<size_t>(n) * n;
  DeviceBuffer<uint16_t> a(elems), b(elems), c(elems);
  // Random operands: zeros run measurably faster on the tensor cores than real data.
  check(fillRandomBf16(a.data(), elems, 11, 1.f, stream), "fillRandomBf16");
  check(fillRandomBf16(b.data(), elems, 12, 1.f, stream), "fillRandomBf16");
  cublasHandle_t handle = nullptr;
  checkBlas(cublasCreate(&handle), "cublasCreate");
  struct Guard
  {
    cublasHandle_t h;
    ~Guard() { cublasDestroy(h); }
  } guard{handle};
  checkBlas(cublasSetStream(handle, stream), "cublasSetStream");
  float const alpha = 1.f, beta = 0.f;
  auto gemm = [&] {
    checkBlas(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_16BF, n, b.data(),
                           CUDA_R_16BF, n, &beta, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  };
  for (int i = 0; i < 3; ++i)
    gemm();
  double const med = medianLaunchMs(stream, reps, "gemm peak", gemm);
  return 2.0 * n * static_cast<double>(n) * n / (med * 1e-3);
}

double measureCopyBandwidth(cudaStream_t stream, size_t bytes, int reps)
{
  DeviceBuffer<uint8_t> src(bytes), dst(bytes);
  src.fillBytes(1, stream);
  auto copy = [&] {
    check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync D2D");
  };
  for (int i = 0; i < 2; ++i)
    copy();
  return 2.0 * static_cast<double>(bytes) / (medianLaunchMs(stream, reps, "copy peak", copy) * 1e-3);
}

double measureMmaSyncFlops(cudaStream_t stream, MmaFeed feed, int warps_per_sm, double seconds, int reps)
{
  DeviceInfo const dev = deviceInfo();
  int const blocks = 4 * dev.sm_count;
  // More than half the SM's shared memory keeps one block per SM, so warps_per_sm is exact.
  size_t const smem = std::max(mmaSyncPeakSharedBytes(feed), dev.smem_per_sm / 2 + 1024);
  if (smem > dev.smem_per_block_optin)
    throw RuntimeFailure("measureMmaSyncFlops: cannot pin one block per SM on this device");
  DeviceBuffer<float> sink(static_cast<size_t>(blocks) * 32 * warps_per_sm);
  // Iterations sized for about `seconds` at an assumed 500 TFLOP/s (the exact rate is measured).
  int64_t const per_iter = mmaSyncPeakFlops(feed, blocks, warps_per_sm, 1);
  int const iters = static_cast<int>(std::max<int64_t>(1, static_cast<int64_t>(seconds * 5e14 / per_iter)));
  auto launch = [&] { check(launchMmaSyncPeak(feed, blocks, warps_per_sm, iters, smem, sink.data(), stream), "launchMmaSyncPeak"); };
  launch();
  return static_cast<double>(mmaSyncPeakFlops(feed, blocks, warps_per_sm, iters)) /
         (medianLaunchMs(stream, reps, "mma.sync peak", launch) * 1e-3);
}

Peaks measurePeaks(cudaStream_t stream, int gemm_n, size_t copy_bytes, bool quick)
{
  Peaks p;
  p.gemm_n = gemm_n;
  p.copy_bytes = copy_bytes;
  p.bf16_flops = measureBf16GemmFlops(stream, gemm_n);
  p.copy_bytes_per_s = measureCopyBandwidth(stream, copy_bytes);
  double const sec = quick ? 2e-4 : 5e-3;
  for (int w : {8, 16, 32})
  {
    double const f = measureMmaSyncFlops(stream, MmaFeed::kRegisters, w, sec);
    if (f > p.mma_sync_flops)
      p.mma_sync_flops = f, p.mma_sync_warps_per_sm = w;
  }
  p.mma_ldmatrix_flops = measureMmaSyncFlops(stream, MmaFeed::kLdmatrix, 8, sec);
  p.mma_ldmatrix_wide_flops = measureMmaSyncFlops(stream, MmaFeed::kLdmatrixWide, 8, sec);
  return p;
}

std::string Peaks::describe() const
{
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "bf16 GEMM %.1f TFLOP/s (cuBLAS %dx%dx%d, random data, median of 10); D2D copy %.2f TB/s (%.1f GB, "
                "read + write, median of 10); mma.sync bf16 %.1f TFLOP/s (registers, %d warps/SM, median of 5), "
                "%.1f TFLOP/s fed by ldmatrix.x4 per 2 mma and %.1f per 4 mma at 8 warps/SM",
                bf16_flops * 1e-12, gemm_n, gemm_n, gemm_n, copy_bytes_per_s * 1e-12, copy_bytes / 1e9,
                mma_sync_flops * 1e-12, mma_sync_warps_per_sm, mma_ldmatrix_flops * 1e-12,
                mma_ldmatrix_wide_flops * 1e-12);
  return buf;
}
} // namespace canopy::cuda
