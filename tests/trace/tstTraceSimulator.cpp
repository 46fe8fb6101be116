/// \file tstTraceSimulator.cpp
/// \brief The serving simulator: deterministic, valid, DDTree trees within budget and depth,
/// contexts that grow by exactly the accepted path, a pool that never double-books a slot,
/// fragmentation from churn that compaction removes, and acceptance near its calibration.
#include "canopy_Random.hpp"
#include "canopy_TraceStats.hpp"
#include "canopy_TraceTestUtil.hpp"
#include "canopy_Tree.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace canopy::test
{
namespace
{
SimulatorConfig mediumConfig(uint64_t seed)
{
  SimulatorConfig c;
  c.seed = seed;
  c.steps = 120;
  c.warmup_steps = 40;
  c.concurrency = 6;
  c.prompt = {LengthDistribution::Kind::kLogNormal, 0, 16, 600, 128, 0.8};
  c.output = {LengthDistribution::Kind::kLogNormal, 0, 8, 200, 48, 0.6};
  c.num_slots = 1 << 14;
  return c;
}

/// Every slot a step touches (all prefixes and all trees) is distinct and is never the padding slot.
void expectNoDoubleBooking(TraceColumns const &c)
{
  for (int64_t s = 0; s < c.numSteps(); ++s)
  {
    std::set<int64_t> seen;
    int64_t count = 0;
    for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
    {
      for (int64_t k = c.kv_offset[r]; k < c.kv_offset[r + 1]; ++k, ++count)
        seen.insert(c.kv_indices[k]);
      for (int64_t n = c.tree_offset[r]; n < c.tree_offset[r + 1]; ++n, ++count)
        seen.insert(c.out_cache_loc[n]);
    }
    ASSERT_EQ(static_cast<int64_t>(seen.size()), count) << "step " << s << " books a slot twice";
    ASSERT_TRUE(seen.empty() || *seen.begin() > 0) << "step " << s << " uses the padding slot 0";
  }
}
} // namespace

TEST(TraceSimulator, deterministicForASeed)
{
  TraceColumns a = simulateTrace(mediumConfig(3));
  TraceColumns b = simulateTrace(mediumConfig(3));
  TraceColumns other = simulateTrace(mediumConfig(4));
  EXPECT_EQ(a.kv_indices, b.kv_indices);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.out_cache_loc, b.out_cache_loc);
  EXPECT_EQ(a.accepted, b.accepted);
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_NE(a.kv_indices, other.kv_indices);
  EXPECT_NE(a.accepted, other.accepted);
}

TEST(TraceSimulator, tracesAreValidAndSlotsNeverDoubleBooked)
{
  std::vector<SimulatorConfig> configs;
  configs.push_back(mediumConfig(1));
  SimulatorConfig poisson = mediumConfig(2);
  poisson.arrivals = SimulatorConfig::Arrivals::kPoisson;
  poisson.rate = 0.3;
  poisson.max_running = 10;
  configs.push_back(poisson);
  SimulatorConfig sorted = mediumConfig(3);
  sorted.sort_free = true;
  configs.push_back(sorted);
  SimulatorConfig compact = mediumConfig(4);
  compact.compact_every = 7;
  configs.push_back(compact);
  SimulatorConfig tight = mediumConfig(5);  // pool just big enough: admission waits, retraction happens
  tight.num_slots = 600 + 200 + 33 + 2 + 300;
  configs.push_back(tight);
  for (size_t i = 0; i < configs.size(); ++i)
  {
    SCOPED_TRACE("config " + std::to_string(i));
    SimulatorSummary sum;
    TraceColumns const c = simulateTrace(configs[i], &sum);
    EXPECT_EQ(c.numSteps(), configs[i].steps);
    EXPECT_NO_THROW(validateTraceColumns(c));
    expectNoDoubleBooking(c);
    EXPECT_EQ(sum.rows, c.numRows());
    EXPECT_GT(sum.finished, 0);
    if (i == 4)
      EXPECT_GT(sum.retracted, 0) << "a tight pool must force retractions";
  }
}

TEST(TraceSimulator, treesAreBestFirstWithinBudgetAndDepth)
{
  SimulatorConfig c = mediumConfig(7);
  for (int budget : {0, 1, 8, 32, 100})
  {
    c.budget = budget;
    c.max_depth = 15;
    TraceColumns const t = simulateTrace(c);
    for (int64_t r = 0; r < t.numRows(); ++r)
    {
      std::vector<int32_t> const parent(t.parent.begin() + t.tree_offset[r], t.parent.begin() + t.tree_offset[r + 1]);
      ASSERT_EQ(static_cast<int>(parent.size()), budget + 1) << "budget nodes plus the root";
      ASSERT_NO_THROW(validateTree(parent));
      auto const depth = treeDepths(parent);
      ASSERT_LE(*std::max_element(depth.begin(), depth.end()), 15);
      // Pop order: depths along the spine (first children) appear in creation order.
      if (budget >= 1)
        ASSERT_EQ(parent[1], 0) << "the most probable path starts at the root";
    }
  }
  // A shallow limit caps depth and, with top_k = 1, the tree is a chain of max_depth + 1 nodes.
  c.budget = 50;
  c.max_depth = 4;
  c.top_k = 1;
  TraceColumns const chain = simulateTrace(c);
  for (int64_t r = 0; r < chain.numRows(); ++r)
  {
    ASSERT_EQ(chain.tree_offset[r + 1] - chain.tree_offset[r], 5);
    for (int64_t i = 1; i < 5; ++i)
      ASSERT_EQ(chain.parent[chain.tree_offset[r] + i], i - 1);
  }
}

TEST(TraceSimulator, contextsGrowByExactlyTheAcceptedPath)
{
  SimulatorConfig cfg = mediumConfig(9);
  cfg.compact_every = 0;
  TraceColumns const c = simulateTrace(cfg);
  int64_t checked = 0;
  for (int64_t s = 0; s + 1 < c.numSteps(); ++s)
  {
    std::map<int64_t, int64_t> next_row;
    for (int64_t r = c.request_offset[s + 1]; r < c.request_offset[s + 2]; ++r)
      next_row[c.request_id[r]] = r;
    for (int64_t r = c.request_offset[s]; r < c.request_offset[s + 1]; ++r)
    {
      auto it = next_row.find(c.request_id[r]);
      if (it == next_row.end())
        continue;  // finished (or retracted)
      int64_t const r2 = it->second, P = c.prefix_len[r], a = c.accepted[r];
      ASSERT_EQ(c.prefix_len[r2], P + a) << "step " << s << " request " << c.request_id[r];
      for (int64_t k = 0; k < P; ++k)
        ASSERT_EQ(c.kv_indices[c.kv_offset[r2] + k], c.kv_indices[c.kv_offset[r] + k]);
      // The new slots are the tree slots of a root-to-node path, in path order.
      std::map<int64_t, int32_t> node_of_slot;
      for (int64_t n = c.tree_offset[r]; n < c.tree_offset[r + 1]; ++n)
        node_of_slot[c.out_cache_loc[n]] = static_cast<int32_t>(n - c.tree_offset[r]);
      int32_t prev = -1;
      for (int64_t k = P; k < P + a; ++k)
      {
        auto node = node_of_slot.find(c.kv_indices[c.kv_offset[r2] + k]);
        ASSERT_NE(node, node_of_slot.end()) << "accepted slot is not one of the tree's slots";
        ASSERT_EQ(c.parent[c.tree_offset[r] + node->second], prev) << "accepted nodes form a root path";
        prev = node->second;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(TraceSimulator, fragmentationEmergesAndCompactionRemovesIt)
{
  SimulatorConfig cfg = mediumConfig(10);
  cfg.steps = 200;
  cfg.warmup_steps = 200;
  TraceStats const churn = computeTraceStats(simulateTrace(cfg));
  cfg.compact_every = 1;
  TraceStats const compact = computeTraceStats(simulateTrace(cfg));
  // Without compaction, contexts are cut into runs far shorter than the contexts themselves.
  EXPECT_LT(churn.mean_run_length, 0.5 * churn.prefix.mean);
  // Compacting before each step leaves each context one run plus the previous step's accepted path.
  EXPECT_GT(compact.mean_run_length, 4.0 * churn.mean_run_length);
}

TEST(TraceSimulator, acceptanceMatchesItsCalibration)
{
  SimulatorConfig cfg;  // defaults: budget 32, calibrated drafter and target
  cfg.steps = 400;
  cfg.prompt = {LengthDistribution::Kind::kFixed, 32, 1, 1, 1, 0};
  cfg.output = {LengthDistribution::Kind::kFixed, 64, 1, 1, 1, 0};
  cfg.num_slots = 1 << 14;
  SimulatorSummary s;
  simulateTrace(cfg, &s);
  EXPECT_GT(s.mean_accepted, 5.0);
  EXPECT_LT(s.mean_accepted, 7.0);
  EXPECT_GT(s.rank1_at_first_mismatch, 0.30);
  EXPECT_LT(s.rank1_at_first_mismatch, 0.44);
  // A bigger budget accepts more; a weaker target accepts less.
  cfg.budget = 8;
  SimulatorSummary small;
  simulateTrace(cfg, &small);
  EXPECT_LT(small.mean_accepted, s.mean_accepted);
  cfg.budget = 32;
  cfg.agreement = 0.5;
  SimulatorSummary weak;
  simulateTrace(cfg, &weak);
  EXPECT_LT(weak.mean_accepted, 0.6 * s.mean_accepted);
}

// DDTree trees at the budget study's sizes (T = 16..1024 nodes) from the profile calibrated to the
// DDTree paper's MATH-500 curve (docs/trace-format.md): valid trees of exactly T nodes, deep along
// the likely path and wide near the root, wider and deeper as the budget grows, and acceptance that
// grows with the budget, within the calibration's stated residuals (docs/trace-format.md: within
// 0.6 of the published curve up to 128 nodes, 1.5 above).
TEST(TraceSimulator, ddtreeBudgetsFrom16To1024)
{
  SimulatorConfig c;
  applyDrafterProfile(c, "math500");
  c.steps = 100;
  c.concurrency = 4;
  c.prompt = {LengthDistribution::Kind::kFixed, 64, 1, 1, 1, 0};
  c.output = {LengthDistribution::Kind::kFixed, 100000, 1, 1, 1, 0};
  c.num_slots = 1 << 20;
  // Published acceptance lengths at DDTree budgets 16..1024 (Figure 3), indexed like the sizes.
  std::vector<int> const nodes{16, 32, 64, 128, 256, 512, 1024};
  std::vector<double> const published{8.6, 9.27, 9.75, 10.2, 10.42, 10.73, 10.97};
  double prev_accepted = 0, prev_depth = 0, prev_fanout = 0;
  for (size_t i = 0; i < nodes.size(); ++i)
  {
    SCOPED_TRACE("T = " + std::to_string(nodes[i]));
    c.budget = nodes[i] - 1;
    SimulatorSummary sum;
    TraceColumns const t = simulateTrace(c, &sum);
    for (int64_t r = 0; r < t.numRows(); ++r)
    {
      std::vector<int32_t> const parent(t.parent.begin() + t.tree_offset[r], t.parent.begin() + t.tree_offset[r + 1]);
      ASSERT_EQ(static_cast<int>(parent.size()), nodes[i]);
      ASSERT_NO_THROW(validateTree(parent));  // one root, parents precede children
      for (size_t n = 1; n < parent.size(); ++n)
        ASSERT_LT(parent[n], static_cast<int32_t>(n));
    }
    TraceStats const s = computeTraceStats(t);
    EXPECT_LE(s.depth.max, 15) << "a block-16 drafter drafts 15 positions";
    // Deep along the most likely path: even the smallest tree reaches well past half the block.
    EXPECT_GE(s.depth.mean, 9.0);
    // Wide near the root: the root's fan-out grows with the budget but stays within top_k.
    EXPECT_LE(s.root_children.max, 16);
    EXPECT_GE(s.depth.mean, prev_depth - 0.05);
    EXPECT_GE(s.root_children.mean, prev_fanout - 0.05);
    EXPECT_GT(s.mean_branching, 1.0);
    EXPECT_NEAR(sum.mean_accepted, published[i], nodes[i] <= 128 ? 1.0 : 2.0);
    EXPECT_GE(sum.mean_accepted, prev_accepted - 0.1) << "acceptance does not fall as the budget grows";
    if (nodes[i] == 1024)
    {
      EXPECT_GE(s.root_children.mean, 3.0) << "a 1024-node tree is wide at depth 1";
      EXPECT_GE(s.widest.mean, 64.0);
    }
    prev_accepted = sum.mean_accepted;
    prev_depth = s.depth.mean;
    prev_fanout = s.root_children.mean;
  }
}

TEST(TraceSimulator, fragmentedPoolFromTheStart)
{
  SimulatorConfig c = mediumConfig(12);
  c.warmup_steps = 0;
  c.steps = 5;
  TraceStats const fresh = computeTraceStats(simulateTrace(c));
  c.initial_run = 16;
  TraceColumns const t = simulateTrace(c);
  EXPECT_NO_THROW(validateTraceColumns(t));
  expectNoDoubleBooking(t);
  TraceStats const frag = computeTraceStats(t);
  // Runs of 16 in a random order: the mean run is about 16 (neighbouring runs rarely line up).
  EXPECT_GT(frag.mean_run_length, 10.0);
  EXPECT_LT(frag.mean_run_length, 24.0);
  EXPECT_GT(fresh.mean_run_length, 2.0 * frag.mean_run_length);
}

TEST(TraceSimulator, drafterProfilesByName)
{
  SimulatorConfig c;
  applyDrafterProfile(c, "math500");
  EXPECT_EQ(c.top_k, 16);
  EXPECT_GT(c.sharpness, 1.0);
  applyDrafterProfile(c, "chat");
  SimulatorConfig const defaults;
  EXPECT_EQ(c.top_k, defaults.top_k);
  EXPECT_EQ(c.alpha_top, defaults.alpha_top);
  EXPECT_EQ(c.agreement, defaults.agreement);
  EXPECT_EQ(c.sharpness, defaults.sharpness);
  expectInputError([&] { applyDrafterProfile(c, "eagle", "--drafter"); }, {"--drafter", "eagle", "math500"});
}

TEST(TraceSimulator, longContextsArePossible)
{
  SimulatorConfig cfg;
  cfg.steps = 2;
  cfg.concurrency = 1;
  cfg.prompt = {LengthDistribution::Kind::kFixed, 131072, 1, 1, 1, 0};
  cfg.output = {LengthDistribution::Kind::kFixed, 64, 1, 1, 1, 0};
  cfg.num_slots = 131072 + 64 + 33 + 2;
  TraceColumns const c = simulateTrace(cfg);
  EXPECT_NO_THROW(validateTraceColumns(c));
  EXPECT_EQ(c.prefix_len[0], 131072);
  EXPECT_EQ(c.prefix_len[1], 131072 + c.accepted[0]);
}

TEST(TraceSimulator, badConfigsNameTheKey)
{
  auto bad = [](std::function<void(SimulatorConfig &)> edit, std::string const &key) {
    SimulatorConfig c;
    edit(c);
    expectInputError([&] { simulateTrace(c); }, {key});
  };
  bad([](SimulatorConfig &c) { c.budget = -1; }, "draft.budget");
  bad([](SimulatorConfig &c) { c.max_depth = 0; }, "draft.max_depth");
  bad([](SimulatorConfig &c) { c.agreement = 1.5; }, "target.agreement");
  bad([](SimulatorConfig &c) { c.num_slots = 100; }, "pool.num_slots");
  bad([](SimulatorConfig &c) { c.steps = 0; }, "steps");
  bad([](SimulatorConfig &c) { c.prompt.min = 0; }, "prompt.min");
  bad([](SimulatorConfig &c) { c.output.max = c.output.min - 1; }, "output.max");
  bad([](SimulatorConfig &c) { c.concurrency = 0; }, "arrivals.concurrency");
  bad([](SimulatorConfig &c) { c.shape.num_heads = 0; }, "model.num_heads");
  bad([](SimulatorConfig &c) { c.sharpness = 0; }, "target.sharpness");
  bad([](SimulatorConfig &c) { c.initial_run = -1; }, "pool.initial_run");
  expectInputError([] { parseLengthKind("zipf", "prompt.dist"); }, {"prompt.dist", "zipf"});
}

TEST(TraceSimulator, lengthDistributionsStayInRange)
{
  SplitMix64 rng(5);
  LengthDistribution u{LengthDistribution::Kind::kUniform, 0, 10, 20, 0, 0};
  LengthDistribution l{LengthDistribution::Kind::kLogNormal, 0, 5, 5000, 300, 1.5};
  std::set<int64_t> seen;
  double sum = 0;
  for (int i = 0; i < 20000; ++i)
  {
    int64_t const a = u.sample(rng), b = l.sample(rng);
    ASSERT_GE(a, 10);
    ASSERT_LE(a, 20);
    ASSERT_GE(b, 5);
    ASSERT_LE(b, 5000);
    seen.insert(a);
    sum += std::log(static_cast<double>(b));
  }
  EXPECT_EQ(seen.size(), 11u);
  EXPECT_NEAR(std::exp(sum / 20000), 300, 30);  // geometric mean ~ the median
}
} // namespace canopy::test
