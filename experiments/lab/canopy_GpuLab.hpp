/// \file canopy_GpuLab.hpp
/// \brief Measuring tools for the GPU (not part of any design): device-side random fills, the L2
/// flusher, the one timed-launch loop (canopy run's samples, timed graph replays), and the peak
/// probes the roofline uses (cuBLAS bf16 GEMM, device copy, mma.sync with three operand feeds) and
/// the launch floor of a small step.
/// Linked by the replay engine (so `canopy run` and `canopy peaks`) and the GPU tests; the designs'
/// library links none of it (and no cuBLAS).
#pragma once

#include "canopy_CopyCeiling.hpp"
#include "canopy_CudaBatchStorage.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_GpuLabKernels.hpp"
#include "canopy_Statistics.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace canopy::cuda
{
/// \brief Fills a storage's q rows in use and its whole KV pool with seeded random bf16 on the
/// device, for benchmark-sized pools that would take seconds on the host. Call after setMetadata.
void fillRandomValues(CudaBatchStorage &storage, uint64_t seed, float q_scale = 1.f, float kv_scale = 1.f);

/// \brief Evicts the L2 between timed samples by writing a buffer of twice the L2 size (a memset:
/// the written lines displace everything the timed work left in L2).
class L2Flusher
{
public:
  /// \param bytes buffer size; 0 = 2 x the current device's L2
  explicit L2Flusher(size_t bytes = 0);
  void flush(cudaStream_t stream);
  size_t bytes() const { return _buffer.bytes(); }

private:
  DeviceBuffer<uint8_t> _buffer;
  int _value = 0;
};

/// \brief The one timed-launch loop of every GPU measurement (canopy run's samples, timeGraph, the
/// peak probes): \p reps times \p before() (untimed, e.g. an L2 flush), an event, \p launch(), an
/// event; one synchronisation of \p stream at the end (\p what names it in an error). Each sample's
/// milliseconds, in launch order.
template <class Before, class Launch>
std::vector<double> timedLaunchesMs(cudaStream_t stream, int reps, char const *what, Before &&before, Launch &&launch)
{
  std::vector<Event> start(static_cast<size_t>(reps)), stop(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i)
  {
    before();
    start[i].record(stream);
    launch();
    stop[i].record(stream);
  }
  check(cudaStreamSynchronize(stream), (std::string("cudaStreamSynchronize (") + what + ")").c_str());
  std::vector<double> ms(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i)
    ms[i] = stop[i].elapsedMsSince(start[i]);
  return ms;
}

/// \brief Times \p samples replays of \p graph, one event pair around each replay, with the L2
/// flushed (outside the events) before each one when \p flusher is given, after \p warmup
/// untimed replays. Synchronises \p stream once at the end. Milliseconds, canopy_Statistics.hpp's
/// quantiles.
Summary timeGraph(Graph const &graph, cudaStream_t stream, int samples, int warmup, L2Flusher *flusher);

/// \brief The launch floor of a split design's step: timed graph replays (the L2 flushed before each,
/// as `canopy run` times a step) of empty grids shaped as the step's kernels: one block per SM of
/// SPLIT_THREADS threads holding the largest shared-memory request a block may make (the tile
/// kernels' residency), then, for the second figure, a dependent grid shaped as the combine (one
/// block of COMBINE_THREADS per SM, no shared memory). No kernel body makes such a step faster.
struct LaunchFloor
{
  static constexpr int SPLIT_THREADS = 384;   ///< cuda-sm90's CTA (two compute warpgroups and a producer)
  static constexpr int COMBINE_THREADS = 128; ///< the combine's block
  double split_us = 0;          ///< median µs: the split-shaped grid alone
  double split_combine_us = 0;  ///< median µs: it and the combine-shaped grid after it
  int blocks = 0;               ///< blocks per grid (the SM count)
  size_t smem_bytes = 0;        ///< shared memory per split-shaped block
  int samples = 0;
};

/// \brief One copy ceiling (canopy_CopyCeiling.hpp): the rate at which every SM fills shared memory
/// with KV tiles gathered from an L2-resident pool by one mechanism, with nothing else running.
struct CopyCeiling
{
  CopyProbe probe{};
  int ctas = 0;                 ///< CTAs of the grid (whole clusters resident at once, one per SM)
  double smem_bytes_per_s = 0;  ///< bytes landed in shared memory, all CTAs, median of the timed launches
  double l2_bytes_per_s = 0;    ///< bytes that left L2 for it (a multicast lands in `cluster` CTAs)
  std::string label() const;
  /// The FLOP rate a 64-row verify tile could sustain at this rate: each 1,152-byte token row that
  /// lands feeds 64 rows x 2,176 FLOP (Q.K^T over 576 columns and P.V over 512), 121 FLOP per byte.
  double tileFlops() const { return smem_bytes_per_s * 64.0 * 2176.0 / 1152.0; }
};
/// \brief Every copy probe, on an sm_90 GPU (empty elsewhere: the probe is sm_90a code): cp.async
/// gathers at 2 x 64, 3 x 64 and 4 x 32 token rows per stage; the bulk tensor copy of one-row boxes
/// alone and multicast in clusters of 2 and 4; contiguous 64-row tiles (the dense kernels' case);
/// cp.async gathers of a share forwarded to the other CTAs of a cluster of 2 or 4 (cuda-sm90-c2).
/// The pool is 16K rows (18.9 MB, L2-resident after the first launch); \p quick runs fewer tiles.
std::vector<CopyCeiling> measureCopyCeilings(cudaStream_t stream, bool quick = false);

/// \brief Peaks measured on this device, in this run, for the roofline bound (docs/design.md §1).
struct Peaks
{
  double bf16_flops = 0;       ///< dense bf16 GEMM, FLOP/s (cuBLAS, fp32 accumulation, random data)
  double copy_bytes_per_s = 0; ///< device-to-device copy, bytes read + written per second
  /// mma.sync m16n8k16 bf16 from registers, best of 8, 16 and 32 warps per SM: the instruction
  /// rate an sm_120-instruction-set design can approach on this GPU. On sm_90 the GEMM peak comes
  /// from wgmma, so the two differ there.
  double mma_sync_flops = 0;
  int mma_sync_warps_per_sm = 0;  ///< where mma_sync_flops was measured
  /// The same instruction fed by one ldmatrix.x4 per two mma at 8 warps per SM (cuda-sm120's Q.K^T
  /// inner loop and occupancy, with nothing around it).
  double mma_ldmatrix_flops = 0;
  /// The same with one ldmatrix.x4 per four mma (32 rows per warp), at 8 warps per SM.
  double mma_ldmatrix_wide_flops = 0;
  /// fp32 FMA from registers (CUDA cores, no tensor cores): the ceiling of the portable Kokkos
  /// kernels, which have no tensor-core abstraction.
  double fp32_fma_flops = 0;
  LaunchFloor launch_floor;  ///< what a small step cannot go below
  std::vector<CopyCeiling> copy_ceilings;  ///< shared-memory fill rates per copy mechanism (sm_90 only)
  int gemm_n = 0;
  size_t copy_bytes = 0;
  std::string describe() const;
};

/// \brief Median of \p reps timed n x n x n bf16 GEMMs (cuBLAS, random operands, fp32 accumulate).
double measureBf16GemmFlops(cudaStream_t stream, int n = 8192, int reps = 10);
/// \brief Median of \p reps timed cudaMemcpyAsync D2D of \p bytes; counts read + write bytes.
double measureCopyBandwidth(cudaStream_t stream, size_t bytes = size_t(2) << 30, int reps = 10);
/// \brief Median of \p reps timed launchMmaSyncPeak calls at \p warps_per_sm warps per SM (one
/// block per SM, pinned by its shared-memory request; 4 waves), in FLOP/s.
double measureMmaSyncFlops(cudaStream_t stream, MmaFeed feed, int warps_per_sm, double seconds = 5e-3, int reps = 5);
/// \brief Median of \p reps timed launchFp32FmaPeak calls (8 blocks of 256 threads per SM), in FLOP/s.
double measureFp32FmaFlops(cudaStream_t stream, double seconds = 5e-3, int reps = 5);
/// \brief The launch floor, \p samples timed replays of each graph after 5 untimed ones.
LaunchFloor measureLaunchFloor(cudaStream_t stream, int samples = 50);
/// \brief All of the above; \p quick shrinks the GEMM, the copy and the mma runs (smoke tests).
Peaks measurePeaks(cudaStream_t stream, int gemm_n = 8192, size_t copy_bytes = size_t(2) << 30, bool quick = false);
} // namespace canopy::cuda
