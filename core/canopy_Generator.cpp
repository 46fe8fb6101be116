#include "canopy_Generator.hpp"

#include "canopy_Error.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Random.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace canopy
{
std::vector<int32_t> makeDraftTree(int size, uint64_t seed)
{
  std::vector<int32_t> parent;
  if (size <= 0)
    return parent;
  SplitMix64 rng(seed);
  parent.push_back(-1);
  // Spine: about half the budget, at most depth 15 (block-16 drafters), the top-1 continuation.
  int const spine = std::min(size, std::max(1, std::min(16, size / 2 + 1)));
  for (int i = 1; i < spine; ++i)
    parent.push_back(i - 1);
  std::vector<int32_t> depth(spine);
  std::iota(depth.begin(), depth.end(), 0);
  // Side branches: hang off shallow nodes more often (drafter confidence falls with depth), and
  // sometimes extend an earlier side node so branches grow deeper than one level.
  while (static_cast<int>(parent.size()) < size)
  {
    int const n = static_cast<int>(parent.size());
    int32_t p;
    if (rng.uniform() < 0.3)
      p = static_cast<int32_t>(rng.below(static_cast<uint64_t>(n)));
    else
      p = static_cast<int32_t>(std::min<uint64_t>(static_cast<uint64_t>(spine - 1), rng.below(static_cast<uint64_t>(spine)) / 2 + rng.below(2)));
    if (depth[p] >= 15)
      p = 0;
    parent.push_back(p);
    depth.push_back(depth[p] + 1);
  }
  return parent;
}

HostProblem generateProblem(GeneratorOptions const &opt)
{
  if (opt.batch < 0 || opt.num_heads <= 0 || opt.tree_size < 0 || opt.prefix_len < 0 || opt.padded_rows < 0)
    throw InputError("generator: batch, heads, tree size, prefix length and padded rows must be >= 0 (heads > 0)");
  for (size_t i = 0; i < opt.tree_sizes.size(); ++i)
    if (opt.tree_sizes[i] < 0)
      throw InputError("generator: tree_sizes[" + std::to_string(i) + "] = " + std::to_string(opt.tree_sizes[i]) +
                       " is negative");
  if (opt.pool_slack < 1.0)
    throw InputError("generator: pool_slack must be >= 1");
  SplitMix64 rng(opt.seed * 0x9e3779b97f4a7c15ull + 17);
  std::vector<int64_t> P(opt.batch), T(opt.batch);
  int64_t need = 0;
  for (int b = 0; b < opt.batch; ++b)
  {
    P[b] = opt.ragged ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(opt.prefix_len) + 1)) : opt.prefix_len;
    T[b] = opt.ragged ? 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(std::max(opt.tree_size, 1))))
                      : opt.tree_size;
    if (!opt.tree_sizes.empty())
      T[b] = opt.tree_sizes[static_cast<size_t>(b) % opt.tree_sizes.size()];
    need += P[b] + T[b];
  }
  HostProblem problem;
  problem.shape.num_heads = opt.num_heads;
  problem.num_slots = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(need) * opt.pool_slack) + 1);

  // Fragmented slots: cut the pool into runs of random length, shuffle the runs, and hand out
  // slots run by run; skipping some runs leaves holes (pool_slack > 1).
  std::vector<std::pair<int64_t, int64_t>> runs;  // [start, length)
  for (int64_t s = 0; s < problem.num_slots;)
  {
    double const want = 1.0 + rng.exponential() * std::max(0.0, opt.mean_run - 1.0);
    int64_t const len = static_cast<int64_t>(std::min(want, static_cast<double>(problem.num_slots - s)));
    runs.emplace_back(s, len);
    s += len;
  }
  for (size_t i = runs.size(); i > 1; --i)
    std::swap(runs[i - 1], runs[rng.below(i)]);
  double const keep = 1.0 / opt.pool_slack;
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(need));
  for (size_t pass = 0; pass < 2 && static_cast<int64_t>(slots.size()) < need; ++pass)
    for (auto &[start, len] : runs)
    {
      if (len == 0 || (pass == 0 && rng.uniform() > keep))
        continue;
      for (int64_t k = 0; k < len && static_cast<int64_t>(slots.size()) < need; ++k)
        slots.push_back(start + k);
      len = 0;  // used
    }

  std::vector<RequestSpec> requests(opt.batch);
  size_t next = 0;
  for (int b = 0; b < opt.batch; ++b)
  {
    RequestSpec &r = requests[b];
    r.prefix_slots.assign(slots.begin() + next, slots.begin() + next + P[b]);
    next += P[b];
    r.tree_slots.assign(slots.begin() + next, slots.begin() + next + T[b]);
    next += T[b];
    r.parent = makeDraftTree(static_cast<int>(T[b]), opt.seed + 7919ull * (b + 1));
  }
  problem.meta = buildMetadata(requests, opt.mask_layout);
  padBatch(problem.meta, opt.batch + opt.padded_rows);
  if (opt.with_values)
  {
    fillRandomValues(problem, opt.seed ^ 0x5bd1e995ull);
    if (opt.values == ValueMode::kTreeDominant)
      makeTreeDominant(problem, opt.seed);
    quantisePool(problem, opt.kv_dtype, opt.kv_scale);
  }
  return problem;
}
} // namespace canopy
