/// \file canopy_MemoryEstimate.hpp
/// \brief What a generated problem takes in host memory, known from its shape before anything is
/// allocated, and what this machine has: a shape that cannot fit is refused by name, not met with a
/// bare std::bad_alloc gigabytes into the work.
#pragma once

#include "canopy_Types.hpp"

#include <cstdint>

namespace canopy
{
/// \brief Host bytes held at once while one problem of \p batch requests of \p tree nodes and \p prefix
/// prefix tokens (maxima when ragged), \p heads query heads and a pool of \p pool_slack times the
/// slots it needs is checked: q and the pool (bf16), slot indices and the mask, the fp64 reference
/// output and a design's output. A lower bound: designs' workspaces come on top. In double, so no
/// shape overflows it.
inline double problemHostBytes(double batch, double heads, double tree, double prefix, double pool_slack = 1.5)
{
  double const nodes = batch * tree;
  double const slots = (batch * (prefix + tree)) * pool_slack;
  double const q = nodes * heads * D_QK * 2;
  double const pool = slots * D_QK * 2;
  double const indices = batch * prefix * 8 + nodes * 8;
  double const mask = nodes * tree;  // the full layout: one byte per (node, tree key) at most
  double const outputs = nodes * heads * D_V * (8 + 2);
  return q + pool + indices + mask + outputs;
}

/// \brief Bytes this process may allocate: the machine's physical memory, less where an address-space
/// limit (ulimit -v) is lower.
uint64_t hostMemoryBytes();
} // namespace canopy
