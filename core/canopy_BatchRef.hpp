/// \file canopy_BatchRef.hpp
/// \brief POD view of one verify batch's native buffers (raw pointers, no Kokkos): what every
/// design's run() receives and what the CUDA launchers see. Host or device memory, per design.
#pragma once

#include "canopy_Types.hpp"

#include <cstdint>

namespace canopy
{
struct BatchRef
{
  int batch_size = 0;      ///< B rows, padded rows included (a padded row has P = T = 0)
  int num_heads = 0;       ///< H
  int64_t num_nodes = 0;   ///< rows of q/out in use (sum T); buffers may hold more (bucket capacity)
  int64_t num_slots = 0;   ///< rows of kv_pool
  float sm_scale = 0.f;
  MaskLayout mask_layout = MaskLayout::kFull;

  int32_t const *kv_indptr = nullptr;      ///< [B+1]
  int64_t const *kv_indices = nullptr;     ///< [sum P]
  int64_t const *qo_indptr = nullptr;      ///< [B+1]
  int64_t const *out_cache_loc = nullptr;  ///< [sum T]
  uint8_t const *custom_mask = nullptr;    ///< full/tree layouts
  int64_t const *mask_indptr = nullptr;    ///< [B+1]
  int32_t const *tree_parent = nullptr;    ///< [sum T], parents layout
  uint16_t const *q = nullptr;             ///< bf16 [sum T][H][576]
  uint16_t const *kv_pool = nullptr;       ///< bf16 [num_slots][576]; V = first 512 columns
  uint16_t *out = nullptr;                 ///< bf16 [sum T][H][512]
};
} // namespace canopy
