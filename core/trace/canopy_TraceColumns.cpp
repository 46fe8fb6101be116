/// \file canopy_TraceColumns.cpp
/// \brief Conversions between the columnar trace form, per-request specs and SGLang-native metadata.
#include "canopy_Error.hpp"
#include "canopy_Trace.hpp"
#include "canopy_Tree.hpp"

#include <climits>
#include <ctime>

namespace canopy
{
TraceColumns toColumns(TraceContent const &content)
{
  TraceColumns c;
  c.source = content.source;
  c.created = content.created;
  c.shape = content.shape;
  c.kv_dtype = content.kv_dtype;
  c.kv_scale = content.kv_scale;
  c.num_slots = content.num_slots;
  bool any_accepted = false;
  for (auto const &step : content.steps)
    for (auto const &req : step.requests)
      any_accepted = any_accepted || req.accepted != 0;
  for (auto const &step : content.steps)
  {
    for (auto const &req : step.requests)
    {
      RequestSpec const &r = req.spec;
      if (r.parent.size() != r.tree_slots.size())
        throw InputError("trace content: request id " + std::to_string(req.request_id) + " has " +
                         std::to_string(r.parent.size()) + " parents but " + std::to_string(r.tree_slots.size()) +
                         " tree slots");
      if (r.prefix_slots.size() > static_cast<size_t>(INT32_MAX))
        throw InputError("trace content: request id " + std::to_string(req.request_id) + " has a prefix longer than int32");
      c.request_id.push_back(req.request_id);
      c.prefix_len.push_back(static_cast<int32_t>(r.prefix_slots.size()));
      c.kv_indices.insert(c.kv_indices.end(), r.prefix_slots.begin(), r.prefix_slots.end());
      c.kv_offset.push_back(static_cast<int64_t>(c.kv_indices.size()));
      c.parent.insert(c.parent.end(), r.parent.begin(), r.parent.end());
      c.out_cache_loc.insert(c.out_cache_loc.end(), r.tree_slots.begin(), r.tree_slots.end());
      c.tree_offset.push_back(static_cast<int64_t>(c.parent.size()));
      if (any_accepted)
        c.accepted.push_back(req.accepted);  // a 0 among recorded values is rejected by validation
    }
    c.endStep();
  }
  c.has_values = !content.q.empty() || !content.kv.empty() || !content.out.empty() || !content.kv_fp8.empty();
  c.q = content.q;
  c.kv = content.kv;
  c.out = content.out;
  c.kv_fp8 = content.kv_fp8;
  return c;
}

std::vector<TraceRequest> stepRequests(TraceColumns const &c, int64_t s)
{
  if (s < 0 || s >= c.numSteps())
    throw InputError("trace: step " + std::to_string(s) + " out of range [0, " + std::to_string(c.numSteps()) + ")");
  std::vector<TraceRequest> out;
  for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
  {
    TraceRequest t;
    t.request_id = c.request_id[r];
    t.accepted = c.accepted.empty() ? 0 : c.accepted[r];
    t.spec.prefix_slots.assign(c.kv_indices.begin() + c.kv_offset[r], c.kv_indices.begin() + c.kv_offset[r + 1]);
    t.spec.parent.assign(c.parent.begin() + c.tree_offset[r], c.parent.begin() + c.tree_offset[r + 1]);
    t.spec.tree_slots.assign(c.out_cache_loc.begin() + c.tree_offset[r], c.out_cache_loc.begin() + c.tree_offset[r + 1]);
    out.push_back(std::move(t));
  }
  return out;
}

void stepView(TraceColumns const &c, int64_t s, TraceStepView &v)
{
  int64_t const r0 = c.request_offset[s], r1 = c.request_offset[s + 1];
  int64_t const k0 = c.kv_offset[r0], n0 = c.tree_offset[r0];
  v.batch_size = static_cast<int>(r1 - r0);
  v.kv_indptr.resize(static_cast<size_t>(v.batch_size) + 1);
  v.qo_indptr.resize(static_cast<size_t>(v.batch_size) + 1);
  for (int64_t b = 0; b <= r1 - r0; ++b)
  {
    v.kv_indptr[static_cast<size_t>(b)] = static_cast<int32_t>(c.kv_offset[r0 + b] - k0);
    v.qo_indptr[static_cast<size_t>(b)] = c.tree_offset[r0 + b] - n0;
  }
  v.num_prefix_tokens = c.kv_offset[r1] - k0;
  v.num_nodes = c.tree_offset[r1] - n0;
  v.kv_indices = c.kv_indices.data() + k0;
  v.out_cache_loc = c.out_cache_loc.data() + n0;
  v.tree_parent = c.parent.data() + n0;
  v.request_id = c.request_id.data() + r0;
  v.accepted = c.accepted.empty() ? nullptr : c.accepted.data() + r0;
}

void stepMetadata(TraceColumns const &c, int64_t s, MaskLayout layout, BatchMetadata &m)
{
  if (s < 0 || s >= c.numSteps())
    throw InputError("trace: step " + std::to_string(s) + " out of range [0, " + std::to_string(c.numSteps()) + ")");
  int64_t const r0 = c.request_offset[s], r1 = c.request_offset[s + 1];
  int64_t const k0 = c.kv_offset[r0], n0 = c.tree_offset[r0];
  m.mask_layout = layout;
  m.custom_mask.clear();
  size_t const rows = static_cast<size_t>(r1 - r0);
  m.kv_indptr.resize(rows + 1);
  m.qo_indptr.resize(rows + 1);
  m.mask_indptr.resize(rows + 1);
  m.mask_indptr[0] = 0;
  for (size_t b = 0; b <= rows; ++b)
  {
    // Validation bounds a step's prefix tokens by INT32_MAX, so the narrowing is exact.
    m.kv_indptr[b] = static_cast<int32_t>(c.kv_offset[r0 + static_cast<int64_t>(b)] - k0);
    m.qo_indptr[b] = c.tree_offset[r0 + static_cast<int64_t>(b)] - n0;
  }
  m.kv_indices.assign(c.kv_indices.begin() + k0, c.kv_indices.begin() + c.kv_offset[r1]);
  m.out_cache_loc.assign(c.out_cache_loc.begin() + n0, c.out_cache_loc.begin() + c.tree_offset[r1]);
  m.tree_parent.assign(c.parent.begin() + n0, c.parent.begin() + c.tree_offset[r1]);
  if (layout != MaskLayout::kParents)
  {
    int64_t bytes = 0;
    for (size_t b = 0; b < rows; ++b)
      bytes += maskBytes(m.treeSize(static_cast<int>(b)), m.prefixLen(static_cast<int>(b)), layout);
    m.custom_mask.reserve(static_cast<size_t>(bytes));
  }
  std::vector<int32_t> tree;
  for (size_t b = 0; b < rows; ++b)
  {
    int const bi = static_cast<int>(b);
    if (layout != MaskLayout::kParents)
    {
      tree.assign(m.tree_parent.begin() + m.qo_indptr[b], m.tree_parent.begin() + m.qo_indptr[b + 1]);
      appendTreeMask(m.custom_mask, tree, m.prefixLen(bi), layout);
    }
    m.mask_indptr[b + 1] = m.mask_indptr[b] + maskBytes(m.treeSize(bi), m.prefixLen(bi), layout);
  }
}

BatchMetadata stepMetadata(TraceColumns const &c, int64_t s, MaskLayout layout)
{
  BatchMetadata m;
  stepMetadata(c, s, layout, m);
  return m;
}

std::string isoTimestampNow()
{
  std::time_t const now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}
} // namespace canopy
