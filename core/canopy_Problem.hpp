/// \file canopy_Problem.hpp
/// \brief One verify step on the host: SGLang-native metadata (exact dtypes) plus activations.
#pragma once

#include "canopy_KvDtype.hpp"
#include "canopy_Types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief One request of a verify step, as a serving stack sees it.
struct RequestSpec
{
  std::vector<int64_t> prefix_slots;  ///< pool slot of each prefix token (P entries)
  std::vector<int32_t> parent;        ///< draft tree, parent[0] = -1, parent[i] < i (T entries)
  std::vector<int64_t> tree_slots;    ///< pool slot where each tree node's K/V was written (T entries)
};

/// \brief Metadata of one verify batch, exactly the buffers and dtypes SGLang's Triton backend
/// holds for target-verify (docs/design.md §1), plus Canopy's tree_parent (always filled: it is what the
/// `parents` layout reads and what the reference and the checks use).
struct BatchMetadata
{
  MaskLayout mask_layout = MaskLayout::kFull;
  std::vector<int32_t> kv_indptr{0};      ///< [B+1]
  std::vector<int64_t> kv_indices;        ///< [sum P]
  std::vector<int64_t> qo_indptr{0};      ///< [B+1]
  std::vector<int64_t> out_cache_loc;     ///< [sum T]
  std::vector<uint8_t> custom_mask;       ///< layout-dependent, empty for kParents
  std::vector<int64_t> mask_indptr{0};    ///< [B+1]
  std::vector<int32_t> tree_parent;       ///< [sum T], parent within the request, -1 for roots

  int batchSize() const { return static_cast<int>(qo_indptr.size()) - 1; }
  int64_t numNodes() const { return qo_indptr.back(); }
  int64_t prefixLen(int b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
  int64_t treeSize(int b) const { return qo_indptr[b + 1] - qo_indptr[b]; }
  int64_t maxTreeSize() const;
  int64_t maxPrefixLen() const;
};

/// \brief Builds the metadata of a batch from its requests; validates each tree (InputError names
/// the request and node).
BatchMetadata buildMetadata(std::vector<RequestSpec> const &requests, MaskLayout layout);

/// \brief Appends empty requests (P = 0, T = 0) up to \p padded_batch rows, as graph buckets do.
void padBatch(BatchMetadata &meta, int padded_batch);

/// \brief Checks every invariant of \p meta against a pool of \p num_slots rows (offsets monotone,
/// sizes consistent, slots in range, trees valid, mask sized for the layout). Throws InputError naming
/// the buffer and the first bad index.
void validateMetadata(BatchMetadata const &meta, int64_t num_slots);

/// \brief A complete verify problem on the host: metadata, the KV pool and the queries.
struct HostProblem
{
  ModelShape shape;
  int64_t num_slots = 0;
  BatchMetadata meta;
  std::vector<uint16_t> q;        ///< bf16 bits [sum T][H][576]
  std::vector<uint16_t> kv_pool;  ///< bf16 bits [num_slots][576]; empty for an FP8 pool
  KvDtype kv_dtype = KvDtype::kBf16;
  std::vector<uint8_t> kv_pool_fp8;  ///< FP8 pool: [num_slots][kvRowBytes(kv_dtype)] bytes
  float kv_scale = 1.f;              ///< fp8-e4m3 / fp8-e5m2: value = decode(byte) * kv_scale

  size_t outElements() const { return static_cast<size_t>(meta.numNodes()) * shape.num_heads * D_V; }
};

/// \brief Fills q and the KV pool with bf16 values drawn from a seeded generator (uniform in
/// [-scale, scale]); the same seed gives the same bits on every machine.
void fillRandomValues(HostProblem &problem, uint64_t seed, float q_scale = 1.0f, float kv_scale = 1.0f);

/// \brief How a check fills q and the KV pool.
enum class ValueMode
{
  kRandom,        ///< uniform random bf16: with a long prefix the tree keys carry little of the attention
  kTreeDominant,  ///< random, then makeTreeDominant: the visible tree keys carry most of it
};
template <>
struct EnumNames<ValueMode>
{
  static constexpr char const *kind = "value mode";
  static constexpr std::array<std::pair<ValueMode, char const *>, 2> table{
      {{ValueMode::kRandom, "random"}, {ValueMode::kTreeDominant, "tree-dominant"}}};
};
/// \brief "random" or "tree-dominant"; InputError naming \p what otherwise.
inline ValueMode parseValueMode(std::string const &name, std::string const &what = "value mode")
{
  return parseEnum<ValueMode>(name, what);
}

/// \brief Makes the tree part carry the attention, so that a check sees visibility bugs at any
/// prefix length: one seeded direction u (unit, 576 wide) is added, scaled by a, to every query row
/// and to the K row of every tree node (its out_cache_loc slot), with a^2 * sm_scale = \p logit.
/// Every visible tree key then scores about \p logit above a prefix key, and a node's output is
/// mostly the mean of its visible tree rows' V: getting one ancestor wrong moves it by O(|v| / T).
/// An FP8 pool's tree rows are shifted as values and stored again in the pool's dtype and scale.
void makeTreeDominant(HostProblem &problem, uint64_t seed, double logit = 12.0);
} // namespace canopy
