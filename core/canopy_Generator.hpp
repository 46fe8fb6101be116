/// \file canopy_Generator.hpp
/// \brief Seeded random verify problems: DDTree-like trees, fragmented KV slots, random bf16 values.
#pragma once

#include "canopy_Problem.hpp"

#include <cstdint>
#include <vector>

namespace canopy
{
struct GeneratorOptions
{
  int batch = 1;             ///< requests with work
  int num_heads = 8;
  int tree_size = 33;        ///< T (max T when ragged)
  int64_t prefix_len = 1024; ///< P (max P when ragged)
  bool ragged = false;       ///< draw T in [1, tree_size] and P in [0, prefix_len] per request
  /// When not empty, request b's T is tree_sizes[b % size] (P as above): a batch whose requests have
  /// chosen row-tile counts. Entries must be >= 0.
  std::vector<int> tree_sizes;
  int padded_rows = 0;       ///< empty rows appended (graph bucket padding)
  MaskLayout mask_layout = MaskLayout::kFull;
  double pool_slack = 1.5;   ///< pool rows / rows needed; > 1 leaves holes, so slots fragment
  double mean_run = 16.0;    ///< mean length of runs of consecutive slots (fragmentation)
  uint64_t seed = 1;
  bool with_values = true;   ///< false: metadata only (q and the pool left empty), for sizing
  ValueMode values = ValueMode::kRandom;  ///< kTreeDominant: the tree keys carry the attention
  /// The pool as a serving stack stores it: the bf16 values are drawn, then quantised (quantisePool).
  KvDtype kv_dtype = KvDtype::kBf16;
  float kv_scale = 1.0f;  ///< fp8-e4m3 / fp8-e5m2: SGLang's per-tensor k_scale
};

/// \brief A DDTree-like draft tree of \p size nodes: a spine (the drafter's top-1 path) with side
/// branches hanging off it, nodes in creation order so parent[i] < i.
std::vector<int32_t> makeDraftTree(int size, uint64_t seed);

/// \brief A whole problem (metadata + values), deterministic for the options.
HostProblem generateProblem(GeneratorOptions const &opt);
} // namespace canopy
