/// \file canopy_CudaDesigns.hpp
/// \brief The hand-written CUDA designs (`cuda-sm120`, `cuda-sm120-w32`, `cuda-sm90`, `cuda-flat`) as Design objects, for callers
/// that need the CUDA-specific knobs (partial dtype) beyond the registry's names.
#pragma once

#include "canopy_Design.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

namespace canopy::cuda
{
/// \brief cuda-sm120 with fp32 (default) or bf16 split partials. Same as makeDesign("cuda-sm120")
/// when \p partial_bf16 is false.
DesignPtr makeSm120Design(bool partial_bf16 = false);
/// \brief cuda-sm120-w32: the 32-rows-per-warp tile, same options as cuda-sm120.
DesignPtr makeSm120WideDesign(bool partial_bf16 = false);
/// \brief cuda-sm90: the Hopper wgmma tile (sm_90 GPUs only; plan reports Unsupported elsewhere).
DesignPtr makeSm90Design(bool partial_bf16 = false);
/// \brief cuda-sm90-sync: cuda-sm90 without the producer warpgroup (experimental; sm_90 GPUs only).
DesignPtr makeSm90SyncDesign(bool partial_bf16 = false);
/// \brief cuda-sm90-c2: cuda-sm90 in CTA pairs sharing each gathered KV tile (experimental; sm_90 only).
DesignPtr makeSm90PairDesign();
/// \brief cuda-flat (never splits, so it has no partials).
DesignPtr makeFlatDesign();

/// \brief The unit a split design's NSPLIT heuristic counts in: one CTA's tile of (node, head) rows
/// x keys and its time on one SM.
struct SplitTile
{
  int rows;
  int keys;
  double seconds;
};
/// 64 rows x 32 keys x 1088 columns: ~2 us on an H200 SM at the mma.sync rate.
inline constexpr SplitTile SM120_SPLIT_TILE{SM120_M_TILE, SM120_N_TILE, 2e-6};
/// 64 rows x 64 keys x 1088 columns (8.9 MFLOP): ~2.4 us on an H200 SM at 3.7 TFLOP/s per SM
/// (~60% of the wgmma rate; docs/results/cuda-sm90.md). The producer schedule takes ~1.9 us; the
/// split counts measured for it in that page come from this figure.
inline constexpr SplitTile SM90_SPLIT_TILE{SM90_M_TILE, SM90_N_TILE, 2.4e-6};

/// \brief The hand-written tile kernel that the Kokkos::Cuda specialisation of `kokkos-team`
/// reaches: the one built for the device's architecture.
struct SpecialisedTile
{
  char const *design;  ///< "cuda-sm90" or "cuda-sm120"
  cudaError_t (*launch)(VerifyParams const &, cudaStream_t);
  cudaError_t (*prepare)();  ///< raises its shared-memory limit (plan, outside capture)
  SplitTile tile;            ///< what its NSPLIT heuristic counts in
};
/// \brief cuda-sm90 on an sm_90 device (its cubin is sm_90a only), cuda-sm120 on every other.
/// Reads the current device's compute capability (an attribute query: no sync, capture-safe).
SpecialisedTile specialisedTile();

/// \brief A fixed NSPLIT for a split design on a bucket: minimises a small cost model of the split
/// kernel (waves of \p tile over \p sm_count SMs, one CTA per SM) plus the combine traffic of the
/// partials. Depends on the bounds only, so a graph captured with it stays valid for every step
/// of the bucket.
int suggestNsplit(PlanBounds const &bounds, int sm_count, bool partial_bf16 = false,
                  SplitTile const &tile = SM120_SPLIT_TILE);
} // namespace canopy::cuda
