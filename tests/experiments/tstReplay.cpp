/// \file tstReplay.cpp
/// \brief The replay engine end to end on the host: rows per combination, bucket grouping,
/// checks that fail, identical inputs and errors across runs, deterministic step sampling.
#include "canopy_BatchStorage.hpp"
#include "canopy_Config.hpp"
#include "canopy_Design.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_Registry.hpp"
#include "canopy_InputLimits.hpp"
#include "canopy_ReplayEngine.hpp"
#include "canopy_StepSource.hpp"
#include "canopy_TestDesigns.hpp"
#ifdef CANOPY_HAVE_TRACE
#include "canopy_TraceWriter.hpp"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace
{
using namespace canopy;

/// A design that is wrong on purpose: the engine must mark it FAILED, never time it silently.
class WrongDesign final : public Design
{
public:
  std::string name() const override { return "test-wrong"; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  void plan(PlanBounds const &, DesignOptions const &) override {}
  void run(BatchRef const &b, ExecContext const &) override
  {
    for (int64_t i = 0; i < b.num_nodes * b.num_heads * D_V; ++i)
      b.out[i] = 0x3f80;  // 1.0 everywhere
  }
};

ExperimentConfig smallConfig()
{
  return parseExperimentConfig(R"(
[experiment]
repetitions = 2
warmup = 0
[inputs]
group_by = "batch"
[[inputs.sweep]]
batch = [3]
heads = [2]
tree = [6]
prefix = [40]
ragged = true
steps = 2
[designs]
names = ["reference"]
[options]
mask = ["tree", "parents"]
buckets = [1, 4]
)",
                               "small.toml");
}

#ifdef CANOPY_HAVE_TRACE
TEST(Replay, aTraceWhoseSeededPoolCannotFitIsRefusedBeforeAnyWork)
{
  // A small, valid trace whose one request names slot 2^35 - 1 of a pool of 2^35: a seeded pool over
  // the slots it uses is 40 TB. The estimate says so from the metadata alone, by the trace's name.
  TraceContent t;
  t.source = "test";
  t.shape.num_heads = 8;
  t.num_slots = int64_t{1} << 35;
  TraceRequest r;
  r.request_id = 1;
  r.spec.prefix_slots = {0, t.num_slots - 1};
  r.spec.parent = {-1, 0};
  r.spec.tree_slots = {1, 2};
  t.steps.push_back(TraceStep{{r}});
  std::string const path = (std::filesystem::temp_directory_path() / "canopy_huge_pool.h5").string();
  writeTrace(path, t);
  auto const src = makeTraceSource(path, 0, 1);
  EXPECT_GE(src->hostBytes(), static_cast<double>(t.num_slots) * D_QK * 2);
  try
  {
    requireFitsInMemory(src->hostBytes(), "inputs.traces[0]", path, "--no-memory-check");
    ADD_FAILURE() << "a 40 TB pool was accepted";
  }
  catch (InputError const &e)
  {
    std::string const what = e.what();
    EXPECT_NE(what.find("inputs.traces[0]: " + path + " needs about"), std::string::npos) << what;
    EXPECT_NE(what.find("--no-memory-check"), std::string::npos) << what;
  }
  std::filesystem::remove(path);
}
#endif

#ifdef CANOPY_HAVE_TRACE
TEST(Replay, anFp8TraceIsEstimatedAndReplayedAtItsStoredWidth)
{
  // The same step with a bf16 pool and with each FP8 pool: the memory estimate counts the pool's
  // stored bytes (not bf16's), the steps carry the trace's dtype and scale, and canopy run's engine
  // replays and checks them with the reference design.
  TraceContent t;
  t.source = "test";
  t.shape.num_heads = 2;
  t.num_slots = 64;
  TraceRequest r;
  r.request_id = 1;
  r.spec.prefix_slots = {3, 4, 5, 9};
  r.spec.parent = {-1, 0, 0};
  r.spec.tree_slots = {10, 11, 12};
  t.steps.push_back(TraceStep{{r}});
  auto const dir = std::filesystem::temp_directory_path();
  std::string const bf16_path = (dir / "canopy_fp8_replay_bf16.h5").string();
  writeTrace(bf16_path, t);
  double const bf16_bytes = makeTraceSource(bf16_path, 0, 1)->hostBytes();
  double const slots_used = 13;  // the seeded pool covers slots 0 .. 12
  for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    SCOPED_TRACE(toString(dtype));
    t.kv_dtype = dtype;
    t.kv_scale = dtype == KvDtype::kFp8E4m3BlockScaled ? 1.0f : 0.25f;
    std::string const path = (dir / ("canopy_fp8_replay_" + toString(dtype) + ".h5")).string();
    writeTrace(path, t);
    auto const src = makeTraceSource(path, 0, 1);
    EXPECT_DOUBLE_EQ(bf16_bytes - src->hostBytes(), slots_used * (2 * D_QK - kvRowBytes(dtype)));
    EXPECT_EQ(src->sharedPool(), nullptr) << "the shared pool is a bf16 one";
    EXPECT_EQ(src->axes().kv_dtype, dtype);
    HostProblem const p = src->problem(0, MaskLayout::kParents);
    EXPECT_EQ(p.kv_dtype, dtype);
    EXPECT_EQ(p.kv_scale, t.kv_scale);
    EXPECT_TRUE(p.kv_pool.empty());
    EXPECT_EQ(p.kv_pool_fp8.size(), static_cast<size_t>(slots_used) * kvRowBytes(dtype));
    EXPECT_EQ(*src->sharedFp8Pool(), p.kv_pool_fp8) << "the seeded pool, shared by the steps";
    EXPECT_TRUE(src->stepWithoutPool(0, MaskLayout::kParents).kv_pool_fp8.empty());

    ExperimentConfig const c = parseExperimentConfig(R"(
[experiment]
repetitions = 1
warmup = 0
[inputs]
traces = [")" + path + R"("]
[designs]
names = ["reference"]
[options]
mask = ["parents"]
buckets = [1]
)",
                                                     "fp8.toml");
    ResultSet const rs = runExperiment(c);
    ASSERT_EQ(rs.rows.size(), 1u);
    EXPECT_EQ(rs.rows[0].status, RowStatus::kOk) << rs.rows[0].note;
    EXPECT_EQ(rs.rows[0].checked_steps, 1);
    EXPECT_GT(rs.rows[0].rel_l2, 0);
    EXPECT_LT(rs.rows[0].rel_l2, 4e-3);
    std::filesystem::remove(path);
  }
  std::filesystem::remove(bf16_path);
}
#endif

TEST(Replay, rowsPerCombinationAndBucket)
{
  ExperimentConfig const c = smallConfig();
  int64_t last_done = 0, last_total = 0;
  ResultSet const rs = runExperiment(c, [&](int64_t d, int64_t t) {
    EXPECT_GE(d, last_done);
    last_done = d;
    last_total = t;
  });
  EXPECT_GT(last_total, 0) << "the progress callback was never called";
  EXPECT_EQ(last_done, last_total);
  ASSERT_EQ(rs.rows.size(), 2u);  // 2 masks x 1 design x bucket 4 (batch 3 padded)
  for (auto const &r : rs.rows)
  {
    EXPECT_EQ(r.group, "bucket 4");
    EXPECT_EQ(r.status, RowStatus::kOk) << r.note;
    EXPECT_EQ(r.steps, 2);
    EXPECT_EQ(r.samples, 4);
    EXPECT_EQ(r.checked_steps, 2);
    EXPECT_GT(r.median, 0);
    EXPECT_GT(r.flops, 0);
    EXPECT_DOUBLE_EQ(r.speedup, 1.0);
  }
  EXPECT_FALSE(rs.environment.at("git").empty());
  EXPECT_EQ(rs.environment.at("seed"), "1");
}

TEST(Replay, sameConfigSameInputsSameErrors)
{
  ExperimentConfig const c = smallConfig();
  ResultSet const a = runExperiment(c), b = runExperiment(c);
  ASSERT_EQ(a.rows.size(), 2u);
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i)
  {
    // Checked, with a bf16 output's nonzero error: equal zeros would say nothing about the inputs.
    EXPECT_EQ(a.rows[i].checked_steps, 2);
    EXPECT_GT(a.rows[i].rel_l2, 0);
    EXPECT_EQ(a.rows[i].rel_l2, b.rows[i].rel_l2);
    EXPECT_EQ(a.rows[i].max_abs, b.rows[i].max_abs);
    EXPECT_EQ(a.rows[i].flops, b.rows[i].flops);
  }
}

/// A design whose kernels do not serve trees of more than 4 nodes.
class SmallTreesOnly final : public Design
{
public:
  std::string name() const override { return "test-small-trees"; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  void plan(PlanBounds const &b, DesignOptions const &) override
  {
    if (b.max_tree > 4)
      throw Unsupported("test-small-trees: trees of " + std::to_string(b.max_tree) + " nodes exceed its 4");
  }
  void run(BatchRef const &, ExecContext const &) override {}
};

TEST(Replay, aDesignThatCannotServeAShapeIsReportedAndTheOthersRun)
{
  test::ScopedDesign const small("test-small-trees", "test only", [] { return std::make_unique<SmallTreesOnly>(); });
  ExperimentConfig c = smallConfig();
  c.designs = {"reference", "test-small-trees"};
  c.group_by = "trace";
  ResultSet const rs = runExperiment(c);
  ASSERT_EQ(rs.rows.size(), 4u);
  for (auto const &r : rs.rows)
  {
    SCOPED_TRACE(r.design + " " + toString(r.mask));
    if (r.design == "test-small-trees")
    {
      EXPECT_EQ(r.status, RowStatus::kUnsupported);
      EXPECT_NE(r.note.find("exceed its 4"), std::string::npos) << r.note;
    }
    else
    {
      EXPECT_EQ(r.status, RowStatus::kOk);
      EXPECT_GT(r.checked_steps, 0);
    }
  }
  auto const names = designNames(true);
  EXPECT_NE(std::find(names.begin(), names.end(), "test-small-trees"), names.end());
}

TEST(Replay, wrongDesignIsMarkedFailed)
{
  test::ScopedDesign const wrong("test-wrong", "always 1.0 (test only)", [] { return std::make_unique<WrongDesign>(); });
  ExperimentConfig c = smallConfig();
  c.designs = {"reference", "test-wrong"};
  c.group_by = "trace";
  ResultSet const rs = runExperiment(c);
  ASSERT_EQ(rs.rows.size(), 4u);
  for (auto const &r : rs.rows)
  {
    if (r.design == "test-wrong")
    {
      EXPECT_EQ(r.status, RowStatus::kFailed);
      EXPECT_EQ(r.samples, 0) << "a failing design must not be timed";
      EXPECT_NE(r.note.find("rel L2"), std::string::npos);
    }
    else
      EXPECT_EQ(r.status, RowStatus::kOk);
  }
}

TEST(Replay, batchBeyondLargestBucketIsAnInputError)
{
  ExperimentConfig c = smallConfig();
  c.buckets = {1, 2};
  c.sweeps[0].ragged = false;
  EXPECT_THROW(runExperiment(c), InputError);
}

TEST(Replay, stepSamplingIsDeterministic)
{
  // A pure function of (seed, step, rate): the same answers whatever order the steps are asked in
  // (no hidden state), a different sample for another seed, the rate's share of steps, and a
  // higher rate checks a superset of the steps.
  int const n = 1000;
  std::vector<bool> forward(n), backward(n);
  for (int s = 0; s < n; ++s)
    forward[s] = stepChecked(7, s, 0.3);
  for (int s = n - 1; s >= 0; --s)
    backward[s] = stepChecked(7, s, 0.3);
  EXPECT_EQ(forward, backward);
  int checked = 0, differs = 0;
  for (int s = 0; s < n; ++s)
  {
    checked += forward[s];
    differs += forward[s] != stepChecked(8, s, 0.3);
    if (forward[s])
      EXPECT_TRUE(stepChecked(7, s, 0.6)) << "step " << s << " checked at rate 0.3 but not at 0.6";
  }
  EXPECT_GT(checked, 240);
  EXPECT_LT(checked, 360);
  EXPECT_GT(differs, 200) << "the seed does not change the sample";
  EXPECT_TRUE(stepChecked(7, 5, 1.0));
  EXPECT_FALSE(stepChecked(7, 5, 0.0));
}

TEST(Replay, aTestDesignLeavesWithItsScope)
{
  {
    test::ScopedDesign const d("test-scoped", "test only", [] { return std::make_unique<WrongDesign>(); });
    EXPECT_NO_THROW(makeDesign("test-scoped"));
    EXPECT_THROW(test::ScopedDesign("test-scoped", "again", [] { return std::make_unique<WrongDesign>(); }),
                 std::logic_error);
  }
  EXPECT_THROW(makeDesign("test-scoped"), InputError);
}
} // namespace
