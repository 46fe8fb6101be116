/// \file tstSm90Fp8.cpp
/// \brief cuda-sm90 on FP8 KV pools (fp8-e4m3, fp8-e5m2 with SGLang's per-tensor scale, and the
/// 656-byte block-scaled layout), dequant numerics, against the fp64 reference on the dequantised
/// pool: random and tree-dominant values, every mask layout, ragged and padded batches, rows past
/// the split, trees up to 1024 nodes, f32 / bf16 partials and the direct path, eager and under
/// CUDA graph capture with pools and scales replaced between replays; the same in fp8-mma numerics
/// (FP8 wgmma) on the one-scale pools. Then what must fail: the pool read with a wrong scale, e5m2
/// bytes read as e4m3 (both numerics), the other designs refused, fp8-mma on a block-scaled pool.
#include "canopy_CudaBatchStorage.hpp"
#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaTestUtils.hpp"
#include "canopy_TestProblems.hpp"
#include "canopy_TestSeed.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

namespace canopy::test
{
namespace
{
#define CANOPY_REQUIRE_SM90()                                                       \
  do                                                                                \
  {                                                                                 \
    CANOPY_REQUIRE_GPU();                                                           \
    if (!sm90Here())                                                                \
      GTEST_SKIP() << "cuda-sm90 runs on sm_90 GPUs only (its cubin is sm_90a)";    \
  } while (0)

/// The FP8 dtypes with the scale each case uses (one-scale dtypes: not 1, so that a dropped scale fails).
struct Fp8Case
{
  KvDtype dtype;
  float scale;
  ValueMode values;
};

std::string nameOf(Fp8Case const &c)
{
  std::string n = toString(c.dtype) + "_" + toString(c.values);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

void PrintTo(Fp8Case const &c, std::ostream *os) { *os << nameOf(c) << " scale " << c.scale; }

Fp8Case const CASES[] = {
    {KvDtype::kFp8E4m3, 0.0625f, ValueMode::kRandom},
    {KvDtype::kFp8E4m3, 0.5f, ValueMode::kTreeDominant},
    {KvDtype::kFp8E5m2, 2.0f, ValueMode::kRandom},
    {KvDtype::kFp8E5m2, 0.75f, ValueMode::kTreeDominant},
    {KvDtype::kFp8E4m3BlockScaled, 1.0f, ValueMode::kRandom},
    {KvDtype::kFp8E4m3BlockScaled, 1.0f, ValueMode::kTreeDominant},
};

struct Shape
{
  char const *name;
  int batch, heads;
  std::vector<int> trees;  ///< empty: tree_size below
  int tree;
  int64_t prefix;
  bool ragged;
  int padded;
  int nsplit;
};

// The edges of the FP8 producer: a split ending inside a warp's 16 rows (rows past it zero), one
// KV tile, many tiles per split, P = 0, ragged with padding, H = 3 cutting nodes at tile edges, row
// tiles 1/2/3/5 in one batch, and trees of 1024 nodes.
Shape const SHAPES[] = {
    {"P0_T33", 1, 8, {}, 33, 0, false, 0, 16},
    {"PlessNsplit", 1, 8, {}, 17, 5, false, 0, 16},
    {"Ragged_Padded", 3, 8, {}, 33, 700, true, 2, 16},
    {"H3", 2, 3, {}, 20, 150, false, 1, 3},
    {"LongP", 2, 8, {}, 9, 3000, false, 0, 7},
    {"RowTiles_1_2_3_5", 5, 8, {8, 16, 24, 40, 21}, 40, 900, true, 1, 6},
    {"T1024_H2", 2, 2, {1024, 300}, 1024, 400, false, 0, 5},
};

HostProblem makeFp8Problem(Shape const &s, Fp8Case const &c, MaskLayout layout, uint64_t seed)
{
  GeneratorOptions g;
  g.batch = s.batch;
  g.num_heads = s.heads;
  g.tree_size = s.tree;
  g.tree_sizes = s.trees;
  g.prefix_len = s.prefix;
  g.ragged = s.ragged;
  g.padded_rows = s.padded;
  g.mask_layout = layout;
  g.values = c.values;
  g.seed = testSeed(seed);
  return storedAs(generateProblem(g), c.dtype, c.scale);
}

/// cuda-sm90 in \p numerics on \p c's pool against the reference of those numerics, with their
/// bounds: every shape, mask layout, f32 / bf16 partials and the direct path.
void expectMatchesEverywhere(Fp8Case const &c, Numerics numerics)
{
  for (Shape const &s : SHAPES)
    for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
    {
      HostProblem const problem = makeFp8Problem(s, c, layout, 5000 + static_cast<uint64_t>(layout));
      ASSERT_EQ(problem.kv_dtype, c.dtype);
      std::vector<double> const reference = referenceAttention(problem, numerics);
      struct Variant
      {
        char const *label;
        bool bf16;
        int nsplit;
      };
      for (Variant const v : {Variant{"f32", false, s.nsplit}, Variant{"bf16", true, s.nsplit}, Variant{"direct", false, 1}})
      {
        DesignPtr design = cuda::makeSm90Design(v.bf16);
        DesignOptions opt;
        opt.nsplit = v.nsplit;
        opt.numerics = numerics;
        CheckResult const r = checkDesign(*design, problem, opt, reference);
        std::string const what = std::string(s.name) + " / " + toString(layout) + " / " + v.label + " (" + r.path + ")";
        EXPECT_NE(r.path.find(toString(c.dtype)), std::string::npos) << what << ": the path names the pool's dtype";
        EXPECT_EQ(r.path.find("fp8-mma") != std::string::npos, numerics == Numerics::kFp8Mma) << what;
        EXPECT_EQ(r.error.num_bad, 0) << what << ": first bad element " << r.error.first_bad;
        EXPECT_TRUE(r.error.pass) << what << ": rel-L2 " << r.error.rel_l2 << ", worst row rel-L2 "
                                  << r.error.worst_row_rel_l2 << " (row " << r.error.worst_row << ")";
      }
    }
}

/// One bucket, three steps with different trees, slots, queries and pools, replayed from one graph:
/// the kernel reads the pool bytes at replay time. The one-scale dtypes' kv_scale is a launch scalar
/// like sm_scale (SGLang passes k_scale the same way): the graph keeps the one it was captured with,
/// so the steps share it, and an eager run after the replays takes a new one.
void expectGraphReplayReadsTheLivePool(Fp8Case const &c, Numerics numerics)
{
  Shape const steps[] = {
      {"s0", 3, 8, {}, 33, 800, false, 0, 8},
      {"s1", 2, 8, {}, 40, 900, true, 1, 8},
      {"s2", 1, 8, {}, 17, 5, false, 2, 8},
  };
  float const scales[] = {c.scale, c.scale, c.scale, c.scale * 4};
  std::vector<HostProblem> problems;
  std::vector<std::vector<double>> references;
  for (int i = 0; i < 4; ++i)
  {
    Fp8Case ci = c;
    ci.scale = scales[i];
    problems.push_back(makeFp8Problem(steps[i % 3], ci, MaskLayout::kTree, 6100 + i));
    references.push_back(referenceAttention(problems.back(), numerics));
  }
  BatchCapacity const cap = BatchCapacity::covering(problems);
  PlanBounds bounds;
  bounds.max_batch = 3;
  bounds.max_tree = 40;
  bounds.max_prefix = 900;
  bounds.max_nodes = 3 * 40;
  bounds.num_heads = 8;
  bounds.mask_layout = MaskLayout::kTree;
  bounds.kv_dtype = c.dtype;
  DesignPtr design = cuda::makeSm90Design();
  DesignOptions opt;
  opt.nsplit = 8;
  opt.numerics = numerics;
  design->plan(bounds, opt);
  cuda::CudaBatchStorage storage(cap);
  ErrorBounds const tol = errorBounds(c.dtype, numerics);
  auto expectStep = [&](int i, std::string const &what) {
    std::vector<uint16_t> const out = storage.downloadOutput();
    ErrorStats const e = compareToReference(references[static_cast<size_t>(i)], out.data(), out.size(), tol);
    EXPECT_EQ(e.num_bad, 0) << what << ": first bad element " << e.first_bad;
    EXPECT_TRUE(e.pass) << what << ": rel-L2 " << e.rel_l2;
  };
  storage.upload(problems[0]);
  storage.poisonOutput();
  design->run(storage.ref(), storage.context());
  expectStep(0, "eager step 0");
  storage.sync();
  cuda::Graph graph = cuda::Graph::capture(storage.stream(), [&] { design->run(storage.ref(), storage.context()); });
  ASSERT_TRUE(graph.valid());
  for (int i : {1, 2, 0})
  {
    storage.upload(problems[static_cast<size_t>(i)]);
    storage.poisonOutput();
    graph.replay(storage.stream());
    expectStep(i, "replay of step " + std::to_string(i));
  }
  storage.upload(problems[3]);  // step 0's shape, new values, the scale 4x
  storage.poisonOutput();
  design->run(storage.ref(), storage.context());
  expectStep(3, "eager run with a new scale");
}

class Sm90Fp8 : public ::testing::TestWithParam<Fp8Case>
{
};

TEST_P(Sm90Fp8, matchesTheDequantisedReferenceEverywhere)
{
  CANOPY_REQUIRE_SM90();
  expectMatchesEverywhere(GetParam(), Numerics::kDequant);
}

TEST_P(Sm90Fp8, graphReplayReadsTheLivePool)
{
  CANOPY_REQUIRE_SM90();
  expectGraphReplayReadsTheLivePool(GetParam(), Numerics::kDequant);
}

INSTANTIATE_TEST_SUITE_P(Pools, Sm90Fp8, ::testing::ValuesIn(CASES),
                         [](::testing::TestParamInfo<Fp8Case> const &i) { return nameOf(i.param); });

/// fp8-mma (FP8 wgmma, Q and P cast to the pool's type), on the pools it is defined for.
class Sm90Fp8Mma : public ::testing::TestWithParam<Fp8Case>
{
};

TEST_P(Sm90Fp8Mma, matchesTheFp8MmaReferenceEverywhere)
{
  CANOPY_REQUIRE_SM90();
  expectMatchesEverywhere(GetParam(), Numerics::kFp8Mma);
}

TEST_P(Sm90Fp8Mma, graphReplayReadsTheLivePool)
{
  CANOPY_REQUIRE_SM90();
  expectGraphReplayReadsTheLivePool(GetParam(), Numerics::kFp8Mma);
}

/// The cases whose pools fp8-mma is defined for (the one-scale dtypes).
std::vector<Fp8Case> fp8MmaCases()
{
  std::vector<Fp8Case> out;
  for (Fp8Case const &c : CASES)
    if (numericsUndefinedFor(c.dtype, Numerics::kFp8Mma).empty())
      out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(OneScalePools, Sm90Fp8Mma, ::testing::ValuesIn(fp8MmaCases()),
                         [](::testing::TestParamInfo<Fp8Case> const &i) { return nameOf(i.param); });

/// The GPU side of the FP8 mutants: the same bytes read with the scale doubled, and e5m2 bytes
/// read as e4m3, must fail the check (the scale and the format reach the products), in both numerics.
TEST(Sm90Fp8Misreads, aWrongScaleOrFormatFails)
{
  CANOPY_REQUIRE_SM90();
  for (Numerics numerics : {Numerics::kDequant, Numerics::kFp8Mma})
  {
    for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2})
    {
      HostProblem const problem =
          makeFp8Problem(SHAPES[2], Fp8Case{dtype, 0.5f, ValueMode::kRandom}, MaskLayout::kTree, 6200);
      std::vector<double> const reference = referenceAttention(problem, numerics);
      PlanBounds bounds = boundsOf(problem);
      auto runWith = [&](auto &&mutate) {
        cuda::CudaBatchStorage storage(BatchCapacity::of(problem));
        storage.upload(problem);
        storage.poisonOutput();
        BatchRef ref = storage.ref();
        mutate(ref, bounds);
        DesignPtr design = cuda::makeSm90Design();
        DesignOptions opt;
        opt.nsplit = 4;
        opt.numerics = numerics;
        design->plan(bounds, opt);
        design->run(ref, storage.context());
        std::vector<uint16_t> const out = storage.downloadOutput();
        return compareToReference(reference, out.data(), out.size(), errorBounds(dtype, numerics));
      };
      std::string const what = toString(dtype) + " in " + toString(numerics);
      EXPECT_TRUE(runWith([](BatchRef &, PlanBounds &) {}).pass) << what << " as stored";
      EXPECT_FALSE(runWith([](BatchRef &r, PlanBounds &) { r.kv_scale *= 2; }).pass) << what << " with the scale doubled";
      KvDtype const other = dtype == KvDtype::kFp8E4m3 ? KvDtype::kFp8E5m2 : KvDtype::kFp8E4m3;
      EXPECT_FALSE(runWith([&](BatchRef &r, PlanBounds &b) { r.kv_dtype = b.kv_dtype = other; }).pass)
          << what << " read as " << toString(other);
    }
  }
}

TEST(Sm90Fp8Refusals, unservedPairsAreUnsupportedWithTheReason)
{
  CANOPY_REQUIRE_SM90();
  PlanBounds bounds;
  bounds.kv_dtype = KvDtype::kFp8E4m3;
  DesignOptions opt;
  opt.numerics = Numerics::kFp8Mma;
  // fp8-mma has no meaning for a block-scaled pool (its rope part is bf16): bad input, not a fallback.
  bounds.kv_dtype = KvDtype::kFp8E4m3BlockScaled;
  EXPECT_THROW(cuda::makeSm90Design()->plan(bounds, opt), InputError);
  bounds.kv_dtype = KvDtype::kFp8E4m3;
  for (DesignPtr const &d : {cuda::makeSm90SyncDesign(), cuda::makeSm90PairDesign(), cuda::makeSm120Design()})
  {
    try
    {
      d->plan(bounds, opt);
      ADD_FAILURE() << d->name() << " planned fp8-mma";
    }
    catch (Unsupported const &e)
    {
      EXPECT_NE(std::string(e.what()).find("fp8-mma"), std::string::npos) << e.what();
    }
  }
  opt.numerics = Numerics::kDequant;
  std::vector<DesignPtr> others;
  others.push_back(cuda::makeSm120Design());
  others.push_back(cuda::makeSm90SyncDesign());
  others.push_back(cuda::makeSm90PairDesign());
  others.push_back(cuda::makeFlatDesign());
  for (DesignPtr const &d : others)
    EXPECT_THROW(d->plan(bounds, opt), Unsupported) << d->name() << " planned an FP8 pool";
  // A launcher that reads bf16 only refuses FP8 params instead of reading a null pool.
  HostProblem const problem =
      makeFp8Problem(SHAPES[0], Fp8Case{KvDtype::kFp8E4m3, 1.f, ValueMode::kRandom}, MaskLayout::kFull, 6300);
  cuda::CudaBatchStorage storage(BatchCapacity::of(problem));
  storage.upload(problem);
  cuda::VerifyParams p;
  p.batch = storage.ref();
  p.max_batch = 1, p.max_tree = 33, p.max_nodes = 33, p.nsplit = 1;
  EXPECT_EQ(cuda::launchVerifySm120(p, storage.stream()), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchVerifyFlat(p, storage.stream()), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchVerifySm90Sync(p, storage.stream()), cudaErrorInvalidValue);
  p.batch.kv_scale = 0.f;
  EXPECT_EQ(cuda::launchVerifySm90(p, storage.stream()), cudaErrorInvalidValue) << "a zero scale";
  EXPECT_EQ(cuda::launchVerifySm90Fp8Mma(p, storage.stream()), cudaErrorInvalidValue) << "a zero scale";
  p.batch.kv_scale = 1.f;
  p.batch.kv_dtype = KvDtype::kFp8E4m3BlockScaled;  // fp8-mma is not defined for it
  EXPECT_EQ(cuda::launchVerifySm90Fp8Mma(p, storage.stream()), cudaErrorInvalidValue) << "a block-scaled pool";
}
} // namespace
} // namespace canopy::test
