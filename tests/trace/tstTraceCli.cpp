/// \file tstTraceCli.cpp
/// \brief `canopy trace synth | info | validate` end to end: exit 0 on good input, 2 on a bad file
/// or config with the culprit named on stderr, never a crash. And one validation path: a corpus of
/// malformed batches gives the same reason from the library (BatchStorage::setMetadata), the trace
/// reader and the command line.
#include "canopy_BatchStorage.hpp"
#include "canopy_Rules.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceTestUtil.hpp"
#include "canopy_TraceWriter.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <sys/wait.h>

namespace canopy::test
{
namespace
{
struct Result
{
  int code = -1;
  std::string out, err;
};

std::string slurp(std::string const &path)
{
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result canopy(std::string const &args)
{
  std::string const out = tempPath("stdout.txt"), err = tempPath("stderr.txt");
  int const status = std::system((std::string(CANOPY_BIN) + " " + args + " >" + out + " 2>" + err).c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string writeFile(std::string const &name, std::string const &text)
{
  std::string const path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

constexpr char const *TINY_CONFIG = R"(seed = 3
steps = 12
warmup_steps = 5
source = "cli test"
[model]
num_heads = 4
[arrivals]
mode = "fixed"
concurrency = 3
[prompt]
dist = "uniform"
min = 8
max = 64
[output]
dist = "fixed"
value = 20
[pool]
num_slots = 4096
[draft]
budget = 8
)";
} // namespace

TEST(TraceCli, synthThenValidateAndInfo)
{
  std::string const cfg = writeFile("tiny.toml", TINY_CONFIG);
  std::string const trace = tempPath("tiny.h5");
  Result const s = canopy("trace synth -c " + cfg + " -o " + trace);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("12 steps"), std::string::npos) << s.out;
  TraceReader const r(trace);
  EXPECT_EQ(r.numSteps(), 12);
  EXPECT_EQ(r.info().source, "cli test");
  EXPECT_EQ(r.info().shape.num_heads, 4);
  EXPECT_EQ(r.stepBatchSize(0), 3);
  EXPECT_EQ(r.columns().tree_offset[1], 9);

  Result const v = canopy("trace validate " + trace);
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("valid"), std::string::npos);
  Result const i = canopy("trace info " + trace);
  EXPECT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("acceptance: mean accepted length"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("fragmentation"), std::string::npos);

  // Flags override the config.
  Result const f = canopy("trace synth -c " + cfg + " -o " + trace + " --steps 4 --budget 2 --heads 2 -q --overwrite");
  ASSERT_EQ(f.code, 0) << f.err;
  TraceReader const r2(trace);
  EXPECT_EQ(r2.numSteps(), 4);
  EXPECT_EQ(r2.info().shape.num_heads, 2);
  EXPECT_EQ(r2.columns().tree_offset[1], 3);
}

TEST(TraceCli, valuesTraceChecksAgainstTheReference)
{
  std::string const cfg = writeFile("v.toml", std::string(TINY_CONFIG) + "[values]\nenabled = true\n");
  std::string const trace = tempPath("v.h5");
  ASSERT_EQ(canopy("trace synth -q -c " + cfg + " -o " + trace + " --steps 2 --num-slots 400 --heads 2").code, 0);
  Result const v = canopy("trace validate --check-values " + trace);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("matches the fp64 reference"), std::string::npos) << v.out;
  // A trace without /values cannot be checked: bad input.
  std::string const plain = tempPath("plain.h5");
  ASSERT_EQ(canopy("trace synth -q -c " + std::string(writeFile("p.toml", TINY_CONFIG)) + " -o " + plain).code, 0);
  Result const nv = canopy("trace validate --check-values " + plain);
  EXPECT_EQ(nv.code, 2);
  EXPECT_NE(nv.err.find("/values/out"), std::string::npos) << nv.err;
}

TEST(TraceCli, fp8SynthInfoValidateAndCheck)
{
  std::string const cfg = writeFile("f.toml", std::string(TINY_CONFIG) + "[values]\nenabled = true\n");
  struct Case
  {
    std::string flags, dtype, scale_text;
    int row_bytes;
  };
  std::vector<Case> const cases = {
      {"--kv-dtype fp8-e4m3 --kv-scale 0.0371", "fp8-e4m3", "scale 0.0370999984", 576},
      {"--kv-dtype fp8-e5m2 --kv-scale 0.5", "fp8-e5m2", "scale 0.5,", 576},
      {"--kv-dtype fp8-e4m3-blockscaled", "fp8-e4m3-blockscaled", "scale per-block scales", 656},
  };
  for (auto const &c : cases)
  {
    SCOPED_TRACE(c.flags);
    std::string const trace = tempPath("f.h5");
    Result const s = canopy("trace synth -c " + cfg + " -o " + trace + " --steps 2 --num-slots 400 --heads 2 " +
                            c.flags + " --overwrite");
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_NE(s.out.find("kv dtype " + c.dtype), std::string::npos) << s.out;
    TraceReader const r(trace);
    EXPECT_EQ(toString(r.info().kv_dtype), c.dtype);
    EXPECT_EQ(r.info().format_version, 2);
    EXPECT_EQ(r.columns().kv_fp8.size(), 400u * static_cast<size_t>(c.row_bytes));

    Result const i = canopy("trace info " + trace);
    EXPECT_EQ(i.code, 0) << i.err;
    EXPECT_NE(i.out.find("v2)"), std::string::npos) << i.out;
    EXPECT_NE(i.out.find("kv: dtype " + c.dtype + ", " + c.scale_text), std::string::npos) << i.out;
    EXPECT_NE(i.out.find(std::to_string(c.row_bytes) + " bytes per row"), std::string::npos) << i.out;
    char mb[64];
    std::snprintf(mb, sizeof(mb), "%.6g MB", 400.0 * c.row_bytes * 1e-6);  // FP8 bytes, not bf16's 1152
    EXPECT_NE(i.out.find(mb), std::string::npos) << i.out;

    Result const v = canopy("trace validate --check-values " + trace);
    EXPECT_EQ(v.code, 0) << v.out << v.err;
    EXPECT_NE(v.out.find("valid format v2 trace"), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("kv " + c.dtype), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("matches the fp64 reference"), std::string::npos) << v.out;
    // The reference design replays the trace's FP8 pool against the recorded output.
    Result const k = canopy("check --designs reference --trace " + trace);
    EXPECT_EQ(k.code, 0) << k.out << k.err;
    EXPECT_NE(k.out.find("kv dtype " + c.dtype), std::string::npos) << k.out;
    EXPECT_NE(k.out.find("| pass"), std::string::npos) << k.out;
  }
  // A metadata-only FP8 trace replays seeded values stored in its dtype, in both numerics.
  std::string const meta = tempPath("meta.h5");
  ASSERT_EQ(canopy("trace synth -q -c " + writeFile("m.toml", TINY_CONFIG) + " -o " + meta +
                   " --steps 2 --kv-dtype fp8-e5m2 --kv-scale 0.25")
                .code,
            0);
  EXPECT_EQ(TraceReader(meta).info().kv_dtype, KvDtype::kFp8E5m2);
  for (char const *numerics : {"dequant", "fp8-mma"})
  {
    Result const k = canopy("check --designs reference --trace " + meta + " --numerics " + numerics);
    EXPECT_EQ(k.code, 0) << k.out << k.err;
    EXPECT_NE(k.out.find(std::string("numerics ") + numerics), std::string::npos) << k.out;
  }
  // A bf16 trace stays format v1 (readable by v1 readers); info says so.
  std::string const bf16 = tempPath("bf16.h5");
  ASSERT_EQ(canopy("trace synth -q -c " + writeFile("b.toml", TINY_CONFIG) + " -o " + bf16 + " --steps 2").code, 0);
  Result const i = canopy("trace info " + bf16);
  EXPECT_NE(i.out.find("v1)"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("kv: dtype bf16, scale none, 1152 bytes per row"), std::string::npos) << i.out;
}

TEST(TraceCli, badFp8InputExitsTwoNamingIt)
{
  std::string const cfg = writeFile("t.toml", TINY_CONFIG);
  std::string const never = tempPath("never.h5");
  struct Case
  {
    std::string args, needle;
  };
  std::vector<Case> const cases = {
      {"--kv-dtype fp8-e4m3 --kv-scale 0", "--kv-scale: must be finite and > 0"},
      {"--kv-dtype fp8-e4m3 --kv-scale -1", "--kv-scale"},
      {"--kv-dtype fp8-e5m2 --kv-scale nan", "--kv-scale"},
      {"--kv-dtype fp8-e5m2 --kv-scale inf", "--kv-scale"},
      {"--kv-dtype fp8-e4m3-blockscaled --kv-scale 2", "--kv-scale: applies to kv dtype fp8-e4m3 and fp8-e5m2 only"},
      {"--kv-scale 2", "--kv-scale: applies to"},
      {"--kv-dtype fp8", "--kv-dtype"},
      // Seeded values in [-1, 1] divided by 1/1000 overflow e4m3 (NaN above 448): refused, not written.
      {"--kv-dtype fp8-e4m3 --kv-scale 0.001 --values", "model.kv_scale: 0.001"},
  };
  for (auto const &c : cases)
  {
    Result const r = canopy("trace synth -c " + cfg + " -o " + never + " --steps 2 " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_FALSE(std::filesystem::exists(never)) << c.args;
  }
  for (std::string const toml : {"[model]\nkv_dtype = \"fp8-e4m4\"\n", "[model]\nkv_dtype = \"fp8-e4m3\"\nkv_scale = 0.0\n",
                                 "[model]\nkv_scale = 0.5\n"})
  {
    Result const r = canopy("trace synth -c " + writeFile("bad.toml", toml) + " -o " + never);
    EXPECT_EQ(r.code, 2) << toml;
    EXPECT_NE(r.err.find("model.kv_"), std::string::npos) << toml << " -> " << r.err;
  }
  // check: the trace fixes the dtype; fp8-mma needs a one-scale FP8 trace.
  std::string const bf16 = tempPath("bf16.h5");
  ASSERT_EQ(canopy("trace synth -q -c " + cfg + " -o " + bf16 + " --steps 2").code, 0);
  Result const both = canopy("check --designs reference --trace " + bf16 + " --kv-dtype fp8-e4m3");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--kv-dtype and --trace"), std::string::npos) << both.err;
  Result const mma = canopy("check --designs reference --trace " + bf16 + " --numerics fp8-mma");
  EXPECT_EQ(mma.code, 2);
  EXPECT_NE(mma.err.find("--numerics: numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not bf16"),
            std::string::npos)
      << mma.err;
}

TEST(TraceCli, badFilesExitTwoNamingTheDataset)
{
  TraceColumns c = smallColumns(2);
  c.parent[c.tree_offset[2] + 1] = 4;
  std::string const bad = tempPath("bad.h5");
  Impl::writeColumnsUnchecked(bad, c);
  for (char const *cmd : {"trace validate ", "trace info "})
  {
    Result const r = canopy(cmd + bad);
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_NE(r.err.find("/tree/parent: index " + std::to_string(c.tree_offset[2] + 1)), std::string::npos) << r.err;
  }
  Result const missing = canopy("trace validate " + tempPath("none.h5"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
  std::string const text = writeFile("text.h5", "hello");
  EXPECT_EQ(canopy("trace validate " + text).code, 2);
}

TEST(TraceCli, badConfigsExitTwoNamingTheKey)
{
  struct Case
  {
    std::string toml, needle;
  };
  std::vector<Case> const cases = {
      {"steps = 3\n[draft]\nbugdet = 4\n", "draft.bugdet: unknown key"},
      {"stepz = 3\n", "stepz: unknown key"},
      {"[tree]\nbudget = 4\n", "tree: unknown key"},
      {"steps = \"many\"\n", "steps: expected an integer"},
      {"[draft]\nbudget = -2\n", "draft.budget"},
      {"[arrivals]\nmode = \"burst\"\n", "arrivals.mode"},
      {"[prompt]\ndist = \"zipf\"\n", "prompt.dist"},
      {"[pool]\nnum_slots = 10\n", "pool.num_slots"},
      {"[model]\nnum_heads = 2.5\n", "model.num_heads: expected an integer"},
      {"draft = 3\n", "draft: expected a table"},
      {"steps = [\n", "bad.toml:"},
  };
  std::string const never = tempPath("never.h5");
  for (auto const &c : cases)
  {
    std::string const cfg = writeFile("bad.toml", c.toml);
    Result const r = canopy("trace synth -c " + cfg + " -o " + never);
    EXPECT_EQ(r.code, 2) << c.toml;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.toml << " -> " << r.err;
    EXPECT_FALSE(std::filesystem::exists(never));
  }
  EXPECT_EQ(canopy("trace synth -o " + tempPath("x.h5") + " --steps 0").code, 2);
  EXPECT_EQ(canopy("trace synth -c " + tempPath("nonexistent.toml") + " -o " + tempPath("x.h5")).code, 2);
  EXPECT_EQ(canopy("trace synth --steps 3").code, 2) << "--out is required";
}
TEST(ValidationCorpus, sameReasonFromTheLibraryATraceAndTheCommandLine)
{
  TraceColumns const good = smallColumns(21);
  std::string const good_path = tempPath("corpus_good.h5");
  writeTraceColumns(good_path, good);
  TraceReader const reader(good_path);
  int64_t const slots = reader.info().num_slots;
  // Step 0's first request row: its metadata in the library's form, and its place in the columns.
  BatchMetadata const meta0 = reader.stepMetadata(0, MaskLayout::kTree);
  int64_t const row = good.request_offset[0];
  ASSERT_GE(good.tree_offset[row + 1] - good.tree_offset[row], 3);
  ASSERT_GE(good.kv_offset[row + 1] - good.kv_offset[row], 2);

  struct Case
  {
    char const *name;
    std::function<void(TraceColumns &)> in_trace;
    std::function<void(BatchMetadata &)> in_batch;
    std::string reason;  ///< the shared phrase (canopy_Rules.hpp) every path must give
  };
  int64_t const far = slots + 5;
  std::vector<Case> const corpus = {
      {"parent after its child", [&](TraceColumns &c) { c.parent[c.tree_offset[row] + 2] = 7; },
       [](BatchMetadata &m) { m.tree_parent[2] = 7; }, rules::parentProblem(2, 7)},
      {"second root", [&](TraceColumns &c) { c.parent[c.tree_offset[row] + 1] = -1; },
       [](BatchMetadata &m) { m.tree_parent[1] = -1; }, rules::parentProblem(1, -1)},
      {"prefix slot outside the pool", [&](TraceColumns &c) { c.kv_indices[c.kv_offset[row] + 1] = far; },
       [&](BatchMetadata &m) { m.kv_indices[1] = far; }, rules::slotProblem(far, slots)},
      {"tree slot below zero", [&](TraceColumns &c) { c.out_cache_loc[c.tree_offset[row]] = -3; },
       [](BatchMetadata &m) { m.out_cache_loc[0] = -3; }, rules::slotProblem(-3, slots)},
  };
  for (Case const &k : corpus)
  {
    SCOPED_TRACE(k.name);
    ASSERT_FALSE(k.reason.empty());
    // The library: a design's storage refuses the batch before anything reaches a kernel.
    BatchMetadata meta = meta0;
    k.in_batch(meta);
    BatchCapacity const cap{meta.batchSize(), meta.numNodes(), static_cast<int64_t>(meta.kv_indices.size()),
                            static_cast<int64_t>(meta.custom_mask.size()), slots, reader.info().shape.num_heads};
    auto storage = makeBatchStorage(MemoryKind::kHost, cap);
    expectInputError([&] { storage->setMetadata(meta, reader.info().shape); }, {k.reason});
    // A trace: the reader refuses the file.
    TraceColumns c = good;
    k.in_trace(c);
    std::string const path = tempPath("corpus_bad.h5");
    Impl::writeColumnsUnchecked(path, c);
    expectInputError([&] { TraceReader r(path); }, {k.reason});
    // The command line: exit 2, the same reason on stderr.
    Result const r = canopy("check --trace " + path + " --designs reference");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(k.reason), std::string::npos) << r.err;
  }
}
} // namespace canopy::test

namespace canopy::test
{
// A trace of 0 steps is valid (trace validate and info accept it), but checking or replaying it
// does nothing: "nothing to check", exit 2, never a pass and never an empty table of rows.
TEST(TraceCli, zeroStepTraceIsNothingToCheck)
{
  std::string const empty = writeEmptyTrace("empty.h5");
  EXPECT_EQ(canopy("trace validate " + empty).code, 0);
  std::string const needle = empty + ": the trace has 0 steps: nothing to check";
  for (std::string const designs : {"reference", "all"})
  {
    Result const r = canopy("check --trace " + empty + " --designs " + designs);
    EXPECT_EQ(r.code, 2) << designs << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("pass"), std::string::npos) << r.out;
  }
  // Bad input before a missing GPU: the trace is read before the designs are placed.
  Result const cuda = canopy("check --trace " + empty + " --designs cuda-flat");
  EXPECT_EQ(cuda.code, 2) << cuda.err;
  EXPECT_NE(cuda.err.find(needle), std::string::npos) << cuda.err;

  std::string const config = writeFile("empty_run.toml", "[inputs]\ntraces = [\"" + empty +
                                                             "\"]\n[designs]\nnames = [\"reference\"]\n");
  std::string const out = tempPath("empty_run_out");
  Result const run = canopy("run " + config + " --quiet --out " + out);
  EXPECT_EQ(run.code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/results.json"));
}
} // namespace canopy::test
