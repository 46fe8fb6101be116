/// \file tstVerifyAttentionCuda.cpp
/// \brief cuda-sm120, cuda-sm120-w32 and cuda-flat against the fp64 reference: a shape grid with
/// the edge cases (P = 0, P < NSPLIT, T = 1, T = 65, ragged, padded rows, H not dividing the tile),
/// every mask layout, both partial dtypes; trees up to cuda::MAX_TREE = 1024 nodes (deep chains,
/// wide fans, ragged batches mixing small and big trees, visibility windows rebuilt mid-loop);
/// then under CUDA graph capture (global mode) with the metadata, queries and pool replaced between
/// replays, for every workspace strategy, in a small and a big-tree bucket.
#include "canopy_Bf16.hpp"
#include "canopy_CudaBatchStorage.hpp"
#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaTestUtils.hpp"
#include "canopy_TestSeed.hpp"
#include "canopy_Random.hpp"
#include "canopy_Registry.hpp"
#include "canopy_Tree.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
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

/// The CUDA designs in every variant a check runs: both partial dtypes and NSPLIT 1 (the direct
/// path) for the split designs, plus the Kokkos designs that run on CUDA memory in this build.
struct Variant
{
  std::string label;
  std::function<DesignPtr()> make;
  int nsplit;
};

std::vector<Variant> cudaVariants(int nsplit)
{
  std::vector<Variant> variants = {
      {"cuda-sm120 f32", [] { return cuda::makeSm120Design(false); }, nsplit},
      {"cuda-sm120 bf16", [] { return cuda::makeSm120Design(true); }, nsplit},
      {"cuda-sm120 direct", [] { return cuda::makeSm120Design(false); }, 1},
      {"cuda-sm120-w32 f32", [] { return cuda::makeSm120WideDesign(false); }, nsplit},
      {"cuda-sm120-w32 bf16", [] { return cuda::makeSm120WideDesign(true); }, nsplit},
      {"cuda-sm120-w32 direct", [] { return cuda::makeSm120WideDesign(false); }, 1},
      {"cuda-flat", [] { return cuda::makeFlatDesign(); }, nsplit},
  };
  if (sm90Here())
  {
    variants.push_back({"cuda-sm90 f32", [] { return cuda::makeSm90Design(false); }, nsplit});
    variants.push_back({"cuda-sm90 bf16", [] { return cuda::makeSm90Design(true); }, nsplit});
    variants.push_back({"cuda-sm90 direct", [] { return cuda::makeSm90Design(false); }, 1});
    variants.push_back({"cuda-sm90-sync f32", [] { return cuda::makeSm90SyncDesign(false); }, nsplit});
    variants.push_back({"cuda-sm90-sync direct", [] { return cuda::makeSm90SyncDesign(false); }, 1});
    variants.push_back({"cuda-sm90-c2 f32", [] { return cuda::makeSm90PairDesign(); }, nsplit});
    variants.push_back({"cuda-sm90-c2 direct", [] { return cuda::makeSm90PairDesign(); }, 1});
  }
  for (std::string const &n : kokkosDesignsOnCuda())
    variants.push_back({n, [n] { return makeDesign(n); }, nsplit});
  return variants;
}

/// Every variant on \p problem against \p reference: no NaN or unwritten element, within tolerance.
void expectEveryVariantMatches(HostProblem const &problem, std::vector<double> const &reference, int nsplit,
                               std::string const &label)
{
  for (Variant const &v : cudaVariants(nsplit))
  {
    DesignPtr design = v.make();
    DesignOptions opt;
    opt.nsplit = v.nsplit;
    CheckResult const r = checkDesign(*design, problem, opt, reference);
    std::string const what = label + " / " + v.label + " (" + r.path + ")";
    EXPECT_EQ(r.error.num_bad, 0) << what << ": first bad element " << r.error.first_bad;
    EXPECT_TRUE(r.error.pass) << what << ": rel-L2 " << r.error.rel_l2 << ", worst row rel-L2 "
                              << r.error.worst_row_rel_l2 << " (row " << r.error.worst_row << "), max abs "
                              << r.error.max_abs;
  }
}

TEST_P(CudaGrid, matchesFp64ReferenceForEveryLayoutAndDesign)
{
  CANOPY_REQUIRE_GPU();
  GridCase const c = GetParam();
  for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
  {
    HostProblem const problem = makeProblem(c, layout, 1000 + static_cast<uint64_t>(layout));
    expectEveryVariantMatches(problem, referenceAttention(problem), c.nsplit,
                              std::string(c.name) + " / " + toString(layout));
  }
}

/// Ragged requests of 1, 2, 3 and 5 row tiles (H = 8: T = 8, 16, 24, 40) and one that cuts its
/// last tile in the middle (T = 21): cuda-sm90-c2's CTA pairs with both tiles live (sharing), with a
/// dead peer (the last tile of an odd count, the padded tile of the grid, a one-tile request) and
/// with empty splits; every layout, split and direct.
TEST(CudaDesigns, clusterPairsWithAndWithoutPeers)
{
  CANOPY_REQUIRE_GPU();
  for (int nsplit : {1, 6})
    for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
    {
      GeneratorOptions g;
      g.batch = 6;
      g.num_heads = 8;
      g.tree_sizes = {8, 16, 24, 40, 21, 2};
      g.prefix_len = 900;
      g.ragged = true;
      g.padded_rows = 1;
      g.mask_layout = layout;
      g.seed = testSeed(4100 + static_cast<uint64_t>(layout) + static_cast<uint64_t>(nsplit));
      HostProblem const problem = generateProblem(g);
      expectEveryVariantMatches(problem, referenceAttention(problem), nsplit,
                                "row tiles 1,2,3,5 / nsplit " + std::to_string(nsplit) + " / " + toString(layout));
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGrid, ::testing::ValuesIn(GRID),
                         [](::testing::TestParamInfo<GridCase> const &i) { return std::string(i.param.name); });

// ---- Trees up to cuda::MAX_TREE ------------------------------------------------------------------

/// Tree shapes of the big-tree cases. DDTree grows its tree best-first from the drafter's
/// per-position distributions: a deep top-1 path, wide fans where the drafter is unsure, and side
/// branches off earlier nodes. Nodes are in creation order (parent[i] < i) in every kind.
enum class TreeKind
{
  kDraft,  ///< makeDraftTree: a spine of <= 16 nodes with shallow side branches (the generator's trees)
  kMixed,  ///< deep chains (depth about 0.4 T), wide fans and branches off random earlier nodes
  kChain,  ///< one path: node i sees every node 0..i (the longest ancestor walks)
  kFan,    ///< every node a child of the root: node i sees 0 and i
};

std::vector<int32_t> makeTree(TreeKind kind, int size, uint64_t seed)
{
  if (kind == TreeKind::kDraft)
    return makeDraftTree(size, seed);
  std::vector<int32_t> parent;
  SplitMix64 rng(seed);
  int tip = 0, fan = 0;  // end of the deepest chain; the node the current fan hangs off
  for (int i = 0; i < size; ++i)
  {
    if (i == 0)
      parent.push_back(-1);
    else if (kind == TreeKind::kChain)
      parent.push_back(i - 1);
    else if (kind == TreeKind::kFan)
      parent.push_back(0);
    else
    {
      double const u = rng.uniform();
      if (u < 0.4)
      {
        parent.push_back(tip);
        tip = i;
      }
      else if (u < 0.75)
        parent.push_back(fan);
      else
        parent.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(i))));
      if (rng.uniform() < 0.03)
        fan = static_cast<int>(rng.below(static_cast<uint64_t>(i) + 1));
    }
  }
  return parent;
}

struct BigCase
{
  char const *name;
  std::vector<int> trees;          ///< T per request
  std::vector<int64_t> prefixes;   ///< P per request
  std::vector<TreeKind> kinds;     ///< tree kind of request b: kinds[b % size]
  int heads;
  int nsplit;
  int padded;    ///< empty requests appended
  double logit;  ///< > 0: makeTreeDominant with this logit (long prefixes); 0: random values
};

void PrintTo(BigCase const &c, std::ostream *os) { *os << c.name; }

/// A batch with the case's exact per-request sizes: slots scattered over a pool 1.25x the rows
/// needed (a seeded shuffle), random bf16 values, optionally tree-dominant.
HostProblem makeBigProblem(BigCase const &c, MaskLayout layout, uint64_t seed)
{
  HostProblem problem;
  problem.shape.num_heads = c.heads;
  int64_t need = 0;
  for (size_t b = 0; b < c.trees.size(); ++b)
    need += c.trees[b] + c.prefixes[b];
  problem.num_slots = need + need / 4 + 1;
  std::vector<int64_t> slots(static_cast<size_t>(problem.num_slots));
  std::iota(slots.begin(), slots.end(), int64_t{0});
  SplitMix64 rng(seed);
  for (size_t i = slots.size(); i > 1; --i)
    std::swap(slots[i - 1], slots[rng.below(i)]);
  std::vector<RequestSpec> requests(c.trees.size());
  auto next = slots.begin();
  for (size_t b = 0; b < c.trees.size(); ++b)
  {
    RequestSpec &r = requests[b];
    r.prefix_slots.assign(next, next + c.prefixes[b]);
    next += c.prefixes[b];
    r.tree_slots.assign(next, next + c.trees[b]);
    next += c.trees[b];
    r.parent = makeTree(c.kinds[b % c.kinds.size()], c.trees[b], seed + 7919ull * (b + 1));
  }
  problem.meta = buildMetadata(requests, layout);
  padBatch(problem.meta, static_cast<int>(c.trees.size()) + c.padded);
  fillRandomValues(problem, seed ^ 0x5bd1e995ull);
  if (c.logit > 0)
    makeTreeDominant(problem, seed, c.logit);
  return problem;
}

using TK = TreeKind;
// Every T of the acceptance list (1 and 65 are in GRID) at the heads that put the most nodes in a
// row tile where it matters: H = 1 (64 nodes) makes cuda-sm120 and -w32 rebuild their 512-key
// visibility window where one split holds more than 512 tree keys (NSPLIT 1), as does cuda-flat
// (32 nodes, 2 KB); H = 3 cuts nodes at tile edges. Sizes stay within ~2 GFLOP of fp64 reference
// per layout (deep trees at small H).
BigCase const BIG[] = {
    {"T64_T255_T256_T257", {64, 255, 256, 257}, {37, 0, 300, 129}, {TK::kDraft, TK::kMixed}, 8, 4, 1, 0},
    {"T512_H3_Mixed", {512}, {200}, {TK::kMixed}, 3, 3, 0, 6},
    {"T1024_H8_Draft", {1024}, {64}, {TK::kDraft}, 8, 2, 0, 0},
    {"T1024_H1_Chain", {1024}, {0}, {TK::kChain}, 1, 5, 0, 0},
    {"T1024_H2_Fan", {1024}, {300}, {TK::kFan}, 2, 7, 0, 8},
    {"Ragged_1_to_1024_H1", {1, 1024, 33, 700}, {5, 100, 2000, 31}, {TK::kMixed}, 1, 6, 2, 8},
    // The smallest case with a window rebuild in every design (one split, 64 or 32 nodes, 520 > 512
    // tree keys): small enough for compute-sanitizer racecheck.
    {"T520_H1_Rebuild", {520}, {0}, {TK::kMixed}, 1, 1, 0, 0},
};

class CudaBigTrees : public ::testing::TestWithParam<BigCase>
{
};

TEST_P(CudaBigTrees, matchesFp64ReferenceForEveryLayoutAndDesign)
{
  CANOPY_REQUIRE_GPU();
  BigCase const c = GetParam();
  for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
  {
    HostProblem const problem = makeBigProblem(c, layout, testSeed(3000 + static_cast<uint64_t>(layout)));
    expectEveryVariantMatches(problem, referenceAttention(problem), c.nsplit,
                              std::string(c.name) + " / " + toString(layout));
  }
}

INSTANTIATE_TEST_SUITE_P(BigTrees, CudaBigTrees, ::testing::ValuesIn(BIG),
                         [](::testing::TestParamInfo<BigCase> const &i) { return std::string(i.param.name); });

/// Host side of the big trees: the three layouts give the same reference on a 1024-node tree (the
/// masks are built from the parents, the parents layout walks them), and the checker rejects each
/// visibility mutation there, so the GPU cases above can fail.
TEST(BigTreeHost, layoutsAgreeAndTheCheckerRejectsVisibilityMutations)
{
  BigCase const c{"host", {1024}, {16}, {TK::kMixed}, 1, 1, 0, 8};
  std::vector<double> by_layout[3];
  MaskLayout const layouts[] = {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents};
  for (int l = 0; l < 3; ++l)
    by_layout[l] = referenceAttention(makeBigProblem(c, layouts[l], testSeed(41)));
  EXPECT_EQ(by_layout[0], by_layout[2]) << "full mask vs parents";
  EXPECT_EQ(by_layout[1], by_layout[2]) << "tree mask vs parents";

  HostProblem const problem = makeBigProblem(c, MaskLayout::kParents, testSeed(41));
  auto asBf16 = [](std::vector<double> const &v) {
    std::vector<uint16_t> out(v.size());
    std::transform(v.begin(), v.end(), out.begin(), [](double x) { return floatToBf16(static_cast<float>(x)); });
    return out;
  };
  std::vector<double> const &ref = by_layout[2];
  EXPECT_TRUE(compareToReference(ref, asBf16(ref).data(), ref.size()).pass) << "bf16 rounding of the reference";
  // Tree-dominant values: a wrong ancestor set moves a row by O(1) of its norm.
  for (Mutation m : {Mutation::kSelfOnly, Mutation::kCausalTree, Mutation::kSiblingsVisible})
  {
    ErrorStats const e = compareToReference(ref, asBf16(mutatedReference(problem, m)).data(), ref.size());
    EXPECT_FALSE(e.pass) << toString(m) << " passed: rel-L2 " << e.rel_l2 << ", worst row " << e.worst_row_rel_l2;
  }
  // Random values: the 16 prefix keys carry a visible share of every row (tree-dominant values
  // hide them on purpose).
  BigCase random_values = c;
  random_values.logit = 0;
  HostProblem const plain = makeBigProblem(random_values, MaskLayout::kParents, testSeed(42));
  std::vector<double> const plain_ref = referenceAttention(plain);
  ErrorStats const e = compareToReference(plain_ref, asBf16(mutatedReference(plain, Mutation::kNoPrefix)).data(),
                                          plain_ref.size());
  EXPECT_FALSE(e.pass) << "no-prefix passed: rel-L2 " << e.rel_l2 << ", worst row " << e.worst_row_rel_l2;
}

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
  std::vector<Variant> variants;
  variants.push_back({"cuda-sm120 split", cuda::makeSm120Design(false), 7});
  variants.push_back({"cuda-sm120 direct", cuda::makeSm120Design(false), 1});
  variants.push_back({"cuda-sm120-w32 split", cuda::makeSm120WideDesign(true), 5});
  variants.push_back({"cuda-sm120-w32 direct", cuda::makeSm120WideDesign(false), 1});
  variants.push_back({"cuda-flat", cuda::makeFlatDesign(), 1});
  if (sm90Here())
  {
    variants.push_back({"cuda-sm90 split", cuda::makeSm90Design(false), 7});
    variants.push_back({"cuda-sm90 direct", cuda::makeSm90Design(false), 1});
    variants.push_back({"cuda-sm90-sync split", cuda::makeSm90SyncDesign(true), 7});
    variants.push_back({"cuda-sm90-c2 split", cuda::makeSm90PairDesign(), 7});
    variants.push_back({"cuda-sm90-c2 direct", cuda::makeSm90PairDesign(), 1});
  }
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
  EXPECT_EQ(sm120->path(), "cuda-sm120-bf16p/mma-split16-bf16/parents");
  opt.nsplit = 1;
  checkDesign(*sm120, problem, opt, reference);
  EXPECT_EQ(sm120->path(), "cuda-sm120-bf16p/mma-direct/parents");
  auto flat = cuda::makeFlatDesign();
  checkDesign(*flat, problem, opt, reference);
  EXPECT_EQ(flat->path(), "cuda-flat/mma-flat/parents");
  EXPECT_TRUE(sm120->captureSafe());
  EXPECT_EQ(sm120->memory(), MemoryKind::kCudaDevice);
  if (sm90Here())
  {
    auto sm90 = cuda::makeSm90Design(false);
    opt.nsplit = 3;
    checkDesign(*sm90, problem, opt, reference);
    EXPECT_EQ(sm90->path(), "cuda-sm90/wgmma-split3-f32/parents");
    opt.nsplit = 1;
    checkDesign(*sm90, problem, opt, reference);
    EXPECT_EQ(sm90->path(), "cuda-sm90/wgmma-direct/parents");
    // The pair shares only where a request has two row tiles: T = 5 x 8 heads is one.
    auto c2 = cuda::makeSm90PairDesign();
    opt.nsplit = 3;
    checkDesign(*c2, problem, opt, reference);
    EXPECT_EQ(c2->path(), "cuda-sm90-c2/wgmma-c1-split3-f32/parents");
    HostProblem const two_tiles = makeProblem({"p2", 2, 8, 9, 300, false, 0, 16}, MaskLayout::kTree, 4);
    checkDesign(*c2, two_tiles, opt, referenceAttention(two_tiles));
    EXPECT_EQ(c2->path(), "cuda-sm90-c2/wgmma-c2-split3-f32/tree");
  }
}

TEST(CudaDesigns, sm90PlanUnsupportedOffHopper)
{
  CANOPY_REQUIRE_GPU();
  PlanBounds b;
  b.max_tree = 8;
  b.max_nodes = 8;
  auto design = cuda::makeSm90Design();
  if (sm90Here())
  {
    EXPECT_NO_THROW(design->plan(b, DesignOptions{}));
    EXPECT_GT(cuda::sm90SharedBytes(), cuda::SMEM_LIMIT) << "uses Hopper's 227 KB, not the sm_120 limit";
    return;
  }
  try
  {
    design->plan(b, DesignOptions{});
    ADD_FAILURE() << "cuda-sm90 planned on a GPU that is not sm_90";
  }
  catch (Unsupported const &e)
  {
    EXPECT_NE(std::string(e.what()).find("sm_90a"), std::string::npos) << e.what();
  }
}

TEST(CudaDesigns, planRejectsShapesTheKernelsCannotServe)
{
  CANOPY_REQUIRE_GPU();
  auto design = cuda::makeSm120Design();
  PlanBounds b;
  b.max_batch = 1;
  b.max_tree = cuda::MAX_TREE;
  b.max_nodes = b.max_tree;
  DesignOptions opt;
  EXPECT_NO_THROW(design->plan(b, opt));
  // Past the limit: Unsupported (canopy check / run report the design as unsupported and go on),
  // naming the design and the limit.
  b.max_tree = cuda::MAX_TREE + 1;
  b.max_nodes = b.max_tree;
  DesignPtr designs[] = {cuda::makeSm120Design(), cuda::makeSm120Design(true), cuda::makeSm120WideDesign(),
                         cuda::makeFlatDesign()};
  for (DesignPtr const &d : designs)
  {
    try
    {
      d->plan(b, opt);
      ADD_FAILURE() << d->name() << ": plan accepted max_tree " << b.max_tree;
    }
    catch (Unsupported const &e)
    {
      std::string const what = e.what();
      EXPECT_NE(what.find(d->name()), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(cuda::MAX_TREE)), std::string::npos) << what;
    }
  }
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
  EXPECT_EQ(cuda::launchVerifySm90(p, nullptr), cudaErrorInvalidValue);
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
  auto const all = designNames(true);
  EXPECT_NE(std::find(all.begin(), all.end(), "cuda-sm120-w32"), all.end());
  // Every CUDA design names itself as registered (its refusals and paths start with that name).
  int cuda_designs = 0;
  for (auto const &n : all)
    if (n.rfind("cuda-", 0) == 0)
    {
      EXPECT_EQ(makeDesign(n)->name(), n);
      ++cuda_designs;
    }
  EXPECT_GE(cuda_designs, 6);
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
  bool big = false;  ///< the big-tree bucket (T <= 1024) instead of the small one (T <= 40)
};

// Test listings name the case, not the bytes of the struct (it holds a std::function).
void PrintTo(GraphCase const &c, std::ostream *os) { *os << c.name; }

class CudaGraph : public ::testing::TestWithParam<GraphCase>
{
};

/// One graph bucket: plan bounds and the steps replayed in it, with their fp64 references (shared
/// by the cases of a layout: the big bucket's references are the expensive part of the suite).
struct Bucket
{
  PlanBounds bounds;
  std::vector<HostProblem> steps;  ///< steps[0] has the most nodes (grow's eager warm-up)
  std::vector<std::vector<double>> references;
};

// Three steps of one bucket: different trees, prefix lengths, slots, queries and pool values, so a
// replay that reused anything from the captured step would fail. Small: 3 rows, T <= 40, P <= 900,
// H = 8. Big: 3 rows, T <= 1024, P <= 2000, H = 2, ragged, the biggest tree in a different row in
// each step (deep chains and wide fans).
Bucket const &bucket(MaskLayout layout, bool big)
{
  static std::map<std::pair<MaskLayout, bool>, Bucket> cache;
  auto const key = std::make_pair(layout, big);
  auto const found = cache.find(key);
  if (found != cache.end())
    return found->second;
  Bucket k;
  k.bounds.max_batch = 3;
  k.bounds.mask_layout = layout;
  if (!big)
  {
    k.bounds.max_tree = 40;
    k.bounds.max_prefix = 900;
    k.bounds.max_nodes = 3 * 40;
    k.bounds.num_heads = 8;
    GeneratorOptions g;
    g.num_heads = 8;
    g.mask_layout = layout;
    g.batch = 3, g.tree_size = 33, g.prefix_len = 800, g.ragged = false, g.padded_rows = 0, g.seed = testSeed(21);
    k.steps.push_back(generateProblem(g));
    g.batch = 2, g.tree_size = 40, g.prefix_len = 900, g.ragged = true, g.padded_rows = 1, g.seed = testSeed(22);
    k.steps.push_back(generateProblem(g));
    g.batch = 1, g.tree_size = 17, g.prefix_len = 5, g.ragged = false, g.padded_rows = 2, g.seed = testSeed(23);
    k.steps.push_back(generateProblem(g));
  }
  else
  {
    k.bounds.max_tree = cuda::MAX_TREE;
    k.bounds.max_prefix = 2000;
    k.bounds.max_nodes = 1400;
    k.bounds.num_heads = 2;
    BigCase const steps[] = {
        {"step0", {1024, 17, 300}, {100, 2000, 0}, {TK::kMixed, TK::kDraft, TK::kFan}, 2, 1, 0, 8},
        {"step1", {257, 1000}, {64, 5}, {TK::kFan, TK::kMixed}, 2, 1, 1, 8},
        {"step2", {65}, {900}, {TK::kMixed}, 2, 1, 2, 8},
    };
    for (size_t i = 0; i < 3; ++i)
      k.steps.push_back(makeBigProblem(steps[i], layout, testSeed(31 + i)));
  }
  for (HostProblem const &s : k.steps)
    k.references.push_back(referenceAttention(s));
  return cache.emplace(key, std::move(k)).first->second;
}

TEST_P(CudaGraph, replayReadsTheLiveBuffers)
{
  CANOPY_REQUIRE_GPU();
  GraphCase const c = GetParam();
  DesignPtr design = c.make();
  if (!design || design->memory() != MemoryKind::kCudaDevice)
    GTEST_SKIP() << c.name << ": the design does not run on CUDA device memory here (the Kokkos designs need a "
                    "CUDA Kokkos, cuda-sm90 an sm_90 GPU)";
  Bucket const &k = bucket(c.layout, c.big);
  std::vector<HostProblem> const &steps = k.steps;
  PlanBounds const &bounds = k.bounds;
  BatchCapacity const cap = BatchCapacity::covering(steps);
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
  expectMatches(k.references[0], storage.downloadOutput(), std::string(c.name) + " eager");

  storage.upload(steps[0]);
  storage.sync();
  cuda::Graph graph = cuda::Graph::capture(stream, [&] { design->run(storage.ref(), storage.context()); });
  ASSERT_TRUE(graph.valid());
  if (c.workspace == WorkspaceStrategy::kPerCall &&
      (design->name().rfind("cuda-sm120", 0) == 0 || design->name() == "cuda-sm90"))
    EXPECT_GE(graph.numNodes(), 4u) << "alloc, split kernel, combine, free";

  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{0}})
  {
    storage.upload(steps[i]);  // new metadata, q and pool in the same static buffers
    storage.poisonOutput();
    graph.replay(stream);
    expectMatches(k.references[i], storage.downloadOutput(),
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
                      GraphCase{"sm90_persistent_full", [] { return sm90Here() ? cuda::makeSm90Design() : nullptr; },
                                WorkspaceStrategy::kPersistent, MaskLayout::kFull},
                      GraphCase{"sm90_percall_tree", [] { return sm90Here() ? cuda::makeSm90Design() : nullptr; },
                                WorkspaceStrategy::kPerCall, MaskLayout::kTree},
                      GraphCase{"big_sm90_bf16_grow_parents",
                                [] { return sm90Here() ? cuda::makeSm90Design(true) : nullptr; },
                                WorkspaceStrategy::kGrow, MaskLayout::kParents, true},
                      GraphCase{"sm90sync_persistent_tree",
                                [] { return sm90Here() ? cuda::makeSm90SyncDesign() : nullptr; },
                                WorkspaceStrategy::kPersistent, MaskLayout::kTree},
                      GraphCase{"sm120_percall_tree", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kPerCall, MaskLayout::kTree},
                      GraphCase{"sm120_grow_parents", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kGrow, MaskLayout::kParents},
                      GraphCase{"w32_percall_parents", [] { return cuda::makeSm120WideDesign(); },
                                WorkspaceStrategy::kPerCall, MaskLayout::kParents},
                      GraphCase{"flat_persistent_parents", [] { return cuda::makeFlatDesign(); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kParents},
                      // The big-tree bucket: T up to 1024 in every layout and design.
                      GraphCase{"big_sm120_persistent_full", [] { return cuda::makeSm120Design(); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kFull, true},
                      GraphCase{"big_sm120_bf16_grow_parents", [] { return cuda::makeSm120Design(true); },
                                WorkspaceStrategy::kGrow, MaskLayout::kParents, true},
                      GraphCase{"big_w32_percall_tree", [] { return cuda::makeSm120WideDesign(); },
                                WorkspaceStrategy::kPerCall, MaskLayout::kTree, true},
                      GraphCase{"big_flat_persistent_parents", [] { return cuda::makeFlatDesign(); },
                                WorkspaceStrategy::kPersistent, MaskLayout::kParents, true},
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
