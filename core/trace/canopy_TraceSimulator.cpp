/// \file canopy_TraceSimulator.cpp
/// \brief Serving simulation for synthetic DDTree verify traces (see canopy_TraceSimulator.hpp).
#include "canopy_TraceSimulator.hpp"

#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Random.hpp"
#include "canopy_Reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <queue>
#include <vector>

namespace canopy
{
// ---- distributions -------------------------------------------------------------------------
int64_t LengthDistribution::sample(SplitMix64 &rng) const
{
  switch (kind)
  {
  case Kind::kFixed: return value;
  case Kind::kUniform: return min + static_cast<int64_t>(rng.below(static_cast<uint64_t>(max - min + 1)));
  case Kind::kLogNormal:
  {
    double const x = std::exp(std::log(median) + sigma * rng.normal());
    return std::clamp<int64_t>(static_cast<int64_t>(std::llround(std::min(x, 4e18))), min, max);
  }
  }
  return value;
}

std::vector<DrafterProfile> const &drafterProfiles()
{
  // Calibrated by simulating the walk over many steps and matching the published numbers; the
  // sources and the fit are in docs/trace-format.md ("Drafter profiles").
  static std::vector<DrafterProfile> const profiles{
      {"chat", "mean accepted length 5.98 at budget 32 (4.6 at 8, 6.6 at 64); rank-1 sibling at 36.9% of first mismatches",
       15, 8, 16.0, 0.3, 0.45, 0.95, 0.965, 1.0},
      {"math500", "DDTree (Ringel and Romano 2026) Figure 3: MATH-500, Qwen3-8B, temperature 0, acceptance length at budgets 16..1024; Table 1: DFlash single block 7.79",
       15, 16, 19.70, 0.2401, 0.7833, 1.0, 0.9945, 1.277},
  };
  return profiles;
}

void applyDrafterProfile(SimulatorConfig &c, std::string const &name, std::string const &key)
{
  std::string known;
  for (DrafterProfile const &p : drafterProfiles())
  {
    if (p.name == name)
    {
      c.max_depth = p.max_depth;
      c.top_k = p.top_k;
      c.alpha_top = p.alpha_top;
      c.alpha_rest = p.alpha_rest;
      c.alpha_tail = p.alpha_tail;
      c.depth_decay = p.depth_decay;
      c.agreement = p.agreement;
      c.sharpness = p.sharpness;
      return;
    }
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw InputError(key + ": unknown drafter profile '" + name + "' (known: " + known + ")");
}

namespace
{
[[noreturn]] void badKey(std::string const &key, std::string const &value, std::string const &rule)
{
  throw InputError(key + ": " + value + " " + rule);
}

/// A number as a person writes it: whole numbers without a fraction, others and huge ones in %g
/// (std::to_string printed 2.000000 and 1e308 as 309 digits).
std::string numberText(double v)
{
  char buf[32];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void checkRange(std::string const &key, double v, double lo, double hi)
{
  if (!(v >= lo && v <= hi))
    badKey(key, numberText(v), "is outside [" + numberText(lo) + ", " + numberText(hi) + "]");
}

void checkLength(std::string const &key, LengthDistribution const &d)
{
  constexpr int64_t MAX_TOKENS = int64_t{1} << 30;  // keeps every context within kv_indptr's int32
  if (d.kind == LengthDistribution::Kind::kFixed)
  {
    checkRange(key + ".value", static_cast<double>(d.value), 1, static_cast<double>(MAX_TOKENS));
    return;
  }
  checkRange(key + ".min", static_cast<double>(d.min), 1, static_cast<double>(MAX_TOKENS));
  checkRange(key + ".max", static_cast<double>(d.max), static_cast<double>(d.min), static_cast<double>(MAX_TOKENS));
  if (d.kind == LengthDistribution::Kind::kLogNormal)
  {
    checkRange(key + ".median", d.median, 1, static_cast<double>(MAX_TOKENS));
    checkRange(key + ".sigma", d.sigma, 0, 10);
  }
}

// Gamma(alpha, 1) by Marsaglia and Tsang; alpha < 1 through Gamma(alpha + 1) * U^(1/alpha).
double sampleGamma(SplitMix64 &rng, double alpha)
{
  if (alpha < 1.0)
  {
    double const u = std::max(rng.uniform(), 1e-300);
    return sampleGamma(rng, alpha + 1.0) * std::pow(u, 1.0 / alpha);
  }
  double const d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true)
  {
    double x, v;
    do
    {
      x = rng.normal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    double const u = rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(std::max(u, 1e-300)) < 0.5 * x * x + d * (1.0 - v + std::log(v)))
      return d * v;
  }
}

int64_t samplePoisson(SplitMix64 &rng, double lambda)
{
  if (lambda > 64)  // normal approximation: exact enough for arrival counts, and O(1)
    return std::max<int64_t>(0, std::llround(lambda + std::sqrt(lambda) * rng.normal()));
  double const limit = std::exp(-lambda);
  double p = 1.0;
  int64_t k = 0;
  while (true)
  {
    p *= rng.uniform();
    if (p <= limit)
      return k;
    ++k;
  }
}

/// Token-granular KV slots, as SGLang's TokenToKVPoolAllocator: allocation takes from the front of
/// the free list, freed slots go to its back (or, with sort_free, to a release list that is merged
/// and sorted when the free list runs short). Fragmentation emerges from this churn.
class SlotAllocator
{
public:
  SlotAllocator(int64_t num_slots, bool sort_free, int64_t initial_run, SplitMix64 &rng) : _sort(sort_free)
  {
    _free.reserve(static_cast<size_t>(num_slots));
    for (int64_t s = 1; s < num_slots; ++s)  // slot 0 is the padding slot, never handed out
      _free.push_back(s);
    if (initial_run <= 0)
      return;
    // A pool that starts fragmented (as after long churn): runs of initial_run consecutive slots
    // in a random order (Fisher-Yates over the runs).
    int64_t const n = static_cast<int64_t>(_free.size()), runs = (n + initial_run - 1) / initial_run;
    std::vector<int64_t> order(static_cast<size_t>(runs));
    for (int64_t i = 0; i < runs; ++i)
      order[static_cast<size_t>(i)] = i;
    for (int64_t i = runs - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[rng.below(static_cast<uint64_t>(i + 1))]);
    std::vector<int64_t> shuffled;
    shuffled.reserve(_free.size());
    for (int64_t r : order)
      for (int64_t s = r * initial_run; s < std::min(n, (r + 1) * initial_run); ++s)
        shuffled.push_back(_free[static_cast<size_t>(s)]);
    _free.swap(shuffled);
  }
  int64_t available() const { return static_cast<int64_t>(_free.size() - _head + _release.size()); }

  void alloc(int64_t n, std::vector<int64_t> &out)
  {
    if (static_cast<int64_t>(_free.size() - _head) < n)
      merge();
    // Callers reserve before allocating (admission and retraction keep every step within the pool).
    out.insert(out.end(), _free.begin() + static_cast<std::ptrdiff_t>(_head),
               _free.begin() + static_cast<std::ptrdiff_t>(_head + static_cast<size_t>(n)));
    _head += static_cast<size_t>(n);
    if (_head > (1u << 16) && _head * 2 > _free.size())
    {
      _free.erase(_free.begin(), _free.begin() + static_cast<std::ptrdiff_t>(_head));
      _head = 0;
    }
  }
  void release(int64_t slot) { (_sort ? _release : _free).push_back(slot); }

  /// \brief After compaction: the free list is every slot from \p first_free up, in order.
  void resetContiguous(int64_t first_free, int64_t num_slots)
  {
    _free.clear();
    _release.clear();
    _head = 0;
    for (int64_t s = first_free; s < num_slots; ++s)
      _free.push_back(s);
  }

private:
  void merge()
  {
    _free.erase(_free.begin(), _free.begin() + static_cast<std::ptrdiff_t>(_head));
    _head = 0;
    _free.insert(_free.end(), _release.begin(), _release.end());
    _release.clear();
    std::sort(_free.begin(), _free.end());
  }
  bool _sort;
  std::vector<int64_t> _free;
  size_t _head = 0;
  std::vector<int64_t> _release;
};

struct Request
{
  int64_t id = 0;
  int64_t prompt_len = 0, output_len = 0, generated = 0;
  std::vector<int64_t> slots;  // context (prefix) slots, in token order
};

/// A DDTree draft tree with each node's depth and rank within its depth's marginal.
struct DraftTree
{
  std::vector<int32_t> parent, depth, rank, first_child, next_sibling;
  void clear()
  {
    parent.clear();
    depth.clear();
    rank.clear();
    first_child.clear();
    next_sibling.clear();
  }
  void add(int32_t p, int32_t d, int32_t r)
  {
    int32_t const i = static_cast<int32_t>(parent.size());
    parent.push_back(p);
    depth.push_back(d);
    rank.push_back(r);
    first_child.push_back(-1);
    next_sibling.push_back(-1);
    if (p >= 0)
    {
      next_sibling[i] = first_child[p];
      first_child[p] = i;
    }
  }
  int32_t childWithRank(int32_t node, int32_t r) const
  {
    for (int32_t c = first_child[node]; c >= 0; c = next_sibling[c])
      if (rank[c] == r)
        return c;
    return -1;
  }
};

class Drafter
{
public:
  explicit Drafter(SimulatorConfig const &c) : _c(c)
  {
    _q.resize(static_cast<size_t>((c.max_depth + 1) * (c.top_k + 1)));
    _logq.resize(_q.size());
    _target.resize(_q.size());
  }

  /// Per-depth marginals (sorted Dirichlet draws); index [d][r], r = top_k is the tail mass.
  void drawMarginals(SplitMix64 &rng)
  {
    int const k = _c.top_k;
    for (int d = 1; d <= _c.max_depth; ++d)
    {
      double *q = &_q[static_cast<size_t>(d * (k + 1))];
      double sum = 0;
      for (int r = 0; r <= k; ++r)
      {
        double const a = r == 0 ? _c.alpha_top * std::pow(_c.depth_decay, d - 1) : r == k ? _c.alpha_tail : _c.alpha_rest;
        q[r] = std::max(sampleGamma(rng, a), 1e-300);
        sum += q[r];
      }
      for (int r = 0; r <= k; ++r)
        q[r] /= sum;
      std::sort(q, q + k, [](double a, double b) { return a > b; });
      for (int r = 0; r <= k; ++r)
        _logq[static_cast<size_t>(d * (k + 1) + r)] = std::log(q[r]);
      // The target's distribution over the same ranks: q^sharpness, renormalised (1 = the drafter
      // is calibrated; > 1 = the target is surer of the top ranks than the drafter's marginal).
      double *t = &_target[static_cast<size_t>(d * (k + 1))];
      double tsum = 0;
      for (int r = 0; r <= k; ++r)
        tsum += t[r] = _c.sharpness == 1.0 ? q[r] : std::pow(q[r], _c.sharpness);
      for (int r = 0; r <= k && _c.sharpness != 1.0; ++r)
        t[r] /= tsum;
    }
  }
  double q(int d, int r) const { return _q[static_cast<size_t>(d * (_c.top_k + 1) + r)]; }
  double logq(int d, int r) const { return _logq[static_cast<size_t>(d * (_c.top_k + 1) + r)]; }

  /// Best-first expansion of the rank lattice: pop the most probable path, add it as a node, push
  /// its first child (next depth, rank 0) and its next sibling (same depth, next rank). Scores only
  /// fall along both edges, so pops come in non-increasing order and a parent is always popped (and
  /// numbered) before its children: node order = pop order gives parent[i] < i.
  void growTree(int max_nodes, DraftTree &tree)
  {
    struct Cand
    {
      double logp;
      int32_t depth, rank, parent;
      uint32_t seq;  // deterministic tie-break
      bool operator<(Cand const &o) const { return logp != o.logp ? logp < o.logp : seq > o.seq; }
    };
    tree.clear();
    tree.add(-1, 0, 0);
    std::priority_queue<Cand> heap;
    uint32_t seq = 0;
    heap.push({logq(1, 0), 1, 0, 0, seq++});
    while (static_cast<int>(tree.parent.size()) < max_nodes && !heap.empty())
    {
      Cand const c = heap.top();
      heap.pop();
      int32_t const idx = static_cast<int32_t>(tree.parent.size());
      tree.add(c.parent, c.depth, c.rank);
      if (c.depth < _c.max_depth)
        heap.push({c.logp + logq(c.depth + 1, 0), c.depth + 1, 0, idx, seq++});
      if (c.rank + 1 < _c.top_k)
        heap.push({c.logp - logq(c.depth, c.rank) + logq(c.depth, c.rank + 1), c.depth, c.rank + 1, c.parent, seq++});
    }
  }

  /// The target's token at depth d as a drafter rank, or -1 when it is off the drafter's list.
  int32_t targetRank(SplitMix64 &rng, int d) const
  {
    if (rng.uniform() >= _c.agreement)
      return -1;
    double u = rng.uniform();
    for (int r = 0; r < _c.top_k; ++r)
    {
      u -= _target[static_cast<size_t>(d * (_c.top_k + 1) + r)];
      if (u < 0)
        return r;
    }
    return -1;  // the tail
  }

private:
  SimulatorConfig const &_c;
  std::vector<double> _q, _logq, _target;
};

/// Mean run of consecutive slots over the prefixes of the recorded rows.
double meanRunLength(TraceColumns const &c)
{
  int64_t runs = 0;
  for (int64_t r = 0; r < c.numRows(); ++r)
    for (int64_t k = c.kv_offset[r]; k < c.kv_offset[r + 1]; ++k)
      runs += (k == c.kv_offset[r] || c.kv_indices[k] != c.kv_indices[k - 1] + 1) ? 1 : 0;
  return runs > 0 ? static_cast<double>(c.kv_indices.size()) / static_cast<double>(runs) : 0.0;
}
} // namespace

void validateSimulatorConfig(SimulatorConfig const &c)
{
  checkRange("steps", static_cast<double>(c.steps), 1, 1e8);
  checkRange("warmup_steps", static_cast<double>(c.warmup_steps), 0, 1e8);
  checkRange("model.num_heads", c.shape.num_heads, 1, 4096);
  if (!std::isfinite(c.shape.sm_scale) || c.shape.sm_scale <= 0)
    badKey("model.sm_scale", std::to_string(c.shape.sm_scale), "must be finite and > 0");
  checkRange("arrivals.concurrency", c.concurrency, 1, 1 << 16);
  checkRange("arrivals.rate", c.rate, 1e-6, 1e6);
  checkRange("arrivals.max_running", c.max_running, 1, 1 << 16);
  checkLength("prompt", c.prompt);
  checkLength("output", c.output);
  checkRange("draft.budget", c.budget, 0, 4095);
  checkRange("draft.max_depth", c.max_depth, 1, 63);
  checkRange("draft.top_k", c.top_k, 1, 64);
  checkRange("draft.alpha_top", c.alpha_top, 1e-3, 1e6);
  checkRange("draft.alpha_rest", c.alpha_rest, 1e-3, 1e6);
  checkRange("draft.alpha_tail", c.alpha_tail, 1e-3, 1e6);
  checkRange("draft.depth_decay", c.depth_decay, 1e-3, 2);
  checkRange("target.agreement", c.agreement, 0, 1);
  checkRange("target.sharpness", c.sharpness, 0.05, 20);
  checkRange("pool.compact_every", static_cast<double>(c.compact_every), 0, 1e12);
  checkRange("pool.initial_run", static_cast<double>(c.initial_run), 0, 1e12);
  checkRange("values.q_scale", c.q_scale, 1e-6, 1e4);
  checkRange("values.kv_scale", c.kv_scale, 1e-6, 1e4);
  if (!std::isfinite(c.kv_dtype_scale) || c.kv_dtype_scale <= 0)
    badKey("model.kv_scale", std::to_string(c.kv_dtype_scale), "must be finite and > 0");
  if (c.kv_dtype_scale != 1.0f && c.kv_dtype != KvDtype::kFp8E4m3 && c.kv_dtype != KvDtype::kFp8E5m2)
    badKey("model.kv_scale", std::to_string(c.kv_dtype_scale),
           "applies to kv_dtype fp8-e4m3 and fp8-e5m2 only, not " + toString(c.kv_dtype));
  // One request at its longest, with its tree, must fit beside the padding slot, or it could wait forever.
  int64_t const need = c.prompt.upperBound() + c.output.upperBound() + c.budget + 2;
  if (c.num_slots < need || c.num_slots > (int64_t{1} << 40))
    badKey("pool.num_slots", std::to_string(c.num_slots),
           "must be in [" + std::to_string(need) + ", 2^40]: the longest prompt + output + tree + the padding slot must fit");
}

TraceColumns simulateTrace(SimulatorConfig const &c, SimulatorSummary *summary)
{
  validateSimulatorConfig(c);
  SplitMix64 arrivals_rng(c.seed * 0x9e3779b97f4a7c15ull + 1);
  SplitMix64 draft_rng(c.seed * 0x9e3779b97f4a7c15ull + 2);
  SplitMix64 target_rng(c.seed * 0x9e3779b97f4a7c15ull + 3);

  TraceColumns out;
  out.source = c.source;
  out.shape = c.shape;
  out.kv_dtype = c.kv_dtype;
  out.kv_scale = kvDtypeHasScale(c.kv_dtype) ? c.kv_dtype_scale : 1.0f;
  out.num_slots = c.num_slots;
  out.created = isoTimestampNow();

  SplitMix64 pool_rng(c.seed * 0x9e3779b97f4a7c15ull + 4);
  SlotAllocator pool(c.num_slots, c.sort_free, c.initial_run, pool_rng);
  std::deque<Request> waiting;
  std::vector<Request> running;
  int64_t next_id = 0;
  auto newRequest = [&] {
    Request r;
    r.id = next_id++;
    r.prompt_len = c.prompt.sample(arrivals_rng);
    r.output_len = c.output.sample(arrivals_rng);
    return r;
  };
  int const tree_max = c.budget + 1;
  Drafter drafter(c);
  std::vector<DraftTree> trees;
  std::vector<std::vector<int64_t>> tree_slots;
  std::vector<std::vector<uint8_t>> keep;  // accepted nodes of each tree
  std::vector<int32_t> path;

  SimulatorSummary sum;
  int64_t accepted_total = 0, mismatches = 0, rank1 = 0;
  int64_t recorded = 0, idle = 0;
  bool const fixed = c.arrivals == SimulatorConfig::Arrivals::kFixed;
  int const cap = fixed ? c.concurrency : c.max_running;
  for (int64_t step = 0; recorded < c.steps; ++step)
  {
    bool const record = step >= c.warmup_steps;
    if (!fixed)
      for (int64_t n = samplePoisson(arrivals_rng, c.rate); n > 0; --n)
        waiting.push_back(newRequest());
    // Admission: FIFO while the batch has room and the pool holds the prompt plus every tree of the
    // next step (a conservative reservation; growth past it is handled by retraction below).
    while (static_cast<int>(running.size()) < cap)
    {
      if (waiting.empty())
      {
        if (!fixed)
          break;
        waiting.push_back(newRequest());
      }
      Request &w = waiting.front();
      int64_t const need = w.prompt_len + static_cast<int64_t>(tree_max) * static_cast<int64_t>(running.size() + 1);
      if (pool.available() < need)
        break;
      pool.alloc(w.prompt_len, w.slots);  // prefill writes the prompt's K/V
      running.push_back(std::move(w));
      waiting.pop_front();
      sum.admitted += record ? 1 : 0;
    }
    if (running.empty())
    {
      // Idle server (Poisson gaps): no verify step happens, so nothing is recorded.
      if (++idle > 100000000)
        throw InputError("arrivals.rate: " + std::to_string(c.rate) + " leaves the server idle; no steps recorded");
      continue;
    }
    if (c.compact_every > 0 && step > 0 && step % c.compact_every == 0)
    {
      // Defragment: move every live context to one contiguous run (a real server copies the KV rows).
      int64_t next = 1;
      for (Request &r : running)
        for (int64_t &slot : r.slots)
          slot = next++;
      pool.resetContiguous(next, c.num_slots);
      sum.compactions += record ? 1 : 0;
    }
    // Retraction (as SGLang on KV exhaustion): the newest request gives its slots back and waits
    // at the head of the queue, to be prefilled again with its context so far.
    while (pool.available() < static_cast<int64_t>(tree_max) * static_cast<int64_t>(running.size()) && running.size() > 1)
    {
      Request r = std::move(running.back());
      running.pop_back();
      for (int64_t slot : r.slots)
        pool.release(slot);
      r.slots.clear();
      r.prompt_len += r.generated;
      r.output_len = std::max<int64_t>(1, r.output_len - r.generated);
      r.generated = 0;
      waiting.push_front(std::move(r));
      sum.retracted += record ? 1 : 0;
    }

    // Each tree gets fresh slots; rejected nodes' slots are freed only once every tree of the step
    // is verified (a serving stack allocates all trees before the verify forward), so tree slots
    // of one step never alias.
    size_t const B = running.size();
    trees.resize(B);
    tree_slots.resize(B);
    keep.resize(B);
    for (size_t b = 0; b < B; ++b)
    {
      drafter.drawMarginals(draft_rng);
      drafter.growTree(tree_max, trees[b]);
      // Verify, now that the marginals are at hand (the walk only reads them).
      tree_slots[b].clear();
      pool.alloc(static_cast<int64_t>(trees[b].parent.size()), tree_slots[b]);
      path.assign(1, 0);
      bool mismatch_seen = false;
      for (int d = 1; d <= c.max_depth; ++d)
      {
        int32_t const r = drafter.targetRank(target_rng, d);
        if (!mismatch_seen && r != 0)
        {
          mismatch_seen = true;
          if (record)
          {
            ++mismatches;
            rank1 += r == 1 ? 1 : 0;
          }
        }
        int32_t const child = r < 0 ? -1 : trees[b].childWithRank(path.back(), r);
        if (child < 0)
          break;
        path.push_back(child);
      }
      keep[b].assign(trees[b].parent.size(), 0);
      for (int32_t n : path)
        keep[b][static_cast<size_t>(n)] = 1;
      Request const &req = running[b];
      if (record)
      {
        out.request_id.push_back(req.id);
        out.prefix_len.push_back(static_cast<int32_t>(req.slots.size()));
        out.kv_indices.insert(out.kv_indices.end(), req.slots.begin(), req.slots.end());
        out.kv_offset.push_back(static_cast<int64_t>(out.kv_indices.size()));
        out.parent.insert(out.parent.end(), trees[b].parent.begin(), trees[b].parent.end());
        out.out_cache_loc.insert(out.out_cache_loc.end(), tree_slots[b].begin(), tree_slots[b].end());
        out.tree_offset.push_back(static_cast<int64_t>(out.parent.size()));
        out.accepted.push_back(static_cast<int32_t>(path.size()));
        accepted_total += static_cast<int64_t>(path.size());
      }
      // The accepted path's slots stay (in path order) as the context grows; the rest stay
      // allocated until every tree of the step is verified.
      for (int32_t n : path)
        running[b].slots.push_back(tree_slots[b][static_cast<size_t>(n)]);
      running[b].generated += static_cast<int64_t>(path.size());
    }
    if (record)
    {
      out.endStep();
      ++recorded;
      sum.peak_used_slots = std::max(sum.peak_used_slots, c.num_slots - 1 - pool.available());
    }
    // Free rejected nodes, then finished requests.
    for (size_t b = 0; b < B; ++b)
      for (size_t n = 0; n < tree_slots[b].size(); ++n)
        if (!keep[b][n])
          pool.release(tree_slots[b][n]);
    size_t kept = 0;
    for (size_t b = 0; b < B; ++b)
    {
      if (running[b].generated >= running[b].output_len)
      {
        for (int64_t slot : running[b].slots)
          pool.release(slot);
        sum.finished += record ? 1 : 0;
        continue;
      }
      if (kept != b)
        running[kept] = std::move(running[b]);
      ++kept;
    }
    running.resize(kept);
  }

  sum.steps = out.numSteps();
  sum.rows = out.numRows();
  sum.nodes = out.numNodes();
  sum.prefix_tokens = static_cast<int64_t>(out.kv_indices.size());
  sum.mean_batch = sum.steps > 0 ? static_cast<double>(sum.rows) / static_cast<double>(sum.steps) : 0;
  sum.mean_accepted = sum.rows > 0 ? static_cast<double>(accepted_total) / static_cast<double>(sum.rows) : 0;
  sum.rank1_at_first_mismatch = mismatches > 0 ? static_cast<double>(rank1) / static_cast<double>(mismatches) : 0;
  sum.mean_run_length = meanRunLength(out);
  if (c.values)
    addSyntheticValues(out, c.values_seed, c.q_scale, c.kv_scale);
  if (summary)
    *summary = sum;
  return out;
}

void addSyntheticValues(TraceColumns &c, uint64_t seed, float q_scale, float kv_scale)
{
  int const H = c.shape.num_heads;
  SplitMix64 rng(seed);
  c.has_values = true;
  c.q.resize(static_cast<size_t>(c.numNodes()) * H * D_QK);
  c.kv.resize(static_cast<size_t>(c.num_slots) * D_QK);
  for (auto &x : c.q)
    x = floatToBf16(q_scale * rng.uniformSigned());
  for (auto &x : c.kv)
    x = floatToBf16(kv_scale * rng.uniformSigned());
  c.kv_fp8.clear();
  if (c.kv_dtype != KvDtype::kBf16)
  {
    HostProblem pool;
    pool.num_slots = c.num_slots;
    pool.kv_pool = std::move(c.kv);
    quantisePool(pool, c.kv_dtype, c.kv_scale);
    c.kv_fp8 = std::move(pool.kv_pool_fp8);
    c.kv.clear();
    size_t const row = static_cast<size_t>(kvRowBytes(c.kv_dtype));
    for (int64_t slot = 0; slot < c.num_slots; ++slot)
      if (std::string const why = fp8RowProblem(c.kv_dtype, c.kv_fp8.data() + static_cast<size_t>(slot) * row);
          !why.empty())
        throw InputError("model.kv_scale: " + std::to_string(c.kv_scale) + " stores the seeded pool values (|x| <= " +
                         std::to_string(kv_scale) + ", values.kv_scale) as unreadable " + toString(c.kv_dtype) +
                         " bytes: pool row " + std::to_string(slot) + " " + why + "; use a larger scale");
  }
  c.out.assign(static_cast<size_t>(c.numNodes()) * H * D_V, BF16_POISON);
  for (int64_t s = 0; s < c.numSteps(); ++s)
  {
    BatchMetadata const meta = stepMetadata(c, s, MaskLayout::kParents);
    int64_t const n0 = c.tree_offset[c.request_offset[s]];
    BatchRef r;
    r.batch_size = meta.batchSize();
    r.num_heads = H;
    r.num_nodes = meta.numNodes();
    r.num_slots = c.num_slots;
    r.sm_scale = static_cast<float>(c.shape.sm_scale);
    r.mask_layout = MaskLayout::kParents;
    r.kv_indptr = meta.kv_indptr.data();
    r.kv_indices = meta.kv_indices.data();
    r.qo_indptr = meta.qo_indptr.data();
    r.out_cache_loc = meta.out_cache_loc.data();
    r.mask_indptr = meta.mask_indptr.data();
    r.tree_parent = meta.tree_parent.data();
    r.q = c.q.data() + static_cast<size_t>(n0) * H * D_QK;
    r.kv_pool = c.kv.empty() ? nullptr : c.kv.data();
    r.kv_dtype = c.kv_dtype;
    r.kv_pool_fp8 = c.kv_fp8.empty() ? nullptr : c.kv_fp8.data();
    r.kv_scale = c.kv_scale;
    std::vector<double> const ref = referenceAttention(r);
    uint16_t *o = c.out.data() + static_cast<size_t>(n0) * H * D_V;
    for (size_t i = 0; i < ref.size(); ++i)
      o[i] = floatToBf16(static_cast<float>(ref[i]));
  }
}
} // namespace canopy
