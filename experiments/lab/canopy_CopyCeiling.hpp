/// \file canopy_CopyCeiling.hpp
/// \brief Launchers of the copy-ceiling probe (canopy_CopyCeiling.cu, sm_90a): plain declarations,
/// included by host code.
#pragma once

#include "canopy_TensorMap.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace canopy::cuda
{
/// How a probe fills its KV stages.
enum class CopyMechanism : int
{
  kCpAsync = 0,  ///< 16-byte cp.async per chunk of a gathered row (cuda-sm90), mbarrier arrival per thread
  kTmaRows = 1,  ///< bulk tensor copy, one box of 1 row x 64 columns per swizzled block (9 per token row)
  kTmaTile = 2,  ///< bulk tensor copy of contiguous rows (a page of KEYS tokens): the dense kernels' case
  /// cp.async gather of this CTA's share of the rows, then, once landed, bulk shared-to-shared
  /// copies of it into every other CTA of the cluster (cuda-sm90-c2's distribution)
  kCpAsyncForward = 3
};
/// One probe: mechanism, CTAs per cluster (each CTA copies its share of every tile into all of them:
/// TMA by multicast, kCpAsyncForward through distributed shared memory; cp.async alone has 1),
/// stages and token rows per stage.
struct CopyProbe
{
  CopyMechanism mechanism;
  int cluster;
  int stages;
  int keys;
};
/// \brief Dynamic shared memory of a probe's CTA (its stages and barriers).
size_t copyProbeSharedBytes(CopyProbe const &probe);
/// \brief Enqueues one probe: as many CTAs (whole clusters, one per SM) as are resident at once,
/// each landing \p tiles stages of gathered rows from the \p pool_rows x 576 bf16 pool (a dense
/// matrix) in its shared memory; \p sink holds 32 floats per CTA; \p ctas receives the grid size.
/// cudaErrorInvalidValue for a combination the probe does not build (stages x keys in {2 x 64,
/// 3 x 64, 4 x 32}; 2 x 64 only for kTmaTile and kCpAsyncForward; cluster 1 for cp.async, 2 or 4
/// for kCpAsyncForward, 1-4 for TMA).
cudaError_t launchCopyProbe(CopyProbe const &probe, uint16_t const *pool, uint32_t pool_rows, int tiles, float *sink,
                            cudaStream_t stream, int *ctas);
} // namespace canopy::cuda
