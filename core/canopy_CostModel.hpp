/// \file canopy_CostModel.hpp
/// \brief FLOPs and minimum bytes of a verify batch (docs/design.md §1), and the roofline bound.
#pragma once

#include "canopy_Problem.hpp"

#include <algorithm>

namespace canopy
{
struct Cost
{
  double flops = 0;      ///< sum_b 2 H T_b (P_b + T_b) (576 + 512): tree part counted dense
  double bytes_min = 0;  ///< KV rows once + q + out + mask bytes read
  double intensity() const { return bytes_min > 0 ? flops / bytes_min : 0; }
};

inline Cost costOf(BatchMetadata const &m, int num_heads)
{
  Cost c;
  for (int b = 0; b < m.batchSize(); ++b)
  {
    double const P = static_cast<double>(m.prefixLen(b)), T = static_cast<double>(m.treeSize(b));
    c.flops += 2.0 * num_heads * T * (P + T) * (D_QK + D_V);
    if (T == 0)
      continue;
    c.bytes_min += (P + T) * D_QK * 2.0;                 // each KV row once (K and V share it)
    c.bytes_min += T * num_heads * (D_QK + D_V) * 2.0;   // q read + out written
  }
  c.bytes_min += static_cast<double>(m.custom_mask.size());
  if (m.mask_layout == MaskLayout::kParents)
    c.bytes_min += 4.0 * static_cast<double>(m.tree_parent.size());
  return c;
}

/// \brief Lower bound on time (seconds) given measured peaks (FLOP/s and bytes/s).
inline double rooflineSeconds(Cost const &c, double peak_flops, double peak_bytes_per_s)
{
  return std::max(c.flops / peak_flops, c.bytes_min / peak_bytes_per_s);
}
} // namespace canopy
