/// \file canopy_GpuLabKernels.hpp
/// \brief Launchers of the measuring kernels (plain declarations: included by their .cu files and by
/// host code): device-side random bf16 fills, the mma.sync and the fp32 FMA peak probes, the
/// launch floor's empty grids.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace canopy::cuda
{
/// \brief Fills \p n bf16 values with a counter-based hash of (seed, index), uniform in [-scale, scale).
/// For benchmark pools and GEMM peaks (never zeros: they time faster than real data).
cudaError_t fillRandomBf16(uint16_t *dst, size_t n, uint64_t seed, float scale, cudaStream_t stream);

/// Where the mma.sync peak kernels take their B operands from.
enum class MmaFeed : int
{
  kRegisters = 0,  ///< registers only: the instruction's rate
  kLdmatrix = 1,   ///< one ldmatrix.x4 per two mma, the cuda-sm120 Q.K^T inner loop without the rest
  kLdmatrixWide = 2  ///< one ldmatrix.x4 per four mma (32 rows per warp), cuda-sm120-w32's inner loop
};
/// \brief Enqueues \p blocks blocks of \p warps_per_block warps, each running \p iters rounds of
/// independent mma.sync m16n8k16 bf16 -> fp32 on random operands; \p smem_bytes of dynamic shared
/// memory per block (at least mmaSyncPeakSharedBytes) lets the caller pin blocks per SM.
/// \p sink holds one float per thread (keeps the results live).
cudaError_t launchMmaSyncPeak(MmaFeed feed, int blocks, int warps_per_block, int iters, size_t smem_bytes,
                              float *sink, cudaStream_t stream);
/// \brief FLOPs of one launchMmaSyncPeak call.
int64_t mmaSyncPeakFlops(MmaFeed feed, int blocks, int warps_per_block, int iters);
size_t mmaSyncPeakSharedBytes(MmaFeed feed);

/// \brief Enqueues \p blocks blocks of \p threads_per_block threads, each running \p iters rounds of
/// independent fp32 FMA chains from registers. \p sink holds one float per thread.
cudaError_t launchFp32FmaPeak(int blocks, int threads_per_block, int iters, float *sink, cudaStream_t stream);
/// \brief FLOPs of one launchFp32FmaPeak call (an FMA counts 2).
int64_t fp32FmaPeakFlops(int blocks, int threads_per_block, int iters);

/// \brief Allows launchFloorGrid up to \p smem_bytes of dynamic shared memory per block (a function
/// attribute: call it before a stream capture, not inside one).
cudaError_t prepareLaunchFloorGrid(size_t smem_bytes);
/// \brief Enqueues \p blocks empty blocks of \p threads_per_block threads with \p smem_bytes (>= 4,
/// <= what prepareLaunchFloorGrid allowed) of dynamic shared memory each; block i writes i to
/// \p sink[i] (the launch floor's grids).
cudaError_t launchFloorGrid(int blocks, int threads_per_block, size_t smem_bytes, int *sink, cudaStream_t stream);
} // namespace canopy::cuda
