#include "canopy_GpuLab.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace canopy::cuda
{
L2Flusher::L2Flusher(size_t bytes)
{
  if (bytes == 0)
    bytes = 2 * std::max<size_t>(deviceInfo(currentDevice()).l2_bytes, size_t(1) << 20);
  _buffer.resize(bytes);
}

void L2Flusher::flush(cudaStream_t stream)
{
  _value = (_value + 1) & 0xff;  // a new value each time: no chance of a skipped identical write
  _buffer.fillBytes(_value, stream);
}

namespace
{
/// Median milliseconds of \p reps timed calls of \p launch (the peak measurements).
template <class Launch>
double medianLaunchMs(cudaStream_t stream, int reps, char const *what, Launch &&launch)
{
  return summarize(timedLaunchesMs(stream, reps, what, [] {}, launch)).median;
}

void checkBlas(cublasStatus_t s, char const *what)
{
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeFailure(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}
} // namespace

Summary timeGraph(Graph const &graph, cudaStream_t stream, int samples, int warmup, L2Flusher *flusher)
{
  for (int i = 0; i < warmup; ++i)
    graph.replay(stream);
  return summarize(timedLaunchesMs(
      stream, samples, "timeGraph",
      [&] {
        if (flusher)
          flusher->flush(stream);
      },
      [&] { graph.replay(stream); }));
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

double measureFp32FmaFlops(cudaStream_t stream, double seconds, int reps)
{
  DeviceInfo const dev = deviceInfo();
  int const blocks = 8 * dev.sm_count, threads = 256;  // 64 warps per SM: full occupancy
  DeviceBuffer<float> sink(static_cast<size_t>(blocks) * threads);
  // Iterations sized for about `seconds` at an assumed 60 TFLOP/s (the exact rate is measured).
  int64_t const per_iter = fp32FmaPeakFlops(blocks, threads, 1);
  int const iters = static_cast<int>(std::max<int64_t>(1, static_cast<int64_t>(seconds * 6e13 / per_iter)));
  auto launch = [&] { check(launchFp32FmaPeak(blocks, threads, iters, sink.data(), stream), "launchFp32FmaPeak"); };
  launch();
  return static_cast<double>(fp32FmaPeakFlops(blocks, threads, iters)) /
         (medianLaunchMs(stream, reps, "fp32 FMA peak", launch) * 1e-3);
}

LaunchFloor measureLaunchFloor(cudaStream_t stream, int samples)
{
  DeviceInfo const dev = deviceInfo();
  LaunchFloor f;
  f.blocks = dev.sm_count;
  f.smem_bytes = dev.smem_per_block_optin;
  f.samples = samples;
  DeviceBuffer<int> sink(static_cast<size_t>(f.blocks));
  check(prepareLaunchFloorGrid(f.smem_bytes), "prepareLaunchFloorGrid");
  auto split = [&] {
    check(launchFloorGrid(f.blocks, LaunchFloor::SPLIT_THREADS, f.smem_bytes, sink.data(), stream), "launchFloorGrid");
  };
  auto combine = [&] {
    check(launchFloorGrid(f.blocks, LaunchFloor::COMBINE_THREADS, sizeof(int), sink.data(), stream), "launchFloorGrid");
  };
  L2Flusher flusher;
  Graph const one = Graph::capture(stream, split);
  Graph const two = Graph::capture(stream, [&] {
    split();
    combine();
  });
  f.split_us = timeGraph(one, stream, samples, 5, &flusher).median * 1e3;
  f.split_combine_us = timeGraph(two, stream, samples, 5, &flusher).median * 1e3;
  return f;
}

std::string CopyCeiling::label() const
{
  char const *const names[] = {"cp.async 16 B gather", "TMA one-row boxes", "TMA 64-row tiles (contiguous)",
                               "cp.async 16 B gather of a share"};
  std::string s = names[static_cast<int>(probe.mechanism)];
  if (probe.cluster > 1)
    s += (probe.mechanism == CopyMechanism::kCpAsyncForward ? ", forwarded to " : ", multicast to ") +
         std::to_string(probe.cluster) + " CTAs";
  return s + ", " + std::to_string(probe.stages) + " x " + std::to_string(probe.keys) + " rows";
}

std::vector<CopyCeiling> measureCopyCeilings(cudaStream_t stream, bool quick)
{
  DeviceInfo const dev = deviceInfo();
  std::vector<CopyCeiling> out;
  if (dev.cc_major != 9 || dev.cc_minor != 0)
    return out;
  constexpr uint32_t POOL_ROWS = 16384;
  DeviceBuffer<uint16_t> pool(static_cast<size_t>(POOL_ROWS) * D_QK);
  check(fillRandomBf16(pool.data(), pool.size(), 0xC0FFEE, 1.f, stream), "fillRandomBf16 (copy probe pool)");
  DeviceBuffer<float> sink(static_cast<size_t>(dev.sm_count) * 32);
  using M = CopyMechanism;
  CopyProbe const probes[] = {{M::kCpAsync, 1, 2, 64}, {M::kCpAsync, 1, 3, 64}, {M::kCpAsync, 1, 4, 32},
                              {M::kTmaRows, 1, 2, 64}, {M::kTmaRows, 1, 3, 64}, {M::kTmaRows, 1, 4, 32},
                              {M::kTmaRows, 2, 2, 64}, {M::kTmaRows, 2, 3, 64}, {M::kTmaRows, 4, 2, 64},
                              {M::kTmaRows, 4, 3, 64}, {M::kTmaTile, 1, 2, 64}, {M::kTmaTile, 2, 2, 64},
                              {M::kCpAsyncForward, 2, 2, 64}, {M::kCpAsyncForward, 4, 2, 64}};
  int const reps = quick ? 2 : 5;
  for (CopyProbe const &probe : probes)
  {
    // About 100 MB landed per CTA (a few ms for the grid) at 64 rows x 1,152 B per stage.
    int const tiles = (quick ? 100 : 1500) * 64 / probe.keys;
    CopyCeiling c;
    c.probe = probe;
    auto launch = [&] {
      check(launchCopyProbe(probe, pool.data(), POOL_ROWS, tiles, sink.data(), stream, &c.ctas), "launchCopyProbe");
    };
    launch();  // warm-up: the pool into L2, the kernel loaded
    double const s = medianLaunchMs(stream, reps, "copy ceiling", launch) * 1e-3;
    double const landed = static_cast<double>(c.ctas) * tiles * probe.keys * D_QK * 2;
    c.smem_bytes_per_s = landed / s;
    c.l2_bytes_per_s = c.smem_bytes_per_s / probe.cluster;
    out.push_back(c);
  }
  return out;
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
  p.fp32_fma_flops = measureFp32FmaFlops(stream, sec);
  p.launch_floor = measureLaunchFloor(stream, quick ? 5 : 50);
  p.copy_ceilings = measureCopyCeilings(stream, quick);
  return p;
}

std::string Peaks::describe() const
{
  char buf[900];
  std::snprintf(buf, sizeof(buf),
                "bf16 GEMM %.1f TFLOP/s (cuBLAS %dx%dx%d, random data, median of 10); D2D copy %.2f TB/s (%.1f GB, "
                "read + write, median of 10); mma.sync bf16 %.1f TFLOP/s (registers, %d warps/SM, median of 5), "
                "%.1f TFLOP/s fed by ldmatrix.x4 per 2 mma and %.1f per 4 mma at 8 warps/SM; fp32 FMA %.1f TFLOP/s "
                "(registers, 64 warps/SM, median of 5); launch floor %.1f µs one grid, %.1f µs with a combine grid (%d "
                "blocks of %d threads and %zu KB shared, graph replay, L2 flushed, median of %d)",
                bf16_flops * 1e-12, gemm_n, gemm_n, gemm_n, copy_bytes_per_s * 1e-12, copy_bytes / 1e9,
                mma_sync_flops * 1e-12, mma_sync_warps_per_sm, mma_ldmatrix_flops * 1e-12,
                mma_ldmatrix_wide_flops * 1e-12, fp32_fma_flops * 1e-12, launch_floor.split_us,
                launch_floor.split_combine_us, launch_floor.blocks, LaunchFloor::SPLIT_THREADS,
                launch_floor.smem_bytes / 1024, launch_floor.samples);
  std::string s = buf;
  for (CopyCeiling const &c : copy_ceilings)
  {
    std::snprintf(buf, sizeof(buf), "; copy ceiling %s: %.2f TB/s into shared memory (%.0f TFLOP/s at 64 rows)",
                  c.label().c_str(), c.smem_bytes_per_s * 1e-12, c.tileFlops() * 1e-12);
    s += buf;
  }
  return s;
}
void fillRandomValues(CudaBatchStorage &s, uint64_t seed, float q_scale, float kv_scale)
{
  check(fillRandomBf16(s.queryData(), s.queryElements(), seed * 2 + 1, q_scale, s.stream()), "fillRandomBf16 (q)");
  check(fillRandomBf16(s.poolData(), s.poolElements(), seed * 2 + 2, kv_scale, s.stream()), "fillRandomBf16 (kv pool)");
}
} // namespace canopy::cuda
