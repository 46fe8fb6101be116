/// \file tstExperimentConfig.cpp
/// \brief Config parsing: defaults, lists, every bad key or value rejected with the key named; buckets.
#include "canopy_Error.hpp"
#include "canopy_ExperimentConfig.hpp"

#include <gtest/gtest.h>

#include <filesystem>

namespace
{
using namespace canopy;

std::string const kMinimal = R"(
[inputs]
[[inputs.sweep]]
batch = [1, 4]
tree = 17
prefix = [0, 100]
[designs]
names = ["reference"]
)";

TEST(ExperimentConfig, minimalConfigGetsDefaults)
{
  auto const c = parseExperimentConfig(kMinimal, "minimal.toml");
  ASSERT_EQ(c.sweeps.size(), 1u);
  EXPECT_EQ(c.sweeps[0].batch, (std::vector<int>{1, 4}));
  EXPECT_EQ(c.sweeps[0].tree, (std::vector<int>{17}));
  EXPECT_EQ(c.sweeps[0].prefix, (std::vector<int64_t>{0, 100}));
  EXPECT_EQ(c.baseline, "reference");
  EXPECT_EQ(c.masks, (std::vector<MaskLayout>{MaskLayout::kFull}));
  EXPECT_EQ(c.modes, (std::vector<ExecMode>{ExecMode::kEager}));
  EXPECT_FALSE(c.hash.empty());
  EXPECT_NE(parseExperimentConfig(kMinimal + "\n[output]\ndir = \"x\"\n", "m").hash, c.hash);
}

TEST(ExperimentConfig, everyOptionParses)
{
  auto const c = parseExperimentConfig(kMinimal + R"(
[experiment]
name = "full"
seed = 42
warmup = 0
repetitions = 7
check_rate = 0.25
max_check_gflop = 1.5
[options]
mask = ["full", "tree", "parents"]
nsplit = [1, 4, 16]
workspace = ["per-call", "persistent", "grow"]
mode = ["eager", "graph"]
l2_flush = [true, false]
buckets = [1, 8, 32]
strict = true
[peaks]
gflops = 100.0
gbytes_per_s = 20
[output]
dir = "out/full"
progress = false
)",
                                       "full.toml");
  EXPECT_EQ(c.name, "full");
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.repetitions, 7);
  EXPECT_EQ(c.masks.size(), 3u);
  EXPECT_EQ(c.nsplit, (std::vector<int>{1, 4, 16}));
  EXPECT_EQ(c.workspace[2], WorkspaceStrategy::kGrow);
  EXPECT_EQ(c.modes[1], ExecMode::kGraph);
  EXPECT_EQ(c.l2_flush, (std::vector<bool>{true, false}));
  EXPECT_EQ(c.buckets, (std::vector<int>{1, 8, 32}));
  EXPECT_TRUE(c.strict);
  EXPECT_DOUBLE_EQ(c.peak_flops, 100e9);
  EXPECT_EQ(c.max_check_flops, 1500000000);
  EXPECT_EQ(c.out_dir, "out/full");
}

void expectBad(std::string const &text, std::string const &key_fragment)
{
  try
  {
    parseExperimentConfig(text, "bad.toml");
    FAIL() << "accepted a bad config, expected an error naming " << key_fragment;
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find(key_fragment), std::string::npos) << e.what();
  }
}

TEST(ExperimentConfig, badConfigsNameTheKey)
{
  expectBad(kMinimal + "[experimnt]\nname = \"x\"\n", "experimnt: unknown key");
  expectBad(kMinimal + "[options]\nnsplits = [4]\n", "options.nsplits: unknown key");
  expectBad(kMinimal + "[options]\nnsplit = [4, -1]\n", "options.nsplit[1]: must be in [0, 1024]");
  expectBad(kMinimal + "[options]\nmask = [\"full\", \"diagonal\"]\n", "options.mask[1]");
  expectBad(kMinimal + "[options]\nworkspace = \"forever\"\n", "options.workspace[0]");
  expectBad(kMinimal + "[options]\nmode = [\"lazy\"]\n", "options.mode[0]");
  expectBad(kMinimal + "[options]\nbuckets = [8, 4]\n", "options.buckets[1]: buckets must increase");
  expectBad(kMinimal + "[options]\nl2_flush = \"yes\"\n", "options.l2_flush: expected true or false");
  expectBad(kMinimal + "[experiment]\nrepetitions = 0\n", "experiment.repetitions");
  expectBad(kMinimal + "[experiment]\nrepetitions = \"many\"\n", "experiment.repetitions: expected an integer");
  expectBad(kMinimal + "[experiment]\ncheck_rate = 2.0\n", "experiment.check_rate");
  // NaN passes every < test: it used to check nothing and mark rows ok.
  expectBad(kMinimal + "[experiment]\ncheck_rate = nan\n", "experiment.check_rate: must be a finite number in [0, 1], got nan");
  expectBad(kMinimal + "[experiment]\nmax_check_gflop = -1\n", "experiment.max_check_gflop: must be a finite number");
  auto edited = [](std::string const &from, std::string const &to) {
    std::string t = kMinimal;
    return t.replace(t.find(from), from.size(), to);
  };
  expectBad(edited("[inputs]\n", "[inputs]\nmax_steps = -1\n"), "inputs.max_steps: must be in [0, ");
  expectBad(edited("names = [\"reference\"]", "names = [\"reference\", \"reference\"]"),
            "designs.names[1]: 'reference' is listed twice");
  // An option value or input listed twice would duplicate rows and count twice in the speedups.
  expectBad(kMinimal + "[options]\nmask = [\"tree\", \"tree\"]\n", "options.mask[1]: 'tree' is listed twice");
  expectBad(kMinimal + "[options]\nnsplit = [4, 8, 4]\n", "options.nsplit[2]: 4 is listed twice");
  expectBad(kMinimal + "[options]\nmode = [\"eager\", \"eager\"]\n", "options.mode[1]: 'eager' is listed twice");
  expectBad(kMinimal + "[options]\nl2_flush = [true, true]\n", "options.l2_flush[1]: true is listed twice");
  expectBad(kMinimal + "[options]\nworkspace = [\"grow\", \"grow\"]\n", "options.workspace[1]: 'grow' is listed twice");
  expectBad(kMinimal + "[[inputs.sweep]]\nbatch = [2, 2]\n", "inputs.sweep[1].batch[1]: 2 is listed twice");
  // The CLI's limits apply to config keys too (a 27 TB workspace, a bare bad_alloc before).
  expectBad(kMinimal + "[options]\nnsplit = [100000000]\n", "options.nsplit[0]: must be in [0, 1024]");
  expectBad(kMinimal + "[[inputs.sweep]]\ntree = [100000]\n", "inputs.sweep[1].tree[0]: must be in [1, 1024]");
  expectBad(kMinimal + "[experiment]\nbaseline = \"nosuch\"\n", "experiment.baseline");
  expectBad(R"([[inputs.sweep]]
tree = [0]
[designs]
names = ["reference"])",
            "inputs.sweep[0].tree[0]: 0 tree nodes per request: nothing to check");
  expectBad(R"([[inputs.sweep]]
colour = 3
[designs]
names = ["reference"])",
            "inputs.sweep[0].colour: unknown key");
  expectBad("[inputs]\ntraces = [\"no/such/file.h5\"]\n[designs]\nnames = [\"reference\"]\n", "inputs.traces[0]: no such file");
  expectBad("[inputs]\n[designs]\nnames = [\"reference\"]\n", "inputs:");
  expectBad(R"([[inputs.sweep]]
[designs]
names = ["reference", "warp-drive"])",
            "designs.names[1]");
  expectBad("[inputs\n", "bad.toml:1");
}

// Every bundled config parses; the only error allowed is a design this build does not compile
// (e.g. the CUDA designs in a host-only build).
TEST(ExperimentConfig, bundledConfigsParse)
{
  int seen = 0;
  for (auto const &e : std::filesystem::directory_iterator(CANOPY_CONFIG_DIR))
  {
    if (e.path().extension() != ".toml")
      continue;
    ++seen;
    try
    {
      auto const c = loadExperimentConfig(e.path().string());
      EXPECT_FALSE(c.designs.empty()) << e.path();
    }
    catch (InputError const &err)
    {
      // budget-study.toml has no [inputs]: its pipeline (experiments/budget/) synthesizes the traces
      // of its grid and adds the list.
      bool const traces_made_later = e.path().filename() == "budget-study.toml" &&
                                     std::string(err.what()).find("inputs: give traces") != std::string::npos;
      EXPECT_TRUE(traces_made_later || std::string(err.what()).find("is not compiled into this build") != std::string::npos)
          << e.path() << ": " << err.what();
    }
  }
  EXPECT_GE(seen, 12);
}

TEST(ExperimentConfig, sweepKeysParse)
{
  auto const c = parseExperimentConfig(R"(
[[inputs.sweep]]
batch = 8
tree = [17, 65]
prefix = 131072
pool_slack = 1.25
mean_run = 16
steps = 3
values = "tree-dominant"
[[inputs.sweep]]
ragged = true
compacted = true
[designs]
names = ["reference"]
)",
                                       "sweeps.toml");
  ASSERT_EQ(c.sweeps.size(), 2u);
  ShapeSweep const &a = c.sweeps[0], &b = c.sweeps[1];
  EXPECT_EQ(a.batch, (std::vector<int>{8}));
  EXPECT_EQ(a.tree, (std::vector<int>{17, 65}));
  EXPECT_EQ(a.prefix, (std::vector<int64_t>{131072}));
  EXPECT_DOUBLE_EQ(a.pool_slack, 1.25);
  EXPECT_DOUBLE_EQ(a.mean_run, 16);
  EXPECT_EQ(a.steps, 3);
  EXPECT_EQ(a.values, ValueMode::kTreeDominant);
  EXPECT_FALSE(a.ragged);
  EXPECT_TRUE(b.ragged);
  EXPECT_DOUBLE_EQ(b.pool_slack, 1.0) << "compacted: no holes";
  EXPECT_GT(b.mean_run, 1e9) << "compacted: one run per request";
  EXPECT_EQ(b.values, ValueMode::kRandom);
  expectBad(kMinimal + "[[inputs.sweep]]\npool_slack = 0.5\n", "inputs.sweep[1].pool_slack: must be a finite number in [1, 1e+06], got 0.5");
  expectBad(kMinimal + "[[inputs.sweep]]\nvalues = \"loud\"\n", "inputs.sweep[1].values");
}

TEST(Buckets, padToNextCapturedBucket)
{
  std::vector<int> const buckets{1, 2, 4, 8, 16};
  EXPECT_EQ(paddedBucket(buckets, 1), 1);
  EXPECT_EQ(paddedBucket(buckets, 3), 4);
  EXPECT_EQ(paddedBucket(buckets, 8), 8);
  EXPECT_EQ(paddedBucket(buckets, 9), 16);
  EXPECT_EQ(paddedBucket(buckets, 0), 1);
  EXPECT_THROW(paddedBucket(buckets, 17), InputError);
}
} // namespace
