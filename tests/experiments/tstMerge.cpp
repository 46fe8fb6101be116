/// \file tstMerge.cpp
/// \brief Sharded runs (--shard K/N) and canopy merge: three shards merged give the unsharded run's
/// rows (everything but the timings), and every kind of mismatched shard set is refused by name.
#include "canopy_Error.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_Merge.hpp"
#include "canopy_ReplayEngine.hpp"
#include "canopy_Results.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

/// Two inputs x two option combinations x two designs: four work units for three shards, so one
/// shard holds two units and every shard holds both designs of each of its units.
ExperimentConfig config()
{
  return parseExperimentConfig(R"(
[experiment]
name = "shards"
repetitions = 2
warmup = 0
baseline = "reference"
[[inputs.sweep]]
batch = [1, 2]
heads = [2]
tree = [5]
prefix = [24]
[designs]
names = ["reference", "kokkos-team"]
[options]
mask = ["tree", "parents"]
nsplit = [2]
buckets = [1, 2]
)",
                               "shards.toml");
}

std::vector<ShardResults> runShards(int n)
{
  std::vector<ShardResults> out;
  for (int k = 0; k < n; ++k)
  {
    ExperimentConfig c = config();
    c.shard_index = k;
    c.shard_count = n;
    out.push_back({"shard" + std::to_string(k), runExperiment(c)});
  }
  return out;
}

/// What must not depend on sharding (timings may).
void expectSameRows(ResultSet const &a, ResultSet const &b)
{
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i)
  {
    ResultRow const &x = a.rows[i], &y = b.rows[i];
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_EQ(x.input, y.input);
    EXPECT_EQ(x.group, y.group);
    EXPECT_EQ(x.design, y.design);
    EXPECT_EQ(x.path, y.path);
    EXPECT_EQ(x.mask, y.mask);
    EXPECT_EQ(x.nsplit, y.nsplit);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.steps, y.steps);
    EXPECT_EQ(x.checked_steps, y.checked_steps);
    EXPECT_EQ(x.rel_l2, y.rel_l2);
    EXPECT_EQ(x.max_abs, y.max_abs);
    EXPECT_EQ(x.flops, y.flops);
    EXPECT_EQ(x.order, y.order);
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.speedup > 0, y.speedup > 0);
  }
}

TEST(Shards, mergedShardsGiveTheRowsOfOneRun)
{
  ResultSet const whole = runExperiment(config());
  // 2 inputs x 2 masks x 2 designs, each checked: equal empty or unchecked rows would prove nothing.
  ASSERT_EQ(whole.rows.size(), 8u);
  for (auto const &r : whole.rows)
  {
    EXPECT_EQ(r.status, RowStatus::kOk) << r.design << " " << r.input << ": " << r.note;
    EXPECT_GT(r.checked_steps, 0);
    EXPECT_GT(r.rel_l2, 0);
    EXPECT_EQ(r.device.rfind("host: ", 0), 0u) << "every row names the device it ran on, got " << r.device;
  }
  std::vector<ShardResults> const shards = runShards(3);
  for (auto const &s : shards)
    for (auto const &r : s.results.rows)
      EXPECT_GT(r.speedup, 0) << s.source << ": " << r.design << " has no baseline row beside it";
  ResultSet const merged = mergeShards(shards);
  expectSameRows(whole, merged);
  EXPECT_EQ(merged.environment.at("shard"), "merged 3 shards");
  // A shard's results survive their own JSON round trip (what canopy merge reads).
  ResultSet const back = resultSetFromJson(toJson(shards[1].results), "shard1/results.json");
  expectSameRows(shards[1].results, back);
  EXPECT_EQ(back.environment, shards[1].results.environment);
  EXPECT_EQ(rowsIdentityDigest(back.rows), back.environment.at("rows_identity"));
}

TEST(Shards, shardsSplitByInputAndOptionsNeverByDesign)
{
  for (auto const &s : runShards(4))
  {
    ASSERT_EQ(s.results.rows.size(), 2u) << s.source << ": one unit, both designs";
    EXPECT_EQ(s.results.rows[0].input, s.results.rows[1].input);
    EXPECT_EQ(s.results.rows[0].mask, s.results.rows[1].mask);
    EXPECT_NE(s.results.rows[0].design, s.results.rows[1].design);
  }
}

/// Expects mergeShards to refuse, with \p needle in the message.
void expectRefused(std::vector<ShardResults> const &shards, std::string const &needle, MergeOptions const &o = {})
{
  try
  {
    mergeShards(shards, o);
    ADD_FAILURE() << "merged, expected a refusal mentioning \"" << needle << "\"";
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Shards, mergeRefusesShardsThatDoNotBelongTogether)
{
  std::vector<ShardResults> const good = runShards(3);
  ASSERT_NO_THROW(mergeShards(good));

  auto with = [&](int i, std::string const &key, std::string const &value) {
    std::vector<ShardResults> s = good;
    s[i].results.environment[key] = value;
    return s;
  };
  expectRefused(with(1, "config_hash", "0000"), "shard1: config_hash");
  expectRefused(with(2, "canopy_build", "feedbeef"), "shard2: canopy_build");
  expectRefused(with(1, "seed", "7"), "shard1: seed");
  expectRefused(with(2, "shard", "2/4"), "split into 4 shards");
  expectRefused(with(0, "shard", "x"), "expected K/N");

  std::vector<ShardResults> other_experiment = good;
  other_experiment[1].results.experiment = "another";
  expectRefused(other_experiment, "shard1: experiment");

  std::vector<ShardResults> missing(good.begin(), good.begin() + 2);
  expectRefused(missing, "shard(s) 2 of 3 missing");

  std::vector<ShardResults> twice = good;
  twice[2] = good[1];
  twice[2].source = "copy-of-shard1";
  expectRefused(twice, "given twice");

  std::vector<ShardResults> overlap = good;
  overlap[2].results.rows.push_back(good[0].results.rows.front());
  expectRefused(overlap, "overlapping shards");

  // Inputs are compared by content: a trace regenerated at the same path is another trace.
  expectRefused(with(1, "trace_hashes", "data/t.h5 0123abcd"), "shard1: trace_hashes");
  expectRefused(with(1, "layout", "sources=3 combinations=4 designs=2"), "shard1: layout");

  // Rows edited by hand: each shard must hold exactly the rows its config gives it.
  std::vector<ShardResults> removed = good;
  removed[1].results.rows.pop_back();
  expectRefused(removed, "shard1: row order");
  std::vector<ShardResults> duplicated = good;
  duplicated[0].results.rows.push_back(good[0].results.rows.back());
  expectRefused(duplicated, "appears twice in the shard");
  std::vector<ShardResults> recounted = with(2, "rows", "99");
  expectRefused(recounted, "shard2: holds");

  // A row whose identity was edited (what it ran changed, its place kept) is not a row of the run.
  std::vector<std::function<void(ResultRow &)>> const edits{
      [](ResultRow &r) { r.design = r.design == "reference" ? "kokkos-team" : "reference"; },
      [](ResultRow &r) { r.mask = r.mask == MaskLayout::kTree ? MaskLayout::kParents : MaskLayout::kTree; },
      [](ResultRow &r) { r.nsplit += 1; },
      [](ResultRow &r) { r.axes.trace = "data/other.h5"; },
      [](ResultRow &r) { r.axes.prefix *= 2; },
  };
  for (size_t e = 0; e < edits.size(); ++e)
  {
    SCOPED_TRACE("edit " + std::to_string(e));
    std::vector<ShardResults> edited = good;
    edits[e](edited[1].results.rows.front());
    expectRefused(edited, "shard1: its rows are not the ones the run wrote");
  }
  std::vector<ShardResults> const mixed = with(1, "device", "another GPU");
  expectRefused(mixed, "--allow-mixed-devices");
  MergeOptions allow;
  allow.allow_mixed_devices = true;
  EXPECT_NO_THROW(mergeShards(mixed, allow));

  expectRefused({}, "no shard results");
}

TEST(Shards, unreadableResultsNameTheFileAndField)
{
  EXPECT_THROW(resultSetFromJson("{not json", "a/results.json"), InputError);
  try
  {
    resultSetFromJson(R"({"schema": 2, "experiment": "x", "description": "", "baseline": "", "repetitions": 1,
                          "environment": {}, "rows": [{"input": "i"}]})",
                      "b/results.json");
    ADD_FAILURE() << "accepted a row without its fields";
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find("b/results.json: rows[0]: missing field \"group\""), std::string::npos)
        << e.what();
  }
}
} // namespace
