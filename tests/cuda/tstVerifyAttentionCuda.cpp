/// \file tstVerifyAttentionCuda.cpp
/// \brief cuda-sm120 and cuda-flat against the fp64 reference: a shape grid with the edge cases
/// (P = 0, P < NSPLIT, T = 1, T = 65, ragged, padded rows, H not dividing the tile), every mask
/// layout, both partial dtypes; then under CUDA graph capture (global mode) with the metadata,
/// queries and pool replaced between replays, for every workspace strategy.
#include "canopy_CudaBatchStorage.hpp"
#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaTestUtils.hpp"
#include "canopy_TestSeed.hpp"
#include "canopy_Registry.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <ostream>

namespace canopy::test
{
namespace
{
struct GridCase
{
  char const *name;
  int batch, heads, tree;
  int64_t prefix;
  bool ragged;
  int padded;
  int nsplit;
};

// Each case is small enough for the fp64 host reference (at most ~1 GFLOP) and still exercises
// one edge of the kernels: which tile, split or visibility word a row or column falls in.
GridCase const GRID[] = {
    {"P0_T1", 1, 8, 1, 0, false, 0, 16},           // one node, no prefix: 15 empty splits
    {"P0_T33", 1, 8, 33, 0, false, 0, 16},         // tree columns only
    {"PlessNsplit", 1, 8, 17, 5, false, 0, 16},    // P < NSPLIT: most splits empty
    {"T1_P100", 2, 8, 1, 100, false, 0, 4},        // T = 1 (plain decode rows)
    {"T65", 1, 8, 65, 200, false, 0, 5},           // T > 64: second visibility word, 9 row tiles
    {"Ragged_Padded", 3, 8, 33, 700, true, 2, 16}, // ragged P and T, two empty padded rows
    {"H3", 2, 3, 20, 150, false, 1, 3},            // 64-row tiles cut nodes in the middle
    {"H1_T100", 1, 1, 100, 64, false, 0, 2},       // 64 nodes in one tile
    {"T200", 1, 2, 200, 40, false, 0, 3},          // four visibility words
    {"LongP", 2, 8, 9, 3000, false, 0, 7},         // many tiles per split, odd split count
};

class CudaGrid : public ::testing::TestWithParam<GridCase>
{
};

/// The Kokkos designs that run on CUDA device memory in this build (a CUDA Kokkos): they join the
/// GPU grid and graph cases. Empty with a host Kokkos.
std::vector<std::string> kokkosDesignsOnCuda()
{
  registerBuiltinDesigns();
  std::vector<std::string> names;
  for (std::string const &n : designNames())
    if (n.rfind("kokkos-", 0) == 0 && makeDesign(n)->memory() == MemoryKind::kCudaDevice)
      names.push_back(n);
  return names;
}

HostProblem makeProblem(GridCase const &c, MaskLayout layout, uint64_t seed)
{
  GeneratorOptions g;
  g.batch = c.batch;
  g.num_heads = c.heads;
  g.tree_size = c.tree;
  g.prefix_len = c.prefix;
  g.ragged = c.ragged;
  g.padded_rows = c.padded;
  g.mask_layout = layout;
  g.seed = testSeed(seed);
  return generateProblem(g);
}

TEST_P(CudaGrid, matchesFp64ReferenceForEveryLayoutAndDesign)
{
  CANOPY_REQUIRE_GPU();
  GridCase const c = GetParam();
  for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
  {
    HostProblem const problem = makeProblem(c, layout, 1000 + static_cast<uint64_t>(layout));
    std::vector<double> const reference = referenceAttention(problem);
    struct Variant
    {
      std::string label;
      std::function<DesignPtr()> make;
      int nsplit;
    };
    std::vector<Variant> variants = {
        {"cuda-sm120 f32", [] { return cuda::makeSm120Design(false); }, c.nsplit},
        {"cuda-sm120 bf16", [] { return cuda::makeSm120Design(true); }, c.nsplit},
        {"cuda-sm120 direct", [] { return cuda::makeSm120Design(false); }, 1},
        {"cuda-sm120-w32 f32", [] { return cuda::makeSm120WideDesign(false); }, c.nsplit},
        {"cuda-sm120-w32 bf16", [] { return cuda::makeSm120WideDesign(true); }, c.nsplit},
        {"cuda-sm120-w32 direct", [] { return cuda::makeSm120WideDesign(false); }, 1},
        {"cuda-flat", [] { return cuda::makeFlatDesign(); }, c.nsplit},
    };
    for (std::string const &n : kokkosDesignsOnCuda())
      variants.push_back({n, [n] { return makeDesign(n); }, c.nsplit});
    for (auto const &v : variants)
    {
      DesignPtr design = v.make();
      DesignOptions opt;
      opt.nsplit = v.nsplit;
      CheckResult const r = checkDesign(*design, problem, opt, reference);
      std::string const what = std::string(c.name) + " / " + toString(layout) + " / " + v.label + " (" + r.path + ")";
      EXPECT_EQ(r.error.num_bad, 0) << what << ": first bad element " << r.error.first_bad;
      EXPECT_TRUE(r.error.pass) << what << ": rel-L2 " << r.error.rel_l2 << ", max abs " << r.error.max_abs;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGrid, ::testing::ValuesIn(GRID),
                         [](::testing::TestParamInfo<GridCase> const &i) { return std::string(i.param.name); });

// A missing or misplaced barrier shows as outputs that change from run to run (a tile read while
// the next copy overwrites it). The problem has what makes that likely: last row tiles with idle
// row groups (T * H not a multiple of 64), several KV tiles per split, masked tiles, ragged
// requests and a padded row. Every output element must be bit-identical over repeated runs.
TEST(CudaDesigns, repeatedRunsAreBitIdentical)
{
  CANOPY_REQUIRE_GPU();
  constexpr int REPEATS = 24;
  HostProblem const problem = makeProblem({"r", 3, 8, 33, 1500, true, 1, 7}, MaskLayout::kTree, 77);
  cuda::CudaBatchStorage storage(BatchCapacity::of(problem));
  storage.upload(problem);
  struct Variant
  {
    char const *label;
    DesignPtr design;
    int nsplit;
  };
  Variant variants[] = {{"cuda-sm120 split", cuda::makeSm120Design(false), 7},
                        {"cuda-sm120 direct", cuda::makeSm120Design(false), 1},
                        {"cuda-sm120-w32 split", cuda::makeSm120WideDesign(true), 5},
                        {"cuda-sm120-w32 direct", cuda::makeSm120WideDesign(false), 1},
                        {"cuda-flat", cuda::makeFlatDesign(), 1}};
  for (auto &v : variants)
  {
    DesignOptions opt;
    opt.nsplit = v.nsplit;
    v.design->plan(boundsOf(problem), opt);
    storage.poisonOutput();
    v.design->run(storage.ref(), storage.context());
    std::vector<uint16_t> const first = storage.downloadOutput();
    expectMatches(referenceAttention(problem), first, v.label);
    int differing_runs = 0;
    size_t first_diff = 0;
    for (int r = 0; r < REPEATS; ++r)
    {
      storage.poisonOutput();
      v.design->run(storage.ref(), storage.context());
      std::vector<uint16_t> const again = storage.downloadOutput();
      auto const mismatch = std::mismatch(first.begin(), first.end(), again.begin());
      if (mismatch.first == first.end())
        continue;
      if (differing_runs++ == 0)
        first_diff = static_cast<size_t>(mismatch.first - first.begin());
    }
    EXPECT_EQ(differing_runs, 0) << v.label << ": " << differing_runs << " of " << REPEATS
                                 << " runs differ from the first, first at element " << first_diff;
  }
}

TEST(CudaDesigns, pathSaysWhichKernelRan)
{
  CANOPY_REQUIRE_GPU();
  HostProblem const problem = makeProblem({"p", 1, 8, 5, 64, false, 0, 16}, MaskLayout::kParents, 3);
  std::vector<double> const reference = referenceAttention(problem);
  DesignOptions opt;
  opt.nsplit = 16;
  auto sm120 = cuda::makeSm120Design(true);
  checkDesign(*sm120, problem, opt, reference);
  EXPECT_EQ(sm120->path(), "cuda-sm120/mma-split16-bf16/parents");
  opt.nsplit = 1;
  checkDesign(*sm120, problem, opt, reference);
  EXPECT_EQ(sm120->path(), "cuda-sm120/mma-direct/parents");
  auto flat = cuda::makeFlatDesign();
  checkDesign(*flat, problem, opt, reference);
  EXPECT_EQ(flat->path(), "cuda-flat/mma-flat/parents");
  EXPECT_TRUE(sm120->captureSafe());
  EXPECT_EQ(sm120->memory(), MemoryKind::kCudaDevice);
}

TEST(CudaDesigns, planRejectsShapesTheKernelsCannotServe)
{
  CANOPY_REQUIRE_GPU();
  auto design = cuda::makeSm120Design();
  PlanBounds b;
  b.max_batch = 1;
  b.max_tree = cuda::MAX_TREE + 1;
  b.max_nodes = b.max_tree;
  DesignOptions opt;
  EXPECT_THROW(design->plan(b, opt), InputError);
  b.max_tree = 8;
  b.max_nodes = 8;
  opt.nsplit = -1;
  EXPECT_THROW(design->plan(b, opt), InputError);
  opt.nsplit = 0;  // auto: chosen from the bounds
  EXPECT_NO_THROW(design->plan(b, opt));
  opt.nsplit = cuda::MAX_NSPLIT + 1;
  EXPECT_THROW(design->plan(b, opt), InputError);
  opt.nsplit = 4;
  EXPECT_NO_THROW(design->plan(b, opt));
}

TEST(CudaDesigns, runRejectsBatchesOutsideThePlan)
{
  CANOPY_REQUIRE_GPU();
  HostProblem const problem = makeProblem({"p", 2, 8, 9, 30, false, 0, 4}, MaskLayout::kFull, 5);
  auto design = cuda::makeSm120Design();
  PlanBounds b = boundsOf(problem);
  b.max_batch = 1;  // the problem has two requests
  design->plan(b, DesignOptions{});
  cuda::CudaBatchStorage storage(BatchCapacity::of(problem));
  storage.upload(problem);
  EXPECT_THROW(design->run(storage.ref(), storage.context()), InputError);
  PlanBounds tree_layout = boundsOf(problem);
  tree_layout.mask_layout = MaskLayout::kTree;  // buffers hold a full mask
  design->plan(tree_layout, DesignOptions{});
  EXPECT_THROW(design->run(storage.ref(), storage.context()), InputError);
}

TEST(CudaDesigns, launcherRefusesBadParams)
{
  cuda::VerifyParams p;  // null buffers
  EXPECT_NE(cuda::verifyParamsProblem(p), nullptr);
  EXPECT_EQ(cuda::launchVerifySm120(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchVerifySm120Wide(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchVerifyFlat(p, nullptr), cudaErrorInvalidValue);
}

TEST(CudaDesigns, sharedMemoryWithinTheSm120Limit)
{
  // Enforced at compile time too (static_assert); this keeps the number visible in test output.
  EXPECT_LE(cuda::sm120SharedBytes(), size_t{99} * 1024);
  EXPECT_LE(cuda::sm120WideSharedBytes(), size_t{99} * 1024);
  EXPECT_LE(cuda::flatSharedBytes(), size_t{99} * 1024);
}

TEST(CudaDesigns, registeredByName)
{
  auto names = designNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda-sm120"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda-flat"), names.end());
  // The 32-rows-per-warp tile is an experiment: selectable by name, not in the default list.
  EXPECT_EQ(std::find(names.begin(), names.end(), "cuda-sm120-w32"), names.end());
  EXPECT_TRUE(designIsExperimental("cuda-sm120-w32"));
  EXPECT_EQ(makeDesign("cuda-sm120-w32")->name(), "cuda-sm120-w32");
  auto const all = designNames(true);
  EXPECT_NE(std::find(all.begin(), all.end(), "cuda-sm120-w32"), all.end());
}

// ---- CUDA graphs -------------------------------------------------------------------------------

/// The registered design \p name, or null where this build does not register it.
DesignPtr maybeDesign(std::string const &name)
{
  registerBuiltinDesigns();
  auto const names = designNames();
  return std::find(names.begin(), names.end(), name) == names.end() ? nullptr : makeDesign(name);
}

struct GraphCase
{
  char const *name;
  std::function<DesignPtr()> make;
  WorkspaceStrategy workspace;
  MaskLayout layout;
};

// Test listings name the case, not the bytes of the struct (it holds a std::function).
void PrintTo(GraphCase const &c, std::ostream *os) { *os << c.name; }

class CudaGraph : public ::testing::TestWithParam<GraphCase>
{
};

// Three steps of one bucket (3 rows, T <= 40, P <= 900): different trees, prefix lengths, slots,
// queries and pool values, so a replay that reused anything from the captured step would fail.
std::vector<HostProblem> bucketSteps(MaskLayout layout)
{
  std::vector<HostProblem> steps;
  GeneratorOptions g;
  g.num_heads = 8;
  g.mask_layout = layout;
  g.batch = 3, g.tree_size = 33, g.prefix_len = 800, g.ragged = false, g.padded_rows = 0, g.seed = testSeed(21);
  steps.push_back(generateProblem(g));
  g.batch = 2, g.tree_size = 40, g.prefix_len = 900, g.ragged = true, g.padded_rows = 1, g.seed = testSeed(22);
  steps.push_back(generateProblem(g));
  g.batch = 1, g.tree_size = 17, g.prefix_len = 5, g.ragged = false, g.padded_rows = 2, g.seed = testSeed(23);
  steps.push_back(generateProblem(g));
  return steps;
}

TEST_P(CudaGraph, replayReadsTheLiveBuffers)
{
  CANOPY_REQUIRE_GPU();
  GraphCase const c = GetParam();
  std::vector<HostProblem> const steps = bucketSteps(c.layout);
  BatchCapacity cap{};
  PlanBounds bounds;
  bounds.max_batch = 3;
  bounds.max_tree = 40;
  bounds.max_prefix = 900;
  bounds.max_nodes = 3 * 40;
  bounds.num_heads = 8;
  bounds.mask_layout = c.layout;
  for (auto const &s : steps)
  {
    BatchCapacity const k = BatchCapacity::of(s);
    cap.max_batch = std::max(cap.max_batch, k.max_batch);
    cap.max_nodes = std::max(cap.max_nodes, k.max_nodes);
    cap.max_prefix_tokens = std::max(cap.max_prefix_tokens, k.max_prefix_tokens);
    cap.max_mask_bytes = std::max(cap.max_mask_bytes, k.max_mask_bytes);
    cap.num_slots = std::max(cap.num_slots, k.num_slots);
    cap.num_heads = k.num_heads;
  }
  DesignPtr design = c.make();
  if (!design || design->memory() != MemoryKind::kCudaDevice)
    GTEST_SKIP() << c.name << ": the design does not run on CUDA device memory in this build (needs a CUDA Kokkos)";
  DesignOptions opt;
  opt.nsplit = 8;
  opt.workspace = c.workspace;
  design->plan(bounds, opt);
  cuda::CudaBatchStorage storage(cap);
  cudaStream_t const stream = storage.stream();

  // Eager warm-up with the largest step (most nodes: grow sizes its workspace here), checked too.
  storage.upload(steps[0]);
  storage.poisonOutput();
  design->run(storage.ref(), storage.context());
  expectMatches(referenceAttention(steps[0]), storage.downloadOutput(), std::string(c.name) + " eager");

  storage.upload(steps[0]);
  storage.sync();
  cuda::Graph graph = cuda::Graph::capture(stream, [&] { design->run(storage.ref(), storage.context()); });
  ASSERT_TRUE(graph.valid());
  if (c.workspace == WorkspaceStrategy::kPerCall && design->name().rfind("cuda-sm120", 0) == 0)
    EXPECT_GE(graph.numNodes(), 4u) << "alloc, split kernel, combine, free";

  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{0}})
  {
    storage.upload(steps[i]);  // new metadata, q and pool in the same static buffers
    storage.poisonOutput();
    graph.replay(stream);
    expectMatches(referenceAttention(steps[i]), storage.downloadOutput(),
                  std::string(c.name) + " replay of step " + std::to_string(i));
    // Rows past this step's nodes (padded requests, a smaller step in the bucket) keep the poison.
    std::vector<uint16_t> const all = storage.downloadOutputRows(cap.max_nodes);
    size_t const used = steps[i].outElements();
    size_t const touched = static_cast<size_t>(
        std::count_if(all.begin() + static_cast<std::ptrdiff_t>(used), all.end(), [](uint16_t v) { return v != 0xffff; }));
    EXPECT_EQ(touched, 0u) << c.name << " replay of step " << i << ": " << touched << " output elements past the "
                           << steps[i].meta.numNodes() << " used rows were written";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, CudaGraph,
    ::testing::Values(GraphCase{"sm120_persistent_full", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kFull},
                      GraphCase{"sm120_percall_tree", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kPerCall, MaskLayout::kTree},
                      GraphCase{"sm120_grow_parents", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kGrow, MaskLayout::kParents},
                      GraphCase{"w32_percall_parents", [] { return cuda::makeSm120WideDesign(); },
                                WorkspaceStrategy::kPerCall, MaskLayout::kParents},
                      GraphCase{"flat_persistent_parents", [] { return cuda::makeFlatDesign(); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kParents},
                      // Kokkos designs on a Kokkos::Cuda instance made from the storage's stream.
                      GraphCase{"kokkos_team_persistent_tree", [] { return maybeDesign("kokkos-team"); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kTree},
                      GraphCase{"kokkos_team_portable_grow_parents", [] { return maybeDesign("kokkos-team-portable"); },
                                WorkspaceStrategy::kGrow, MaskLayout::kParents},
                      GraphCase{"kokkos_kk_persistent_full", [] { return maybeDesign("kokkos-kk"); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kFull}),
    [](::testing::TestParamInfo<GraphCase> const &i) { return std::string(i.param.name); });

TEST(CudaGraphCapture, growWithoutWarmUpFailsTheCaptureLoudly)
{
  CANOPY_REQUIRE_GPU();
  HostProblem const problem = makeProblem({"p", 2, 8, 9, 300, false, 0, 4}, MaskLayout::kFull, 9);
  auto design = cuda::makeSm120Design();
  DesignOptions opt;
  opt.nsplit = 4;
  opt.workspace = WorkspaceStrategy::kGrow;
  design->plan(boundsOf(problem), opt);
  cuda::CudaBatchStorage storage(BatchCapacity::of(problem));
  storage.upload(problem);
  storage.sync();
  EXPECT_THROW(cuda::Graph::capture(storage.stream(), [&] { design->run(storage.ref(), storage.context()); }),
               RuntimeFailure);
  // The aborted capture leaves the stream usable: an eager run grows and is correct.
  storage.poisonOutput();
  design->run(storage.ref(), storage.context());
  expectMatches(referenceAttention(problem), storage.downloadOutput(), "eager after aborted capture");
  EXPECT_GT(design->workspaceBytes(), 0u);
}
} // namespace
} // namespace canopy::test
