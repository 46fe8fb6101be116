/// \file canopy_TraceValidate.cpp
/// \brief validateTraceColumns: every invariant of the format (v1 and v2), in one linear pass per dataset.
#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Rules.hpp"
#include "canopy_Trace.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

namespace canopy
{
namespace
{
// Bounds that keep every derived allocation and index in range (a pool of 2^40 rows would be
// 1.2 PB of KV): larger values are certainly corrupt, and rejecting them early avoids huge allocations.
constexpr int64_t MAX_NUM_SLOTS = int64_t{1} << 40;
constexpr int MAX_NUM_HEADS = 4096;

[[noreturn]] void fail(std::string const &dataset, std::string const &message)
{
  throw InputError(dataset + ": " + message);
}

std::string str(int64_t v) { return std::to_string(v); }

template <class T>
void checkLength(std::vector<T> const &v, int64_t expected, std::string const &dataset, std::string const &why)
{
  if (static_cast<int64_t>(v.size()) != expected)
    fail(dataset, "has " + str(static_cast<int64_t>(v.size())) + " entries, expected " + str(expected) + " (" + why + ")");
}

/// Offsets: entry 0 is 0, monotone, last entry = length of the data they index.
void checkOffsets(std::vector<int64_t> const &off, int64_t total, std::string const &dataset,
                  std::string const &data_name)
{
  if (off.empty())
    fail(dataset, "is empty (needs at least the leading 0)");
  for (size_t i = 0; i < off.size(); ++i)
  {
    std::string const problem = rules::offsetProblem(static_cast<int64_t>(i), off[i], i ? off[i - 1] : 0);
    if (!problem.empty())
      fail(dataset, problem);
  }
  if (off.back() != total)
    fail(dataset, "index " + str(static_cast<int64_t>(off.size()) - 1) + " (last) holds " + str(off.back()) +
                      ", but " + data_name + " has " + str(total) + " entries");
}

std::string where(std::vector<int64_t> const &step_of_row, int64_t row)
{
  return "step " + str(step_of_row[static_cast<size_t>(row)]) + ", request row " + str(row);
}

void checkFinite(std::vector<uint16_t> const &v, size_t begin, size_t end, std::string const &dataset, size_t row_len)
{
  for (size_t i = begin; i < end; ++i)
    if ((v[i] & 0x7f80u) == 0x7f80u)  // exponent all ones: Inf or NaN
      fail(dataset, "element " + str(static_cast<int64_t>(i)) + " (row " + str(static_cast<int64_t>(i / row_len)) +
                        ", column " + str(static_cast<int64_t>(i % row_len)) + ") is " +
                        ((v[i] & 0x7fu) ? "NaN" : "Inf") + "; recorded values must be finite");
}
} // namespace

void validateTraceColumns(TraceColumns const &c)
{
  // Attributes.
  if (c.shape.num_heads <= 0 || c.shape.num_heads > MAX_NUM_HEADS)
    fail("/model", "attribute num_heads is " + str(c.shape.num_heads) + ", must be in [1, " + str(MAX_NUM_HEADS) + "]");
  if (!std::isfinite(c.shape.sm_scale) || c.shape.sm_scale <= 0)
    fail("/model", "attribute sm_scale is " + std::to_string(c.shape.sm_scale) + ", must be finite and > 0");
  if (c.num_slots < 0 || c.num_slots > MAX_NUM_SLOTS)
    fail("/pool", "attribute num_slots is " + str(c.num_slots) + ", must be in [0, 2^40]");
  if (kvDtypeHasScale(c.kv_dtype) && !(std::isfinite(c.kv_scale) && c.kv_scale > 0))
    fail("/model", "attribute kv_scale is " + std::to_string(c.kv_scale) + ", must be finite and > 0");
  if (!kvDtypeHasScale(c.kv_dtype) && c.kv_scale != 1.f)
    fail("/model", "attribute kv_scale is " + std::to_string(c.kv_scale) + ", but a " + toString(c.kv_dtype) +
                       " pool has no per-tensor scale");

  // Lengths and offsets.
  int64_t const R = c.numRows();
  int64_t const N = c.numNodes();
  int64_t const K = static_cast<int64_t>(c.kv_indices.size());
  checkOffsets(c.request_offset, R, "/steps/request_offset", "/requests/request_id");
  checkLength(c.prefix_len, R, "/requests/prefix_len", "one per request row, as /requests/request_id");
  checkLength(c.tree_offset, R + 1, "/requests/tree_offset", "request rows + 1");
  checkLength(c.kv_offset, R + 1, "/requests/kv_offset", "request rows + 1");
  if (!c.accepted.empty())
    checkLength(c.accepted, R, "/requests/accepted", "one per request row, as /requests/request_id");
  checkOffsets(c.tree_offset, N, "/requests/tree_offset", "/tree/parent");
  checkLength(c.out_cache_loc, N, "/tree/out_cache_loc", "one per tree node, as /tree/parent");
  checkOffsets(c.kv_offset, K, "/requests/kv_offset", "/tokens/kv_indices");

  int64_t const S = c.numSteps();
  std::vector<int64_t> step_of_row(static_cast<size_t>(R));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
      step_of_row[static_cast<size_t>(r)] = s;

  for (int64_t r = 0; r < R; ++r)
  {
    if (c.prefix_len[r] < 0)
      fail("/requests/prefix_len", "index " + str(r) + " (" + where(step_of_row, r) + ") is " + str(c.prefix_len[r]) +
                                       ", must be >= 0");
    int64_t const kv_len = c.kv_offset[r + 1] - c.kv_offset[r];
    if (kv_len != c.prefix_len[r])
      fail("/requests/kv_offset", "index " + str(r + 1) + " (" + where(step_of_row, r) + ") gives " + str(kv_len) +
                                      " prefix slots but /requests/prefix_len[" + str(r) + "] is " + str(c.prefix_len[r]));
    int64_t const t = c.tree_offset[r + 1] - c.tree_offset[r];
    if (t < 1)
      fail("/requests/tree_offset", "index " + str(r + 1) + " (" + where(step_of_row, r) +
                                        ") gives an empty tree; every request row has at least its root");
    if (t > INT32_MAX)
      fail("/requests/tree_offset", "index " + str(r + 1) + " (" + where(step_of_row, r) + ") gives " + str(t) +
                                        " nodes, more than an int32 parent can index");
    if (!c.accepted.empty() && (c.accepted[r] < 1 || c.accepted[r] > t))
      fail("/requests/accepted", "index " + str(r) + " (" + where(step_of_row, r) + ") is " + str(c.accepted[r]) +
                                     ", must be in [1, " + str(t) + "] (the tree size)");
  }
  for (int64_t s = 0; s < S; ++s)
  {
    // kv_indptr is int32 in SGLang's buffers: a step's prefix tokens must fit it.
    int64_t const tokens = c.kv_offset[c.request_offset[s + 1]] - c.kv_offset[c.request_offset[s]];
    if (tokens > INT32_MAX)
      fail("/requests/kv_offset", "step " + str(s) + " (rows from " + str(c.request_offset[s]) + ") holds " + str(tokens) +
                                      " prefix tokens, more than kv_indptr (int32) can index");
  }

  // Trees.
  for (int64_t r = 0; r < R; ++r)
  {
    int64_t const base = c.tree_offset[r];
    int64_t const t = c.tree_offset[r + 1] - base;
    for (int64_t i = 0; i < t; ++i)
    {
      std::string const problem = rules::parentProblem(i, c.parent[base + i]);
      if (!problem.empty())
        fail("/tree/parent", "index " + str(base + i) + " (" + where(step_of_row, r) + "): " + problem);
    }
  }

  // Slots: in range, tree slots of a step distinct and not in any prefix of the step (a serving stack
  // writes each node's K/V to a freshly allocated slot), no slot twice in one request's prefix
  // (prefixes of different requests may share slots: radix-cache prefix sharing).
  int64_t max_slot = -1;
  for (int64_t k = 0; k < K; ++k)
  {
    int64_t const slot = c.kv_indices[k];
    std::string const problem = rules::slotProblem(slot, c.num_slots);
    if (!problem.empty())
      fail("/tokens/kv_indices", "index " + str(k) + " " + problem + " of /pool num_slots");
    max_slot = std::max(max_slot, slot);
  }
  for (int64_t n = 0; n < N; ++n)
  {
    int64_t const slot = c.out_cache_loc[n];
    std::string const problem = rules::slotProblem(slot, c.num_slots);
    if (!problem.empty())
      fail("/tree/out_cache_loc", "index " + str(n) + " " + problem + " of /pool num_slots");
    max_slot = std::max(max_slot, slot);
  }
  {
    // Stamps instead of sets: one pass, one array over the slots in use. Indexed by the slot itself
    // when the slots are dense; by its rank among the distinct slots when they are sparse, so that a
    // small file naming slot 2^35 does not make the validator allocate for 2^35 slots.
    std::vector<int64_t> sparse;
    if (max_slot + 1 > 4 * (K + N) + (int64_t{1} << 20))
    {
      sparse.reserve(static_cast<size_t>(K + N));
      sparse.insert(sparse.end(), c.kv_indices.begin(), c.kv_indices.end());
      sparse.insert(sparse.end(), c.out_cache_loc.begin(), c.out_cache_loc.end());
      std::sort(sparse.begin(), sparse.end());
      sparse.erase(std::unique(sparse.begin(), sparse.end()), sparse.end());
    }
    auto at = [&](int64_t slot) {
      return sparse.empty() ? static_cast<size_t>(slot)
                            : static_cast<size_t>(std::lower_bound(sparse.begin(), sparse.end(), slot) - sparse.begin());
    };
    size_t const used = sparse.empty() ? static_cast<size_t>(max_slot + 1) : sparse.size();
    std::vector<uint32_t> row_stamp(used, 0), step_stamp(used, 0);
    for (int64_t s = 0; s < S; ++s)
    {
      uint32_t const step_mark = static_cast<uint32_t>(s + 1);
      for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
        for (int64_t n = c.tree_offset[r]; n < c.tree_offset[r + 1]; ++n)
        {
          auto &m = step_stamp[at(c.out_cache_loc[n])];
          if (m == step_mark)
            fail("/tree/out_cache_loc", "index " + str(n) + " (" + where(step_of_row, r) + ", node " +
                                            str(n - c.tree_offset[r]) + ") holds slot " + str(c.out_cache_loc[n]) +
                                            ", already used by another tree node of step " + str(s));
          m = step_mark;
        }
      for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
      {
        uint32_t const row_mark = static_cast<uint32_t>(r + 1);
        for (int64_t k = c.kv_offset[r]; k < c.kv_offset[r + 1]; ++k)
        {
          size_t const slot = at(c.kv_indices[k]);
          if (step_stamp[slot] == step_mark)
            fail("/tokens/kv_indices", "index " + str(k) + " (" + where(step_of_row, r) + ", prefix token " +
                                           str(k - c.kv_offset[r]) + ") holds slot " + str(c.kv_indices[k]) +
                                           ", which is also a tree node's slot (/tree/out_cache_loc) in step " + str(s));
          if (row_stamp[slot] == row_mark)
            fail("/tokens/kv_indices", "index " + str(k) + " (" + where(step_of_row, r) + ", prefix token " +
                                           str(k - c.kv_offset[r]) + ") holds slot " + str(c.kv_indices[k]) +
                                           ", already earlier in the same prefix");
          row_stamp[slot] = row_mark;
        }
      }
    }
  }

  // Request ids: unique within a step (ids are stable across steps).
  {
    std::vector<std::pair<int64_t, int64_t>> ids;
    for (int64_t s = 0; s < S; ++s)
    {
      ids.clear();
      for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
        ids.emplace_back(c.request_id[r], r);
      std::sort(ids.begin(), ids.end());
      for (size_t i = 1; i < ids.size(); ++i)
        if (ids[i].first == ids[i - 1].first)
        {
          int64_t const later = std::max(ids[i].second, ids[i - 1].second);
          fail("/requests/request_id", "index " + str(later) + " (step " + str(s) + ") repeats id " + str(ids[i].first) +
                                           " of index " + str(std::min(ids[i].second, ids[i - 1].second)) +
                                           "; a request appears at most once per step");
        }
    }
  }

  // Values.
  if (!c.has_values)
  {
    if (!c.q.empty() || !c.kv.empty() || !c.out.empty() || !c.kv_fp8.empty())
      fail("/values", "q, kv or out given without has_values");
    return;
  }
  int64_t const H = c.shape.num_heads;
  bool const fp8 = c.kv_dtype != KvDtype::kBf16;
  int64_t const row_bytes = kvRowBytes(c.kv_dtype);
  checkLength(c.q, N * H * D_QK, "/values/q", "[N][num_heads][576]");
  if (fp8)
  {
    checkLength(c.kv, 0, "/values/kv", "an " + toString(c.kv_dtype) + " pool is held as row bytes, not bf16");
    checkLength(c.kv_fp8, c.num_slots * row_bytes, "/values/kv",
                "[num_slots][" + str(row_bytes) + "] bytes of " + toString(c.kv_dtype) + " rows");
  }
  else
  {
    checkLength(c.kv_fp8, 0, "/values/kv", "a bf16 pool is held as bf16 bits, not bytes");
    checkLength(c.kv, c.num_slots * D_QK, "/values/kv", "[num_slots][576]");
  }
  if (!c.out.empty())
    checkLength(c.out, N * H * D_V, "/values/out", "[N][num_heads][512]");
  checkFinite(c.q, 0, c.q.size(), "/values/q", D_QK);
  // Only rows some step reads must be finite: a recorded pool's unused rows hold whatever was there.
  std::vector<uint8_t> used(static_cast<size_t>(c.num_slots), 0);
  for (int64_t slot : c.kv_indices)
    used[static_cast<size_t>(slot)] = 1;
  for (int64_t slot : c.out_cache_loc)
    used[static_cast<size_t>(slot)] = 1;
  for (size_t slot = 0; slot < used.size(); ++slot)
  {
    if (!used[slot])
      continue;
    if (!fp8)
    {
      checkFinite(c.kv, slot * D_QK, (slot + 1) * D_QK, "/values/kv", D_QK);
      continue;
    }
    std::string const problem = fp8RowProblem(c.kv_dtype, c.kv_fp8.data() + slot * static_cast<size_t>(row_bytes));
    if (!problem.empty())
      fail("/values/kv", "row " + str(static_cast<int64_t>(slot)) + " (a slot some step reads), " + problem +
                             "; recorded values must be finite");
  }
  // After the inputs: an unreadable pool row is the cause when the expected output is NaN too.
  checkFinite(c.out, 0, c.out.size(), "/values/out", D_V);
}
} // namespace canopy
