/// \file canopy_CudaDesigns.hpp
/// \brief The hand-written CUDA designs (`cuda-sm120`, `cuda-sm120-w32`, `cuda-flat`) as Design objects, for callers
/// that need the CUDA-specific knobs (partial dtype) beyond the registry's names.
#pragma once

#include "canopy_Design.hpp"

namespace canopy::cuda
{
/// \brief cuda-sm120 with fp32 (default) or bf16 split partials. Same as makeDesign("cuda-sm120")
/// when \p partial_bf16 is false.
DesignPtr makeSm120Design(bool partial_bf16 = false);
/// \brief cuda-sm120-w32: the 32-rows-per-warp tile, same options as cuda-sm120.
DesignPtr makeSm120WideDesign(bool partial_bf16 = false);
/// \brief cuda-flat (never splits, so it has no partials).
DesignPtr makeFlatDesign();

/// \brief A fixed NSPLIT for cuda-sm120 on a bucket: minimises a small cost model of the split
/// kernel (waves of 64-row x 32-key tiles over \p sm_count SMs, one CTA per SM) plus the combine
/// traffic of the partials. Depends on the bounds only, so a graph captured with it stays valid
/// for every step of the bucket.
int suggestNsplit(PlanBounds const &bounds, int sm_count, bool partial_bf16 = false);
} // namespace canopy::cuda
