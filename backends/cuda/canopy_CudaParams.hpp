/// \file canopy_CudaParams.hpp
/// \brief BatchRef + plan bounds -> the kernels' POD params, and the split-workspace layout: the one
/// place where host types meet canopy::cuda::VerifyParams (used by the designs and the Kokkos::Cuda
/// specialisation alike).
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_Design.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <cstddef>
#include <cstdint>

namespace canopy::cuda
{
/// \brief Params over \p batch's (device) buffers with grid bounds from \p bounds. Workspace unset.
inline VerifyParams makeVerifyParams(BatchRef const &batch, PlanBounds const &bounds, int nsplit)
{
  VerifyParams p;
  p.batch = batch;
  p.max_batch = bounds.max_batch;
  p.max_tree = bounds.max_tree;
  p.max_nodes = bounds.max_nodes;
  p.nsplit = nsplit;
  return p;
}

/// \brief Points \p p's partials into \p base (verifyWorkspaceBytes(rows, nsplit, bf16) bytes):
/// O partials first, then the lse array at a PARTIAL_LSE_ALIGN-byte boundary.
inline void bindWorkspace(VerifyParams &p, void *base, int64_t rows, bool partial_bf16)
{
  size_t const r = static_cast<size_t>(rows > 0 ? rows : 0) * static_cast<size_t>(p.nsplit);
  size_t const o_bytes =
      (r * partialRowBytes(partial_bf16) + PARTIAL_LSE_ALIGN - 1) / PARTIAL_LSE_ALIGN * PARTIAL_LSE_ALIGN;
  p.partial_o = base;
  p.partial_lse = base ? reinterpret_cast<float *>(static_cast<char *>(base) + o_bytes) : nullptr;
  p.partial_rows = base ? rows : 0;
  p.partial_bf16 = partial_bf16;
}
} // namespace canopy::cuda
