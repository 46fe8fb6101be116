/// \file tstReplayFp8.cpp
/// \brief FP8 KV caches in experiments (docs/experiments.md, "KV dtype"): the config keys and their
/// refusals, synthetic shapes and bf16 traces replayed in every dtype against the reference of the
/// quantised pool, designs that do not serve a dtype reported unsupported, the KV bytes of a step.
#include "canopy_Config.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_Design.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Merge.hpp"
#include "canopy_Bf16.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"
#include "canopy_ReplayEngine.hpp"
#include "canopy_StepSource.hpp"
#include "canopy_TestDesigns.hpp"
#ifdef CANOPY_HAVE_TRACE
#include "canopy_TraceWriter.hpp"
#endif

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

namespace
{
using namespace canopy;

std::string const DATA_DIR = std::string(CANOPY_CONFIG_DIR) + "/../../data";

/// The message of the InputError that parsing \p toml throws ("" when it parses).
std::string refusal(std::string const &toml)
{
  try
  {
    parseExperimentConfig(toml, "fp8.toml");
  }
  catch (InputError const &e)
  {
    return e.what();
  }
  return "";
}

std::string const DESIGNS = "[designs]\nnames = [\"reference\"]\n";

TEST(Fp8Config, keysParseAsAxesWithTheirDefaults)
{
  ExperimentConfig const d = parseExperimentConfig("[[inputs.sweep]]\n" + DESIGNS, "defaults.toml");
  EXPECT_TRUE(d.kv_dtypes.empty()) << "inputs as stored by default";
  EXPECT_EQ(d.kv_scale, 1.0f);
  ASSERT_EQ(d.sweeps.size(), 1u);
  EXPECT_EQ(d.sweeps[0].kv_dtypes, std::vector<KvDtype>{KvDtype::kBf16});
  EXPECT_EQ(d.numerics, std::vector<Numerics>{Numerics::kDequant});

  ExperimentConfig const c = parseExperimentConfig(R"(
[inputs]
kv_dtype = ["bf16", "fp8-e4m3"]
kv_scale = 0.25
[[inputs.sweep]]
tree = 5
[[inputs.sweep]]
kv_dtype = "fp8-e5m2"
kv_scale = 2
[designs]
names = ["reference"]
[options]
numerics = "dequant"
)",
                                                   "axes.toml");
  EXPECT_EQ(c.kv_dtypes, (std::vector<KvDtype>{KvDtype::kBf16, KvDtype::kFp8E4m3}));
  EXPECT_EQ(c.kv_scale, 0.25f);
  ASSERT_EQ(c.sweeps.size(), 2u);
  EXPECT_EQ(c.sweeps[0].kv_dtypes, c.kv_dtypes) << "a sweep takes [inputs]' dtypes unless it sets its own";
  EXPECT_EQ(c.sweeps[0].kv_scale, 0.25f);
  EXPECT_EQ(c.sweeps[1].kv_dtypes, std::vector<KvDtype>{KvDtype::kFp8E5m2});
  EXPECT_EQ(c.sweeps[1].kv_scale, 2.0f);

  ExperimentConfig const m = parseExperimentConfig(R"(
[[inputs.sweep]]
kv_dtype = ["fp8-e4m3", "fp8-e5m2"]
[designs]
names = ["reference"]
[options]
numerics = ["dequant", "fp8-mma"]
)",
                                                   "mma.toml");
  EXPECT_EQ(m.numerics, (std::vector<Numerics>{Numerics::kDequant, Numerics::kFp8Mma}));
}

TEST(Fp8Config, badValuesAreRefusedNamingTheKey)
{
  auto expectRefused = [](std::string const &toml, std::string const &key) {
    std::string const what = refusal(toml);
    EXPECT_NE(what.find(key), std::string::npos) << "expected a refusal naming " << key << ", got: '" << what << "'";
  };
  std::string const sweep = "[[inputs.sweep]]\n";
  expectRefused("[inputs]\nkv_dtype = \"fp8\"\n" + sweep + DESIGNS, "inputs.kv_dtype[0]");
  expectRefused("[inputs]\nkv_dtype = [\"bf16\", \"fp16\"]\n" + sweep + DESIGNS, "inputs.kv_dtype[1]");
  expectRefused("[inputs]\nkv_dtype = [\"bf16\", \"bf16\"]\n" + sweep + DESIGNS, "inputs.kv_dtype");
  expectRefused("[inputs]\nkv_dtype = 8\n" + sweep + DESIGNS, "inputs.kv_dtype");
  expectRefused(sweep + "kv_dtype = \"e4m3\"\n" + DESIGNS, "inputs.sweep[0].kv_dtype[0]");
  for (char const *scale : {"0", "-1", "nan", "inf", "-inf", "1e-50", "1e40", "\"1\""})
  {
    SCOPED_TRACE(scale);
    expectRefused("[inputs]\nkv_scale = " + std::string(scale) + "\n" + sweep + DESIGNS, "inputs.kv_scale");
    expectRefused(sweep + "kv_scale = " + std::string(scale) + "\n" + DESIGNS, "inputs.sweep[0].kv_scale");
  }
  expectRefused(sweep + DESIGNS + "[options]\nnumerics = \"fp8\"\n", "options.numerics[0]");
  expectRefused(sweep + DESIGNS + "[options]\nnumerics = [\"dequant\", \"dequant\"]\n", "options.numerics");
}

TEST(Fp8Config, numericsUndefinedForEveryInputIsRefusedUpFront)
{
  // fp8-mma casts Q and P to the pool's own FP8 type: no meaning for a bf16 or block-scaled pool.
  // A numerics that meets no input it has a meaning for is a mistake; one that meets some gives
  // the others' rows as skipped (NumericsForSomeInputs below).
  std::string const mma = "[options]\nnumerics = [\"dequant\", \"fp8-mma\"]\n";
  std::string what = refusal("[[inputs.sweep]]\n" + DESIGNS + mma);
  EXPECT_NE(what.find("options.numerics[1]"), std::string::npos) << what;
  EXPECT_NE(what.find("inputs.sweep[0].kv_dtype (not set: bf16)"), std::string::npos) << what;
  what = refusal("[inputs]\nkv_dtype = [\"bf16\", \"fp8-e4m3-blockscaled\"]\n[[inputs.sweep]]\n" + DESIGNS + mma);
  EXPECT_NE(what.find("options.numerics[1]"), std::string::npos) << what;
  EXPECT_NE(what.find("inputs.kv_dtype[0]"), std::string::npos) << what;
  EXPECT_EQ(refusal("[[inputs.sweep]]\nkv_dtype = [\"fp8-e5m2\", \"fp8-e4m3\"]\n" + DESIGNS + mma), "");
  EXPECT_EQ(refusal("[inputs]\nkv_dtype = [\"fp8-e4m3\", \"fp8-e4m3-blockscaled\"]\n[[inputs.sweep]]\n" + DESIGNS + mma), "");
  EXPECT_EQ(refusal("[[inputs.sweep]]\nkv_dtype = [\"fp8-e5m2\", \"bf16\"]\n" + DESIGNS + mma), "");
#ifdef CANOPY_HAVE_TRACE
  // A trace replayed as stored (bf16: every trace today) meets fp8-mma when its sources are made.
  ExperimentConfig c = parseExperimentConfig("[inputs]\ntraces = [\"" + DATA_DIR + "/ddtree_values_h8.h5\"]\n" + DESIGNS,
                                             "trace.toml");
  c.numerics = {Numerics::kFp8Mma};
  try
  {
    makeSources(c);
    ADD_FAILURE() << "fp8-mma on a bf16 trace was accepted";
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find("options.numerics[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inputs.traces[0]"), std::string::npos) << e.what();
  }
  // Beside an FP8 sweep the trace's fp8-mma rows are skipped instead.
  c.sweeps.push_back(ShapeSweep{});
  c.sweeps.back().kv_dtypes = {KvDtype::kFp8E4m3};
  c.sweeps.back().tree = {5};
  c.sweeps.back().prefix = {16};
  EXPECT_EQ(makeSources(c).size(), 2u);
#endif
}

/// One run puts bf16, FP8 dequant and FP8 fp8-mma side by side: the bf16 input's fp8-mma row is
/// skipped with the reason, every other row runs and is checked in its own numerics.
TEST(Fp8Config, numericsForSomeInputsSkipTheOthersRows)
{
  ExperimentConfig c = parseExperimentConfig(R"(
[inputs]
kv_dtype = ["bf16", "fp8-e4m3"]
[[inputs.sweep]]
tree = 9
prefix = 40
heads = 2
[designs]
names = ["reference"]
[options]
numerics = ["dequant", "fp8-mma"]
)",
                                             "side-by-side.toml");
  c.repetitions = 1;
  c.warmup = 0;
  ResultSet const rs = runExperiment(c);
  ASSERT_EQ(rs.rows.size(), 4u);
  int skipped = 0;
  for (ResultRow const &r : rs.rows)
  {
    std::string const what = r.input + " " + toString(r.numerics);
    if (r.axes.kv_dtype == KvDtype::kBf16 && r.numerics == Numerics::kFp8Mma)
    {
      ++skipped;
      EXPECT_EQ(r.status, RowStatus::kSkipped) << what;
      EXPECT_NE(r.note.find("numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not bf16"), std::string::npos)
          << what << ": " << r.note;
    }
    else
      EXPECT_EQ(r.status, RowStatus::kOk) << what << ": " << r.note;
  }
  EXPECT_EQ(skipped, 1);
}

TEST(Fp8Config, anFp8TraceIsNotReplayedAsAnotherDtype)
{
  // A bf16 pool can be quantised into any dtype; an FP8 pool's values are gone.
  EXPECT_EQ(traceReplayDtype("t.h5", KvDtype::kBf16, std::nullopt, "inputs.kv_dtype"), KvDtype::kBf16);
  EXPECT_EQ(traceReplayDtype("t.h5", KvDtype::kBf16, KvDtype::kFp8E5m2, "inputs.kv_dtype"), KvDtype::kFp8E5m2);
  EXPECT_EQ(traceReplayDtype("t.h5", KvDtype::kFp8E4m3, std::nullopt, "inputs.kv_dtype"), KvDtype::kFp8E4m3);
  EXPECT_EQ(traceReplayDtype("t.h5", KvDtype::kFp8E4m3, KvDtype::kFp8E4m3, "inputs.kv_dtype"), KvDtype::kFp8E4m3);
  for (KvDtype asked : {KvDtype::kBf16, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    try
    {
      traceReplayDtype("t.h5", KvDtype::kFp8E4m3, asked, "inputs.kv_dtype");
      ADD_FAILURE() << "an fp8-e4m3 trace replayed as " << toString(asked);
    }
    catch (InputError const &e)
    {
      std::string const what = e.what();
      EXPECT_EQ(what.rfind("inputs.kv_dtype: trace 't.h5'", 0), 0u) << what;
      EXPECT_NE(what.find(toString(asked)), std::string::npos) << what;
    }
  }
}

TEST(Fp8Cost, aStepReadsItsKvRowsAtTheirStoredWidth)
{
  GeneratorOptions g;
  g.batch = 3;
  g.tree_size = 9;
  g.prefix_len = 100;
  g.with_values = false;
  BatchMetadata const m = generateProblem(g).meta;
  double const rows = 3.0 * (100 + 9);
  Cost const bf16 = costOf(m, 8);
  EXPECT_DOUBLE_EQ(bf16.kv_bytes, rows * 1152);
  for (KvDtype d : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    Cost const c = costOf(m, 8, d);
    SCOPED_TRACE(toString(d));
    EXPECT_DOUBLE_EQ(c.kv_bytes, rows * kvRowBytes(d));
    EXPECT_DOUBLE_EQ(c.bytes_min, bf16.bytes_min - rows * (1152 - kvRowBytes(d)));  // q, out, slots, mask: the same
    EXPECT_DOUBLE_EQ(c.tile_copy_bytes, bf16.tile_copy_bytes * kvRowBytes(d) / 1152);
    EXPECT_DOUBLE_EQ(c.flops, bf16.flops);
    // The memory side of the roofline halves for the one-scale dtypes.
    EXPECT_LT(rooflineSeconds(c, 1e30, 1e9), rooflineSeconds(bf16, 1e30, 1e9));
  }
}

ExperimentConfig sweepConfig(std::string const &dtypes, std::string const &extra = "")
{
  return parseExperimentConfig(R"(
[experiment]
repetitions = 1
warmup = 0
[inputs]
kv_dtype = )" + dtypes + R"(
kv_scale = 0.375
[[inputs.sweep]]
batch = [2]
heads = [2]
tree = [7]
prefix = [90]
ragged = true
steps = 2
values = "tree-dominant"
[designs]
names = ["reference", "kokkos-team", "kokkos-kk"]
[options]
mask = ["parents"]
nsplit = [2]
buckets = [2]
)" + extra,
                               "fp8-sweep.toml");
}

std::map<std::string, ResultRow> byDesignAndDtype(ResultSet const &rs)
{
  std::map<std::string, ResultRow> out;
  for (ResultRow const &r : rs.rows)
    out[r.design + " " + toString(r.axes.kv_dtype) + " " + toString(r.numerics)] = r;
  return out;
}

TEST(Fp8Replay, everyDtypeIsReplayedAndCheckedAgainstTheReferenceOfItsQuantisedPool)
{
  ResultSet const rs = runExperiment(sweepConfig(R"(["bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled"])"));
  ASSERT_EQ(rs.rows.size(), 12u);  // 4 dtypes x 3 designs
  auto const rows = byDesignAndDtype(rs);
  double const bf16_kv = rows.at("reference bf16 dequant").kv_bytes;
  EXPECT_GT(bf16_kv, 0);
  for (KvDtype d : {KvDtype::kBf16, KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    SCOPED_TRACE(toString(d));
    ResultRow const &ref = rows.at("reference " + toString(d) + " dequant");
    EXPECT_EQ(ref.status, RowStatus::kOk) << ref.note;
    EXPECT_EQ(ref.checked_steps, 2);
    EXPECT_GT(ref.rel_l2, 0) << "checked against an fp64 reference, with a bf16 output's rounding";
    EXPECT_LT(ref.rel_l2, 1e-2);
    EXPECT_EQ(ref.samples, 2);
    EXPECT_DOUBLE_EQ(ref.kv_bytes, bf16_kv * kvRowBytes(d) / 1152);
    EXPECT_EQ(ref.axes.kv_scale, d == KvDtype::kFp8E4m3 || d == KvDtype::kFp8E5m2 ? 0.375 : 1.0);
    EXPECT_NE(ref.input.find(d == KvDtype::kBf16 ? "P=90" : toString(d)), std::string::npos) << ref.input;
    // kokkos-team dequantises every FP8 pool: its rows are checked like the reference's.
    ResultRow const &team = rows.at("kokkos-team " + toString(d) + " dequant");
    EXPECT_EQ(team.status, RowStatus::kOk) << team.note;
    EXPECT_EQ(team.checked_steps, 2);
    // kokkos-kk reads bf16 pools only: its FP8 rows say so, never a silent bf16 run.
    ResultRow const &kk = rows.at("kokkos-kk " + toString(d) + " dequant");
    if (d == KvDtype::kBf16)
      EXPECT_EQ(kk.status, RowStatus::kOk) << kk.note;
    else
    {
      EXPECT_EQ(kk.status, RowStatus::kUnsupported);
      EXPECT_NE(kk.note.find("reads bf16 KV pools only"), std::string::npos) << kk.note;
      EXPECT_EQ(kk.samples, 0);
      EXPECT_EQ(kk.checked_steps, 0);
    }
  }
  // The FP8 rows see other values than the bf16 ones (the same seed, quantised): the errors differ.
  EXPECT_NE(rows.at("reference fp8-e4m3 dequant").max_abs, rows.at("reference bf16 dequant").max_abs);
}

TEST(Fp8Replay, fp8MmaRowsAreCheckedWithTheirOwnNumerics)
{
  ResultSet const rs =
      runExperiment(sweepConfig(R"(["fp8-e4m3", "fp8-e5m2"])", "numerics = [\"dequant\", \"fp8-mma\"]\n"));
  ASSERT_EQ(rs.rows.size(), 12u);  // 2 dtypes x 2 numerics x 3 designs
  for (auto const &[key, r] : byDesignAndDtype(rs))
  {
    SCOPED_TRACE(key);
    if (r.design == "reference" || (r.design == "kokkos-team" && r.numerics == Numerics::kDequant))
    {
      EXPECT_EQ(r.status, RowStatus::kOk) << r.note;
      EXPECT_EQ(r.checked_steps, 2);
    }
    else
      EXPECT_EQ(r.status, RowStatus::kUnsupported);
  }
}

/// Serves every dtype but dequantises one-scale pools without their scale: a misread pool the
/// check must catch (the reference applies the scale).
class ScaleIgnored final : public Design
{
public:
  std::string name() const override { return "test-fp8-scale-ignored"; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  std::string whyNotServed(KvDtype, Numerics) const override { return ""; }
  void plan(PlanBounds const &b, DesignOptions const &o) override { requireServed(*this, b, o); }
  void run(BatchRef const &b, ExecContext const &) override
  {
    BatchRef wrong = b;
    wrong.kv_scale = 1.0f;
    std::vector<double> const out = referenceAttention(wrong);
    for (size_t i = 0; i < out.size(); ++i)
      b.out[i] = floatToBf16(static_cast<float>(out[i]));
  }
};

TEST(Fp8Replay, aDesignThatMisreadsTheScaleFails)
{
  test::ScopedDesign const wrong("test-fp8-scale-ignored", "test only", [] { return std::make_unique<ScaleIgnored>(); });
  ExperimentConfig c = sweepConfig(R"(["bf16", "fp8-e4m3"])");
  c.designs = {"reference", "test-fp8-scale-ignored"};
  auto const rows = byDesignAndDtype(runExperiment(c));
  EXPECT_EQ(rows.at("test-fp8-scale-ignored bf16 dequant").status, RowStatus::kOk)
      << "bf16 has no scale to ignore: " << rows.at("test-fp8-scale-ignored bf16 dequant").note;
  ResultRow const &bad = rows.at("test-fp8-scale-ignored fp8-e4m3 dequant");
  EXPECT_EQ(bad.status, RowStatus::kFailed) << bad.note;
  EXPECT_EQ(bad.samples, 0);
  EXPECT_EQ(rows.at("reference fp8-e4m3 dequant").status, RowStatus::kOk);
}

TEST(Fp8Replay, shardsOfADtypeSweepMergeIntoTheRowsOfOneRun)
{
  // Rows that differ only in the KV dtype are different rows: each shard holds its own, the merge
  // keeps both, in the unsharded order, and an FP8 row edited into bf16 is refused.
  ExperimentConfig const c = sweepConfig(R"(["bf16", "fp8-e4m3"])");
  ResultSet const whole = runExperiment(c);
  std::vector<ShardResults> shards;
  for (int k = 0; k < 2; ++k)
  {
    ExperimentConfig s = c;
    s.shard_index = k;
    s.shard_count = 2;
    shards.push_back({"shard" + std::to_string(k), resultSetFromJson(toJson(runExperiment(s)), "shard")});
  }
  ResultSet const merged = mergeShards(shards);
  ASSERT_EQ(merged.rows.size(), whole.rows.size());
  for (size_t i = 0; i < whole.rows.size(); ++i)
  {
    EXPECT_EQ(merged.rows[i].axes.kv_dtype, whole.rows[i].axes.kv_dtype) << i;
    EXPECT_EQ(merged.rows[i].numerics, whole.rows[i].numerics) << i;
    EXPECT_EQ(merged.rows[i].status, whole.rows[i].status) << i;
    EXPECT_EQ(merged.rows[i].kv_bytes, whole.rows[i].kv_bytes) << i;
  }
  for (auto &s : shards)
    for (auto &r : s.results.rows)
      if (r.axes.kv_dtype == KvDtype::kFp8E4m3)
      {
        r.axes.kv_dtype = KvDtype::kBf16;
        EXPECT_THROW(mergeShards(shards), InputError) << "a row's dtype edited by hand was merged";
        return;
      }
  ADD_FAILURE() << "no FP8 row in the shards";
}

#ifdef CANOPY_HAVE_TRACE
/// A small bf16 trace without values (the replay seeds its pool): 2 steps of 2 requests.
std::string smallTrace()
{
  TraceContent t;
  t.source = "test";
  t.shape.num_heads = 2;
  t.num_slots = 300;
  for (int s = 0; s < 2; ++s)
  {
    TraceStep step;
    for (int b = 0; b < 2; ++b)
    {
      TraceRequest r;
      r.request_id = b + 1;
      for (int64_t i = 0; i < 40 + 10 * s; ++i)
        r.spec.prefix_slots.push_back(b * 140 + i);
      r.spec.parent = {-1, 0, 0, 1, 3};
      for (int i = 0; i < 5; ++i)
        r.spec.tree_slots.push_back(b * 140 + 100 + 5 * s + i);
      step.requests.push_back(r);
    }
    t.steps.push_back(step);
  }
  std::string const path = (std::filesystem::temp_directory_path() /
                            ("canopy_fp8_trace_" + std::to_string(::getpid()) + ".h5")).string();
  writeTrace(path, t);
  return path;
}

TEST(Fp8Replay, aBf16TraceIsQuantisedOnLoad)
{
  // A trace with seeded values and one with recorded values: both quantised as a serving stack
  // writes the pool; the recorded output (of the bf16 pool) gives way to the reference of the FP8 pool.
  std::string const seeded = smallTrace();
  for (std::string const &trace : {seeded, DATA_DIR + "/ddtree_values_h8.h5"})
  {
    SCOPED_TRACE(trace);
    ExperimentConfig c = parseExperimentConfig(R"(
[experiment]
repetitions = 1
warmup = 0
[inputs]
max_steps = 2
kv_dtype = ["bf16", "fp8-e5m2", "fp8-e4m3-blockscaled"]
traces = [")" + trace + R"("]
[designs]
names = ["reference"]
)",
                                               "trace-fp8.toml");
    ResultSet const rs = runExperiment(c);
    ASSERT_EQ(rs.rows.size(), 3u);
    std::vector<KvDtype> seen;
    for (ResultRow const &r : rs.rows)
    {
      SCOPED_TRACE(r.input);
      seen.push_back(r.axes.kv_dtype);
      EXPECT_EQ(r.status, RowStatus::kOk) << r.note;
      EXPECT_EQ(r.checked_steps, 2);
      EXPECT_GT(r.kv_bytes, 0);
      if (r.axes.kv_dtype != KvDtype::kBf16)  // against the fp64 reference, not a recorded bf16 output
        EXPECT_GT(r.rel_l2, 0);
    }
    EXPECT_EQ(seen, (std::vector<KvDtype>{KvDtype::kBf16, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled}));
    EXPECT_DOUBLE_EQ(rs.rows[1].kv_bytes, rs.rows[0].kv_bytes / 2);
  }
  std::filesystem::remove(seeded);
}
#endif

TEST(Fp8Replay, theAcceptanceConfigRunsOnTheHostWithTheReferenceInASmallMode)
{
  // experiments/configs/fp8.toml is the GPU acceptance run; here its keys are parsed as written
  // (the designs swapped for the reference, which every build has) and a small share of it runs.
  std::ifstream in(std::string(CANOPY_CONFIG_DIR) + "/fp8.toml");
  ASSERT_TRUE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t const at = text.find("names = [");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('\n', at) - at, "names = [\"reference\"]");
  size_t const base = text.find("baseline = ");
  ASSERT_NE(base, std::string::npos);
  text.replace(base, text.find('\n', base) - base, "baseline = \"reference\"");
  ExperimentConfig c = parseExperimentConfig(text, "fp8.toml");
  EXPECT_EQ(c.kv_dtypes, (std::vector<KvDtype>{KvDtype::kBf16, KvDtype::kFp8E4m3}));
  EXPECT_EQ(c.numerics, std::vector<Numerics>{Numerics::kDequant});
  EXPECT_EQ(c.modes, std::vector<ExecMode>{ExecMode::kGraph});
  EXPECT_EQ(c.l2_flush, std::vector<bool>{true});
  ASSERT_EQ(c.sweeps.size(), 1u);
  EXPECT_EQ(c.sweeps[0].batch, (std::vector<int>{1, 8}));
  EXPECT_EQ(c.sweeps[0].tree, (std::vector<int>{16, 17, 32, 64, 65, 256, 1024}));
  EXPECT_EQ(c.sweeps[0].prefix, (std::vector<int64_t>{4096, 16384, 65536}));
  c.sweeps[0].batch = {1};
  c.sweeps[0].tree = {17};
  c.sweeps[0].prefix = {64};
  c.modes = {ExecMode::kEager};  // host designs are not captured
  c.l2_flush = {false};
  c.repetitions = 1;
  c.warmup = 0;
  ResultSet const rs = runExperiment(c);
  ASSERT_EQ(rs.rows.size(), 2u);
  for (ResultRow const &r : rs.rows)
    EXPECT_EQ(r.status, RowStatus::kOk) << r.input << ": " << r.note;
  EXPECT_EQ(rs.rows[1].axes.kv_dtype, KvDtype::kFp8E4m3);
}
} // namespace
