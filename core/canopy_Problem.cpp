#include "canopy_Problem.hpp"

#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Random.hpp"
#include "canopy_Rules.hpp"
#include "canopy_Tree.hpp"

#include <algorithm>
#include <cmath>

namespace canopy
{
int64_t BatchMetadata::maxTreeSize() const
{
  int64_t m = 0;
  for (int b = 0; b < batchSize(); ++b)
    m = std::max(m, treeSize(b));
  return m;
}

int64_t BatchMetadata::maxPrefixLen() const
{
  int64_t m = 0;
  for (int b = 0; b < batchSize(); ++b)
    m = std::max(m, prefixLen(b));
  return m;
}

BatchMetadata buildMetadata(std::vector<RequestSpec> const &requests, MaskLayout layout)
{
  BatchMetadata meta;
  meta.mask_layout = layout;
  for (size_t b = 0; b < requests.size(); ++b)
  {
    RequestSpec const &r = requests[b];
    std::string const what = "request " + std::to_string(b);
    if (r.parent.size() != r.tree_slots.size())
      throw InputError(what + ": " + std::to_string(r.parent.size()) + " parents but " +
                       std::to_string(r.tree_slots.size()) + " tree slots");
    validateTree(r.parent, what + " tree");
    int64_t const p = static_cast<int64_t>(r.prefix_slots.size());
    int64_t const t = static_cast<int64_t>(r.parent.size());
    if (meta.kv_indptr.back() + p > INT32_MAX)
      throw InputError(what + ": total prefix length overflows kv_indptr (int32)");
    meta.kv_indices.insert(meta.kv_indices.end(), r.prefix_slots.begin(), r.prefix_slots.end());
    meta.kv_indptr.push_back(static_cast<int32_t>(meta.kv_indptr.back() + p));
    meta.out_cache_loc.insert(meta.out_cache_loc.end(), r.tree_slots.begin(), r.tree_slots.end());
    meta.tree_parent.insert(meta.tree_parent.end(), r.parent.begin(), r.parent.end());
    meta.qo_indptr.push_back(meta.qo_indptr.back() + t);
    appendTreeMask(meta.custom_mask, r.parent, p, layout);
    meta.mask_indptr.push_back(meta.mask_indptr.back() + maskBytes(t, p, layout));
  }
  return meta;
}

void padBatch(BatchMetadata &meta, int padded_batch)
{
  if (padded_batch < meta.batchSize())
    throw InputError("padBatch: bucket " + std::to_string(padded_batch) + " is smaller than the batch (" +
                     std::to_string(meta.batchSize()) + ")");
  while (meta.batchSize() < padded_batch)
  {
    meta.kv_indptr.push_back(meta.kv_indptr.back());
    meta.qo_indptr.push_back(meta.qo_indptr.back());
    meta.mask_indptr.push_back(meta.mask_indptr.back());
  }
}

namespace
{
template <class T>
void checkOffsets(std::vector<T> const &off, size_t expected_size, int64_t total, std::string const &name)
{
  if (off.size() != expected_size)
    throw InputError(name + ": has " + std::to_string(off.size()) + " entries, expected " + std::to_string(expected_size));
  if (off.empty())
    throw InputError(name + ": is empty (needs at least the leading 0)");
  for (size_t i = 0; i < off.size(); ++i)
  {
    std::string const problem =
        rules::offsetProblem(static_cast<int64_t>(i), off[i], i ? static_cast<int64_t>(off[i - 1]) : 0);
    if (!problem.empty())
      throw InputError(name + ": " + problem);
  }
  if (static_cast<int64_t>(off.back()) != total)
    throw InputError(name + ": last entry " + std::to_string(off.back()) + " does not match the buffer length " +
                     std::to_string(total));
}
} // namespace

void validateMetadata(BatchMetadata const &meta, int64_t num_slots)
{
  size_t const rows = meta.qo_indptr.size();
  if (rows < 1)
    throw InputError("qo_indptr: empty");
  checkOffsets(meta.qo_indptr, rows, static_cast<int64_t>(meta.out_cache_loc.size()), "qo_indptr");
  checkOffsets(meta.kv_indptr, rows, static_cast<int64_t>(meta.kv_indices.size()), "kv_indptr");
  checkOffsets(meta.mask_indptr, rows, static_cast<int64_t>(meta.custom_mask.size()), "mask_indptr");
  if (meta.tree_parent.size() != meta.out_cache_loc.size())
    throw InputError("tree_parent: has " + std::to_string(meta.tree_parent.size()) + " entries, expected " +
                     std::to_string(meta.out_cache_loc.size()));
  auto slots = [&](std::vector<int64_t> const &v, char const *name) {
    for (size_t i = 0; i < v.size(); ++i)
    {
      std::string const problem = rules::slotProblem(v[i], num_slots);
      if (!problem.empty())
        throw InputError(std::string(name) + ": index " + std::to_string(i) + " " + problem);
    }
  };
  slots(meta.kv_indices, "kv_indices");
  slots(meta.out_cache_loc, "out_cache_loc");
  for (int b = 0; b < meta.batchSize(); ++b)
  {
    int64_t const t = meta.treeSize(b);
    validateTree(meta.tree_parent.data() + meta.qo_indptr[b], t, "tree_parent of request " + std::to_string(b));
    int64_t const want = maskBytes(t, meta.prefixLen(b), meta.mask_layout);
    if (meta.mask_indptr[b + 1] - meta.mask_indptr[b] != want)
      throw InputError("mask_indptr: request " + std::to_string(b) + " has " +
                       std::to_string(meta.mask_indptr[b + 1] - meta.mask_indptr[b]) + " mask bytes, layout '" +
                       toString(meta.mask_layout) + "' needs " + std::to_string(want));
    // A node sees itself (docs/design.md §1): a mask row whose own bit is 0 is not a tree's mask, and
    // with no prefix it would leave the node no key at all (its softmax 0/0).
    if (meta.mask_layout == MaskLayout::kParents)
      continue;
    int64_t const row_len = meta.mask_layout == MaskLayout::kFull ? meta.prefixLen(b) + t : t;
    int64_t const col0 = meta.mask_layout == MaskLayout::kFull ? meta.prefixLen(b) : 0;
    for (int64_t i = 0; i < t; ++i)
    {
      int64_t const at = meta.mask_indptr[b] + i * row_len + col0 + i;
      if (meta.custom_mask[static_cast<size_t>(at)] == 0)
        throw InputError("custom_mask: index " + std::to_string(at) + " is 0: node " + std::to_string(i) +
                         " of request " + std::to_string(b) + " does not see itself");
    }
  }
}

void fillRandomValues(HostProblem &problem, uint64_t seed, float q_scale, float kv_scale)
{
  problem.q.resize(static_cast<size_t>(problem.meta.numNodes()) * problem.shape.num_heads * D_QK);
  problem.kv_pool.resize(static_cast<size_t>(problem.num_slots) * D_QK);
  SplitMix64 rng(seed);
  for (auto &x : problem.q)
    x = floatToBf16(q_scale * rng.uniformSigned());
  for (auto &x : problem.kv_pool)
    x = floatToBf16(kv_scale * rng.uniformSigned());
}

void makeTreeDominant(HostProblem &problem, uint64_t seed, double logit)
{
  SplitMix64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  double const unit = 1.0 / std::sqrt(static_cast<double>(D_QK));
  std::vector<double> u(D_QK);
  for (auto &x : u)
    x = rng.uniformSigned() < 0 ? -unit : unit;
  double const a = std::sqrt(logit / problem.shape.sm_scale);
  auto shift = [&](uint16_t *row) {
    for (int d = 0; d < D_QK; ++d)
      row[d] = floatToBf16(static_cast<float>(bf16ToFloat(row[d]) + a * u[d]));
  };
  for (size_t r = 0; r < problem.q.size() / D_QK; ++r)
    shift(problem.q.data() + r * D_QK);
  // Each tree slot once, even if two nodes shared one (malformed input is the validator's job).
  std::vector<int64_t> slots(problem.meta.out_cache_loc.begin(), problem.meta.out_cache_loc.end());
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  if (problem.kv_dtype == KvDtype::kBf16)
  {
    for (int64_t s : slots)
      if (s >= 0 && s < problem.num_slots)
        shift(problem.kv_pool.data() + s * D_QK);
    return;
  }
  // An FP8 pool: each tree row's values (rounded to bf16) are shifted and stored again as the pool
  // stores a row, with the same scale (a V3.2 row's block scales recomputed for its new values).
  BatchRef ref;
  ref.kv_dtype = problem.kv_dtype;
  ref.kv_pool_fp8 = problem.kv_pool_fp8.data();
  ref.kv_scale = problem.kv_scale;
  size_t const row_bytes = static_cast<size_t>(kvRowBytes(problem.kv_dtype));
  double values[D_QK];
  for (int64_t s : slots)
  {
    if (s < 0 || s >= problem.num_slots)
      continue;
    dequantiseRow(ref, s, values);
    HostProblem row;
    row.num_slots = 1;
    row.kv_pool.resize(D_QK);
    for (int d = 0; d < D_QK; ++d)
      row.kv_pool[d] = floatToBf16(static_cast<float>(values[d]));
    shift(row.kv_pool.data());
    quantisePool(row, problem.kv_dtype, problem.kv_scale);
    std::copy(row.kv_pool_fp8.begin(), row.kv_pool_fp8.end(),
              problem.kv_pool_fp8.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(s) * row_bytes));
  }
}
} // namespace canopy
