/// \file canopy_TraceStats.cpp
/// \brief Trace statistics for `canopy trace info`.
#include "canopy_TraceStats.hpp"

#include "canopy_Statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <unordered_set>

namespace canopy
{
Distribution summarize(std::vector<int64_t> v)
{
  std::vector<double> x(v.begin(), v.end());
  Summary const s = summarize(std::move(x));
  Distribution d;
  d.count = static_cast<int64_t>(s.n);
  if (s.n == 0)
    return d;
  d.mean = s.mean;
  d.min = static_cast<int64_t>(s.min);
  d.p10 = s.p10;
  d.p50 = s.median;
  d.p90 = s.p90;
  d.max = static_cast<int64_t>(s.max);
  return d;
}

TraceStats computeTraceStats(TraceColumns const &c)
{
  TraceStats s;
  s.steps = c.numSteps();
  s.rows = c.numRows();
  s.nodes = c.numNodes();
  s.prefix_tokens = static_cast<int64_t>(c.kv_indices.size());
  std::vector<int64_t> batch, prefix, tree, depth, root_children, widest, step_tokens;
  int64_t internal_nodes = 0, child_links = 0;
  for (int64_t st = 0; st < s.steps; ++st)
  {
    batch.push_back(c.request_offset[st + 1] - c.request_offset[st]);
    step_tokens.push_back(c.kv_offset[c.request_offset[st + 1]] - c.kv_offset[c.request_offset[st]]);
  }
  std::vector<int32_t> node_depth;
  std::vector<int64_t> per_depth;
  std::vector<uint8_t> has_child;
  for (int64_t r = 0; r < s.rows; ++r)
  {
    prefix.push_back(c.kv_offset[r + 1] - c.kv_offset[r]);
    int64_t const n0 = c.tree_offset[r], t = c.tree_offset[r + 1] - n0;
    tree.push_back(t);
    node_depth.assign(static_cast<size_t>(t), 0);
    per_depth.assign(static_cast<size_t>(t), 0);
    has_child.assign(static_cast<size_t>(t), 0);
    int32_t deepest = 0;
    int64_t roots = 0;
    for (int64_t i = 0; i < t; ++i)
    {
      int32_t const p = c.parent[n0 + i];
      if (p >= 0)
      {
        node_depth[static_cast<size_t>(i)] = node_depth[static_cast<size_t>(p)] + 1;
        has_child[static_cast<size_t>(p)] = 1;
        roots += p == 0 ? 1 : 0;
      }
      deepest = std::max(deepest, node_depth[static_cast<size_t>(i)]);
      ++per_depth[static_cast<size_t>(node_depth[static_cast<size_t>(i)])];
    }
    if (t > 0)
    {
      depth.push_back(deepest);
      root_children.push_back(roots);
      widest.push_back(*std::max_element(per_depth.begin(), per_depth.end()));
      for (int64_t i = 0; i < t; ++i)
        internal_nodes += has_child[static_cast<size_t>(i)];
      child_links += t - std::count(c.parent.begin() + n0, c.parent.begin() + n0 + t, -1);
    }
    for (int64_t k = c.kv_offset[r]; k < c.kv_offset[r + 1]; ++k)
      s.prefix_runs += (k == c.kv_offset[r] || c.kv_indices[k] != c.kv_indices[k - 1] + 1) ? 1 : 0;
  }
  s.batch = summarize(std::move(batch));
  s.prefix = summarize(std::move(prefix));
  s.tree = summarize(std::move(tree));
  s.depth = summarize(std::move(depth));
  s.root_children = summarize(std::move(root_children));
  s.widest = summarize(std::move(widest));
  s.mean_branching = internal_nodes > 0 ? static_cast<double>(child_links) / static_cast<double>(internal_nodes) : 0;
  s.step_tokens = summarize(std::move(step_tokens));
  s.mean_run_length = s.prefix_runs > 0 ? static_cast<double>(s.prefix_tokens) / static_cast<double>(s.prefix_runs) : 0;
  std::unordered_set<int64_t> ids(c.request_id.begin(), c.request_id.end());
  s.distinct_requests = static_cast<int64_t>(ids.size());
  if (!c.accepted.empty())
  {
    double sum = 0;
    for (int32_t a : c.accepted)
    {
      if (static_cast<size_t>(a) >= s.accepted_histogram.size())
        s.accepted_histogram.resize(static_cast<size_t>(a) + 1, 0);
      ++s.accepted_histogram[static_cast<size_t>(a)];
      sum += a;
    }
    s.mean_accepted = sum / static_cast<double>(c.accepted.size());
  }
  for (int64_t x : c.kv_indices)
    s.max_slot = std::max(s.max_slot, x);
  for (int64_t x : c.out_cache_loc)
    s.max_slot = std::max(s.max_slot, x);
  return s;
}

namespace
{
void appendf(std::string &out, char const *fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string &out, char const *fmt, ...)
{
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  out += buf;
}

void row(std::string &out, char const *name, Distribution const &d)
{
  appendf(out, "| %-22s | %10.1f | %9lld | %9.1f | %9.1f | %9.1f | %9lld |\n", name, d.mean, static_cast<long long>(d.min),
          d.p10, d.p50, d.p90, static_cast<long long>(d.max));
}
} // namespace

std::string formatTraceStats(TraceInfo const &info, TraceStats const &s)
{
  std::string out;
  appendf(out, "source: %s\ncreated: %s\n", info.source.c_str(), info.created.c_str());
  appendf(out, "model: num_heads = %d, sm_scale = %.6g, d_latent = %d, d_rope = %d\n", info.shape.num_heads,
          info.shape.sm_scale, D_LATENT, D_ROPE);
  int const row_bytes = kvRowBytes(info.kv_dtype);
  std::string scale = "none";
  if (kvDtypeHasScale(info.kv_dtype))
  {
    scale.clear();
    appendf(scale, "%.9g", static_cast<double>(info.kv_scale));  // 9 digits: the fp32 value exactly
  }
  else if (info.kv_dtype == KvDtype::kFp8E4m3BlockScaled)
    scale = "per-block scales (4 fp32 in each row)";
  appendf(out, "kv: dtype %s, scale %s, %d bytes per row\n", toString(info.kv_dtype).c_str(), scale.c_str(), row_bytes);
  appendf(out, "pool: num_slots = %lld, %.6g MB at %d bytes per row, largest slot used = %lld\n",
          static_cast<long long>(info.num_slots), static_cast<double>(info.num_slots) * row_bytes * 1e-6, row_bytes,
          static_cast<long long>(s.max_slot));
  appendf(out, "steps: %lld, request rows: %lld (%lld distinct requests), tree nodes: %lld, prefix tokens: %lld\n",
          static_cast<long long>(s.steps), static_cast<long long>(s.rows), static_cast<long long>(s.distinct_requests),
          static_cast<long long>(s.nodes), static_cast<long long>(s.prefix_tokens));
  appendf(out, "values: %s%s\n\n", info.has_values ? "q and kv pool recorded" : "none (replay draws seeded values)",
          info.has_expected_out ? ", expected out recorded" : "");
  appendf(out, "| %-22s | %10s | %9s | %9s | %9s | %9s | %9s |\n", "per", "mean", "min", "p10", "p50", "p90", "max");
  appendf(out, "|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(12, '-').c_str(),
          std::string(11, '-').c_str(), std::string(11, '-').c_str(), std::string(11, '-').c_str(),
          std::string(11, '-').c_str(), std::string(11, '-').c_str());
  row(out, "batch size (step)", s.batch);
  row(out, "prefix tokens (step)", s.step_tokens);
  row(out, "P (request)", s.prefix);
  row(out, "T (request)", s.tree);
  row(out, "tree depth (request)", s.depth);
  row(out, "root fan-out (request)", s.root_children);
  row(out, "widest level (request)", s.widest);
  appendf(out, "\nbranching: %.2f children per internal tree node\n", s.mean_branching);
  appendf(out, "\nfragmentation: %lld runs of consecutive slots, mean run length %.2f tokens (1 = scattered)\n",
          static_cast<long long>(s.prefix_runs), s.mean_run_length);
  if (s.accepted_histogram.empty())
  {
    out += "acceptance: not recorded\n";
    return out;
  }
  appendf(out, "acceptance: mean accepted length %.3f\n\n| accepted | rows | share |\n|---|---|---|\n", s.mean_accepted);
  for (size_t a = 1; a < s.accepted_histogram.size(); ++a)
    if (s.accepted_histogram[a] > 0)
      appendf(out, "| %zu | %lld | %.3f |\n", a, static_cast<long long>(s.accepted_histogram[a]),
              static_cast<double>(s.accepted_histogram[a]) / static_cast<double>(s.rows));
  return out;
}
} // namespace canopy
