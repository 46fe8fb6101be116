/// \file canopy_CostModel.hpp
/// \brief FLOPs and minimum bytes of a verify batch (docs/design.md §1), and the roofline bound.
#pragma once

#include "canopy_KvDtype.hpp"
#include "canopy_Problem.hpp"

#include <algorithm>
#include <cmath>

namespace canopy
{
struct Cost
{
  double flops = 0;      ///< sum_b 2 H T_b (P_b + T_b) (576 + 512): tree part counted dense
  double bytes_min = 0;  ///< what the semantics make any kernel read or write once (see costOf)
  /// The KV pool bytes of bytes_min: each request's P + T rows once, at kvRowBytes of the pool's
  /// dtype (1152 B bf16, 576 B fp8-e4m3 / fp8-e5m2, 656 B block-scaled).
  double kv_bytes = 0;
  /// KV bytes a design with 64-row tiles over (node, head) rows gathers into shared memory: each
  /// row tile of a request reads all of its P + T rows (kvRowBytes each), sum_b ceil(T_b H / 64)
  /// (P_b + T_b) kvRowBytes. Not a minimum: the traffic of the tile designs (cuda-sm90,
  /// cuda-sm120), which the copy ceiling of `canopy peaks` bounds.
  double tile_copy_bytes = 0;
  double intensity() const { return bytes_min > 0 ? flops / bytes_min : 0; }
};

/// \brief FLOPs and minimum traffic of a batch whose pool is stored as \p kv_dtype. The minimum counts
/// what the semantics require, each once: every visible KV row (kvRowBytes: 1152 B in bf16, 576 B
/// in one-scale FP8; V is its first 512 columns, the same bytes) and its 8-byte
/// slot index, q read and out written (1152 + 1024 B per node and head), and the tree's visibility:
/// the T x T tree columns of the mask for the full and tree layouts (the prefix columns of a full
/// mask are 1 by definition, and no kernel needs to read them), 4 B of parent per node for the
/// parents layout. Offsets (indptr arrays) are left out: a few bytes per request.
inline Cost costOf(BatchMetadata const &m, int num_heads, KvDtype kv_dtype = KvDtype::kBf16)
{
  constexpr double TILE_ROWS = 64;  // Cost::tile_copy_bytes' row tile
  double const row_bytes = kvRowBytes(kv_dtype);
  Cost c;
  for (int b = 0; b < m.batchSize(); ++b)
  {
    double const P = static_cast<double>(m.prefixLen(b)), T = static_cast<double>(m.treeSize(b));
    c.flops += 2.0 * num_heads * T * (P + T) * (D_QK + D_V);
    if (T == 0)
      continue;
    c.kv_bytes += (P + T) * row_bytes;                     // each KV row once (K and V share it)
    c.bytes_min += (P + T) * (row_bytes + 8.0);            // ... + its slot
    c.bytes_min += T * num_heads * (D_QK + D_V) * 2.0;   // q read + out written
    c.bytes_min += m.mask_layout == MaskLayout::kParents ? 4.0 * T : T * T;  // the tree's visibility
    c.tile_copy_bytes += std::ceil(T * num_heads / TILE_ROWS) * (P + T) * row_bytes;
  }
  return c;
}

/// \brief Lower bound on time (seconds) given measured peaks (FLOP/s and bytes/s).
inline double rooflineSeconds(Cost const &c, double peak_flops, double peak_bytes_per_s)
{
  return std::max(c.flops / peak_flops, c.bytes_min / peak_bytes_per_s);
}

/// \brief The bound of a 64-row tile design: its FLOPs at \p peak_flops, or its gathered KV bytes
/// (tile_copy_bytes) at the rate \p tile_copy_bytes_per_s at which the SMs fill shared memory with
/// gathered rows (the copy ceiling), whichever is longer.
inline double copyRooflineSeconds(Cost const &c, double peak_flops, double tile_copy_bytes_per_s)
{
  return std::max(c.flops / peak_flops, c.tile_copy_bytes / tile_copy_bytes_per_s);
}
} // namespace canopy
