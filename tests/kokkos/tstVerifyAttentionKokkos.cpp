/// \file tstVerifyAttentionKokkos.cpp
/// \brief The portable kernels (kokkos-team, kokkos-kk tile products), called directly on a
/// VerifyBatch of each enabled execution space, against the fp64 reference: random shapes from
/// fixed seeds, empty and short prefixes, T = 1 and 65, ragged batches with padded rows, every mask
/// layout, NSPLIT 1/4/16, fragmented slots, several row tiles; outputs poisoned before each run and
/// spare bucket rows checked to keep their poison.
#include "canopy_TestProblems.hpp"
#include "canopy_OneThreadTeams.hpp"
#include "canopy_BatchStorage.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Reference.hpp"
#include "canopy_TestSpaces.hpp"
#include "canopy_VerifyAttention_spec.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

constexpr MaskLayout ALL_LAYOUTS[] = {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents};

/// A flavour nothing specialises: asking for it must fall back (and say so), or throw when strict.
struct UncompiledTiles
{
  static constexpr char const *name() { return "test-uncompiled"; }
};

struct RunResult
{
  ErrorStats error;
  VerifyPath path;
  std::vector<uint16_t> out;
  int64_t written_outside = 0;  ///< elements past the used rows that lost their poison
};

struct RunOptions
{
  int nsplit = 4;
  Algo algo = Algo::Auto;
  int max_rows = 0;         ///< row cap per tile (0: the space's default)
  /// Bucket capacity beyond the problem's rows, which must keep their poison. Never 0 by default:
  /// with no spare rows the "wrote past the batch's rows" check would have nothing to look at.
  int64_t extra_nodes = 2;
  bool strict = false;
};

/// Upload, poison, plan from the problem's bounds, run, and compare every used element with the
/// fp64 reference; rows past the used ones must still hold the poison.
template <class ExecutionSpace, class Flavor>
RunResult runKernel(HostProblem const &problem, RunOptions const &o = {})
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  BatchCapacity cap = BatchCapacity::of(problem);
  cap.max_nodes += o.extra_nodes;
  VerifyBatch<MemorySpace> batch(cap);
  batch.upload(problem);
  batch.poisonOutput();
  VerifyPlan const plan = planVerifyFor<ExecutionSpace, Flavor>(boundsOf(problem), o.nsplit, o.strict, o.algo, o.max_rows);
  VerifyWorkspace<MemorySpace> const ws = makeVerifyWorkspace<MemorySpace>(plan, plan.max_nodes);
  ExecutionSpace space;
  RunResult r;
  r.path = verifyAttention<ExecutionSpace, Flavor>(space, makeVerifyArgs(batch), ws, plan, o.algo);
  space.fence();
  r.out = batch.downloadOutput();
  EXPECT_EQ(r.out.size(), problem.outElements());
  r.error = compareToReference(referenceAttention(problem), r.out.data(), r.out.size());
  auto all = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), batch.out);
  for (size_t i = problem.outElements(); i < static_cast<size_t>(cap.max_nodes * cap.num_heads * D_V); ++i)
    r.written_outside += all(i) != BF16_POISON;
  return r;
}

std::string describe(ErrorStats const &e)
{
  return "rel_l2 " + std::to_string(e.rel_l2) + ", max_abs " + std::to_string(e.max_abs) + ", bad " +
         std::to_string(e.num_bad) + " (first " + std::to_string(e.first_bad) + ")";
}

template <class ExecutionSpace, class Flavor>
void expectCorrect(HostProblem const &problem, RunOptions const &o = {})
{
  RunResult const r = runKernel<ExecutionSpace, Flavor>(problem, o);
  EXPECT_TRUE(r.error.pass) << Flavor::name() << ": " << describe(r.error);
  EXPECT_EQ(r.error.num_bad, 0) << "NaN or unwritten elements";
  EXPECT_LE(r.error.rel_l2, REL_L2_TOLERANCE);
  EXPECT_EQ(r.written_outside, 0) << "wrote past the batch's rows";
  EXPECT_FALSE(r.path.fallback) << r.path.path;
}

/// Every tile-product flavour compiled in this build (kokkos-kk in its three batched GEMMs).
template <class ExecutionSpace>
void expectCorrectAllFlavors(HostProblem const &problem, RunOptions const &o = {})
{
  expectCorrect<ExecutionSpace, TeamTiles>(problem, o);
#ifdef CANOPY_HAVE_KOKKOSKERNELS
  expectCorrect<ExecutionSpace, BatchedGemmTiles>(problem, o);
  expectCorrect<ExecutionSpace, BatchedGemmTilesOf<KkGemm::kTeamUnblocked>>(problem, o);
  expectCorrect<ExecutionSpace, BatchedGemmTilesOf<KkGemm::kTeamVector>>(problem, o);
#endif
}

using canopy::test::problemOf;

template <class ExecutionSpace>
struct VerifyAttentionKokkos : ::testing::Test
{
};
TYPED_TEST_SUITE(VerifyAttentionKokkos, CanopyExecSpaces);

TYPED_TEST(VerifyAttentionKokkos, randomShapesFromSeededDraws)
{
  // Fixed seeds (a failure reproduces); CANOPY_TEST_SEED shifts them to explore other shapes.
  for (int trial = 0; trial < 4; ++trial)
  {
    uint64_t const seed = canopy::test::testSeed(0x5eed00 + static_cast<uint64_t>(trial));
    std::mt19937_64 rng(seed);
    auto pick = [&rng](int lo, int hi) { return static_cast<int>(lo + rng() % static_cast<uint64_t>(hi - lo + 1)); };
    int const nsplits[] = {1, 4, 16};
    RunOptions o;
    o.nsplit = nsplits[pick(0, 2)];
    HostProblem const p = problemOf(pick(1, 3), pick(1, 6), pick(1, 40), pick(0, 200), ALL_LAYOUTS[pick(0, 2)], seed,
                                    /*ragged=*/true, pick(0, 2));
    SCOPED_TRACE("seed " + std::to_string(seed) + ", nsplit " + std::to_string(o.nsplit) + ", mask " +
                 toString(p.meta.mask_layout));
    expectCorrectAllFlavors<TypeParam>(p, o);
  }
}

TYPED_TEST(VerifyAttentionKokkos, emptyPrefixInEveryLayout)
{
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(problemOf(2, 3, 17, 0, m, 11));
  }
}

TYPED_TEST(VerifyAttentionKokkos, prefixShorterThanNsplit)
{
  RunOptions o;
  o.nsplit = 16;
  expectCorrectAllFlavors<TypeParam>(problemOf(1, 2, 9, 5, MaskLayout::kFull, 12), o);
}

TYPED_TEST(VerifyAttentionKokkos, prefixNotAMultipleOfTheTile)
{
  using Tiles = Impl::VerifyTiles<TypeParam>;
  for (int nsplit : {1, 4})
  {
    RunOptions o;
    o.nsplit = nsplit;
    SCOPED_TRACE("nsplit " + std::to_string(nsplit));
    expectCorrectAllFlavors<TypeParam>(problemOf(1, 2, 5, 3 * Tiles::KV_TILE + 7, MaskLayout::kTree, 13), o);
  }
}

TYPED_TEST(VerifyAttentionKokkos, singleNodeTree)
{
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(problemOf(3, 4, 1, 45, m, 14));
  }
}

TYPED_TEST(VerifyAttentionKokkos, treeOf65NodesBeyondOneAncestorWord)
{
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(problemOf(1, 2, 65, 40, m, 15));
  }
}

TYPED_TEST(VerifyAttentionKokkos, raggedBatchWithPaddedRowsWritesOnlyItsRows)
{
  RunOptions o;
  o.extra_nodes = 9;  // a bucket larger than this step: those rows must keep their poison
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(problemOf(4, 2, 21, 70, m, 16, /*ragged=*/true, /*padded=*/3), o);
  }
}

TYPED_TEST(VerifyAttentionKokkos, onlyPaddedRows)
{
  HostProblem const p = problemOf(0, 2, 5, 10, MaskLayout::kFull, 17, false, /*padded=*/2);
  ASSERT_EQ(p.meta.numNodes(), 0);
  RunOptions o;
  o.extra_nodes = 3;
  RunResult const r = runKernel<TypeParam, TeamTiles>(p, o);
  EXPECT_EQ(r.written_outside, 0);
}

TYPED_TEST(VerifyAttentionKokkos, everyNsplit)
{
  HostProblem const p = problemOf(2, 2, 13, 150, MaskLayout::kParents, 18);
  for (int nsplit : {1, 4, 16})
  {
    RunOptions o;
    o.nsplit = nsplit;
    SCOPED_TRACE("nsplit " + std::to_string(nsplit));
    expectCorrectAllFlavors<TypeParam>(p, o);
  }
}

TYPED_TEST(VerifyAttentionKokkos, fragmentedSlots)
{
  GeneratorOptions g;
  g.batch = 2;
  g.num_heads = 2;
  g.tree_size = 11;
  g.prefix_len = 90;
  g.pool_slack = 3.0;  // two thirds of the pool are holes
  g.mean_run = 1.5;    // runs of one or two consecutive slots
  g.seed = 19;
  HostProblem const p = generateProblem(g);
  int64_t jumps = 0;
  for (size_t i = 1; i < p.meta.kv_indices.size(); ++i)
    jumps += p.meta.kv_indices[i] != p.meta.kv_indices[i - 1] + 1;
  ASSERT_GT(jumps, static_cast<int64_t>(p.meta.kv_indices.size() / 3)) << "the slots should be fragmented";
  expectCorrectAllFlavors<TypeParam>(p);
}

TYPED_TEST(VerifyAttentionKokkos, severalRowTilesAndHeadGroups)
{
  // A small row cap forces several head groups and, at T = 30, several node tiles per team.
  using Tiles = Impl::VerifyTiles<TypeParam>;
  RunOptions o;
  o.max_rows = 2 * Tiles::ROW_BLOCK;
  VerifyPlan const plan = planVerifyFor<TypeParam, TeamTiles>(PlanBounds{1, 30, 60, 30, 5, MaskLayout::kTree}, 4, false,
                                                               Algo::Auto, o.max_rows);
  EXPECT_GT(plan.num_head_groups, 1);
  EXPECT_LT(plan.rows_per_tile / plan.heads_per_group, 30);
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(problemOf(1, 5, 30, 60, m, 20), o);
  }
}

TYPED_TEST(VerifyAttentionKokkos, headGroupsAreBalanced)
{
  using Resident = Impl::ResidentTiles<TypeParam>;
  VerifyPlan const p = Impl::planVerify<TypeParam, Resident>(PlanBounds{1, 65, 0, 65, 8, MaskLayout::kFull}, 1, false, 5 * 65);
  EXPECT_EQ(p.num_head_groups, 2);
  EXPECT_EQ(p.heads_per_group, 4);
  EXPECT_EQ(p.leagueSize(), 1 * 2 * 2);
  EXPECT_THROW(Impl::planVerify<TypeParam>(PlanBounds{1, 5, 0, 5, 8, MaskLayout::kFull}, 0), InputError);
  EXPECT_THROW(Impl::planVerify<TypeParam>(PlanBounds{1, 5, 0, 5, 0, MaskLayout::kFull}, 4), InputError);
}

TYPED_TEST(VerifyAttentionKokkos, portableOverrideRunsThePrimaryTemplate)
{
  HostProblem const p = problemOf(1, 2, 7, 33, MaskLayout::kFull, 21);
  RunOptions o;
  o.algo = Algo::Portable;
  RunResult const r = runKernel<TypeParam, BatchedGemmTiles>(p, o);
  EXPECT_EQ(r.path.path, "kokkos-team");
  EXPECT_FALSE(r.path.fallback);
  EXPECT_TRUE(r.error.pass) << describe(r.error);
#ifdef CANOPY_HAVE_KOKKOSKERNELS
  EXPECT_EQ((runKernel<TypeParam, BatchedGemmTiles>(p).path.path), "kokkos-kk");
#endif
}

TYPED_TEST(VerifyAttentionKokkos, fallbackIsRecordedAndStrictRefusesIt)
{
  HostProblem const p = problemOf(1, 2, 7, 33, MaskLayout::kTree, 22);
  RunResult const r = runKernel<TypeParam, UncompiledTiles>(p);
  EXPECT_TRUE(r.path.fallback);
  EXPECT_NE(r.path.path.find("fallback from test-uncompiled"), std::string::npos) << r.path.path;
  EXPECT_TRUE(r.error.pass) << describe(r.error);
  RunOptions strict;
  strict.strict = true;
  EXPECT_THROW((runKernel<TypeParam, UncompiledTiles>(p, strict)), InputError);
  EXPECT_FALSE((runKernel<TypeParam, TeamTiles>(p, strict).path.fallback));
}

using test::OneThreadTeams;
using test::ResidentDeviceOnHost;
using test::SgemmOnHost;
using test::StreamedOnHost;

template <class ExecutionSpace, class TileProducts, class Tiles>
void expectDeviceShapedTilesCorrect(HostProblem const &problem, int nsplit, int max_rows = 0)
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  VerifyBatch<MemorySpace> batch(BatchCapacity::of(problem));
  batch.upload(problem);
  batch.poisonOutput();
  VerifyPlan const plan = Impl::planVerify<ExecutionSpace, Tiles>(boundsOf(problem), nsplit, false, max_rows);
  auto const ws = makeVerifyWorkspace<MemorySpace>(plan, plan.max_nodes);
  Impl::verifyAttentionTeams<ExecutionSpace, TileProducts, Tiles>(ExecutionSpace(), makeVerifyArgs(batch), ws, plan);
  Kokkos::fence();
  std::vector<uint16_t> const out = batch.downloadOutput();
  ErrorStats const e = compareToReference(referenceAttention(problem), out.data(), out.size());
  EXPECT_TRUE(e.pass) << TileProducts::name() << (Tiles::STREAMED ? " (streamed)" : " (resident)") << ": " << describe(e);
  EXPECT_EQ(e.num_bad, 0) << "NaN or unwritten elements";
}

TYPED_TEST(VerifyAttentionKokkos, deviceTileShapeOnTheHost)
{
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    // 65 nodes x 3 heads: more rows than the 64-row tile, a prefix not a multiple of 16.
    HostProblem const p = problemOf(2, 3, 65, 37, m, 25, /*ragged=*/true, /*padded=*/1);
    expectDeviceShapedTilesCorrect<TypeParam, Impl::TeamTileProducts, StreamedOnHost>(p, 4);
    expectDeviceShapedTilesCorrect<TypeParam, Impl::TeamTileProducts, SgemmOnHost>(p, 4);
    expectDeviceShapedTilesCorrect<TypeParam, Impl::TeamTileProducts, ResidentDeviceOnHost>(p, 4);
#ifdef CANOPY_HAVE_KOKKOSKERNELS
    expectDeviceShapedTilesCorrect<TypeParam, Impl::BatchedGemmTileProducts<KkGemm::kTeamBlocked>, ResidentDeviceOnHost>(
        p, 4);
    expectDeviceShapedTilesCorrect<TypeParam, Impl::BatchedGemmTileProducts<KkGemm::kTeamVector>, ResidentDeviceOnHost>(
        p, 4);
#endif
  }
}

/// A row-tile shape's edge cases (which rows, heads and keys each case reaches: the tests' comments)
/// against fp64, with random values and with peaked scores (q 4x larger: logits spread over several
/// units), so that a running max that moves between KV tiles, and the rescale it needs, changes the
/// output well past tolerance if it is wrong.
struct EdgeCase
{
  int batch, heads, tree;
  int64_t prefix;
  int nsplit, max_rows;
};

template <class ExecutionSpace, class Tiles>
void expectTilesCorrectAtTheirEdges(std::vector<EdgeCase> const &cases, uint64_t seed)
{
  for (EdgeCase const &c : cases)
    for (MaskLayout m : ALL_LAYOUTS)
    {
      SCOPED_TRACE("B=" + std::to_string(c.batch) + " H=" + std::to_string(c.heads) + " T=" + std::to_string(c.tree) +
                   " P=" + std::to_string(c.prefix) + " " + toString(m));
      HostProblem p = problemOf(c.batch, c.heads, c.tree, c.prefix, m, ++seed, /*ragged=*/true, /*padded=*/1);
      expectDeviceShapedTilesCorrect<ExecutionSpace, Impl::TeamTileProducts, Tiles>(p, c.nsplit, c.max_rows);
      fillRandomValues(p, canopy::test::testSeed(seed + 1000), 4.f, 1.f);
      SCOPED_TRACE("peaked");
      expectDeviceShapedTilesCorrect<ExecutionSpace, Impl::TeamTileProducts, Tiles>(p, c.nsplit, c.max_rows);
    }
}

/// A tiling's edge shapes by kind of edge: one test each (CANOPY_EDGE_TESTS), so that the slow
/// tools, racecheck above all, can run them side by side.
struct EdgeCases
{
  std::vector<EdgeCase> row_tiles, head_groups, kv_tiles;
  uint64_t seed;
};

/// Tests `<name>RowTiles`, `<name>HeadGroups` and `<name>KvTiles` of \p Tiles over \p EDGES.
#define CANOPY_EDGE_TESTS(name, Tiles, EDGES)                                                                       \
  TYPED_TEST(VerifyAttentionKokkos, name##RowTiles)                                                                 \
  {                                                                                                                 \
    expectTilesCorrectAtTheirEdges<TypeParam, Tiles>(EDGES.row_tiles, EDGES.seed);                                  \
  }                                                                                                                 \
  TYPED_TEST(VerifyAttentionKokkos, name##HeadGroups)                                                               \
  {                                                                                                                 \
    expectTilesCorrectAtTheirEdges<TypeParam, Tiles>(EDGES.head_groups, EDGES.seed + 2);                            \
  }                                                                                                                 \
  TYPED_TEST(VerifyAttentionKokkos, name##KvTiles)                                                                  \
  {                                                                                                                 \
    expectTilesCorrectAtTheirEdges<TypeParam, Tiles>(EDGES.kv_tiles, EDGES.seed + 4);                               \
  }

/// The streamed kernel's edges: T spanning several 4-node row tiles (ragged, with a padded
/// request); heads that do not divide the 32 rows (3: 10 nodes of 3 heads) and more heads than rows
/// (40: 2 groups of 20); prefixes of 1, 64 and 64 + 1 keys and one of several tiles per split, and a
/// tree part longer than one KV tile (T = 70).
EdgeCases const STREAMED_EDGES{{{3, 8, 9, 1, 1, 0}, {2, 8, 17, 64, 2, 0}},
                               {{2, 3, 23, 65, 3, 0}, {1, 40, 5, 130, 2, 0}},
                               {{2, 8, 70, 200, 4, 0}, {1, 5, 12, 100, 2, 8}, {1, 8, 9, 300, 1, 0}},
                               40};
CANOPY_EDGE_TESTS(streamedTilesAtTheirEdges, StreamedOnHost, STREAMED_EDGES)

/// \p Base's tiles run by teams of two threads (host spaces).
template <class Base>
struct TwoThreadTeams : OneThreadTeams<Base>
{
  static constexpr int TEAM_SIZE = 2;
};

/// A row-tile kernel (\p Kernel, in tiles \p Tiles of two threads per team) on a host space with
/// real two-thread teams, so that its barriers order real threads (one thread per team cannot miss
/// one); skipped where the space offers fewer threads per team, and on devices, which run one
/// thread per work item (the other cases).
template <class ExecutionSpace, class Tiles, class Kernel>
void expectTwoThreadTeamsCorrect(int64_t prefix, uint64_t seed)
{
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecutionSpace::memory_space>::accessible)
    GTEST_SKIP() << "a device runs the kernel with one thread per work item (the other cases)";
  else
  {
    int const most = Kokkos::TeamPolicy<ExecutionSpace>(1, 1).team_size_max(Kernel{}, Kokkos::ParallelForTag());
    if (most < Tiles::TEAM_SIZE)
      GTEST_SKIP() << ExecutionSpace::name() << " offers teams of " << most << " thread(s), fewer than 2";
    for (MaskLayout m : ALL_LAYOUTS)
    {
      SCOPED_TRACE(toString(m));
      HostProblem p = problemOf(2, 8, 70, prefix, m, seed, /*ragged=*/true, /*padded=*/1);
      fillRandomValues(p, canopy::test::testSeed(seed + 1), 4.f, 1.f);
      expectDeviceShapedTilesCorrect<ExecutionSpace, Impl::TeamTileProducts, Tiles>(p, 3);
    }
  }
}

/// The streamed kernel with two threads per team on a host space: each thread serves 128 of the
/// 256 work items.
TYPED_TEST(VerifyAttentionKokkos, streamedTeamsOfTwoHostThreads)
{
  using Tiles = TwoThreadTeams<Impl::StreamedTiles>;
  expectTwoThreadTeamsCorrect<TypeParam, Tiles, Impl::VerifyStreamedKernel<TypeParam, Tiles>>(200, 60);
}

/// The sgemm kernel's edges: T spanning several 8-node row tiles (ragged, with a padded request);
/// heads that do not divide the 64 rows (3: 21 nodes of 3 heads) and more heads than rows (70: 2
/// groups of 35); prefixes of 1, 128 and 128 + 1 keys and several tiles per split, a tree part
/// longer than one KV tile (T = 140), a small row cap.
EdgeCases const SGEMM_EDGES{{{3, 8, 9, 1, 1, 0}, {2, 8, 17, 128, 2, 0}},
                            {{2, 3, 23, 129, 3, 0}, {1, 70, 3, 130, 2, 0}},
                            {{1, 2, 140, 200, 2, 0}, {1, 5, 12, 100, 2, 8}, {1, 8, 9, 400, 1, 0}},
                            140};
CANOPY_EDGE_TESTS(sgemmTilesAtTheirEdges, SgemmOnHost, SGEMM_EDGES)

/// The sgemm kernel with two threads per team on a host space: each serves 64 of the 128 work
/// items.
TYPED_TEST(VerifyAttentionKokkos, sgemmTeamsOfTwoHostThreads)
{
  using Tiles = TwoThreadTeams<Impl::SgemmTiles>;
  expectTwoThreadTeamsCorrect<TypeParam, Tiles, Impl::VerifySgemmKernel<TypeParam, Tiles>>(300, 160);
}

TYPED_TEST(VerifyAttentionKokkos, sgemmPlanPutsRowTilesInTheLeague)
{
  // T=17 at H=8: 8 nodes x 8 heads per tile, 3 row tiles; H=70: 2 groups of 35 heads, 1 node each.
  VerifyPlan const p = Impl::planVerify<TypeParam, Impl::SgemmTiles>(PlanBounds{2, 17, 100, 34, 8, MaskLayout::kTree}, 3);
  EXPECT_EQ(p.num_head_groups, 1);
  EXPECT_EQ(p.rows_per_tile, 64);
  EXPECT_EQ(p.row_tiles, 3);
  EXPECT_EQ(p.leagueSize(), 2 * 1 * 4 * 3);
  VerifyPlan const q = Impl::planVerify<TypeParam, Impl::SgemmTiles>(PlanBounds{1, 3, 0, 3, 70, MaskLayout::kTree}, 1);
  EXPECT_EQ(q.num_head_groups, 2);
  EXPECT_EQ(q.heads_per_group, 35);
  EXPECT_EQ(q.row_tiles, 3);
  // The scratch fits what Kokkos 4.6 admits on CUDA for the team (49,152 - 8 x (128 + 2) bytes).
  EXPECT_LE(Impl::SgemmScratch<Impl::SgemmTiles>::request(), 48112u);
}

TYPED_TEST(VerifyAttentionKokkos, streamedPlanPutsRowTilesInTheLeague)
{
  // T=17 at H=8: 4 nodes x 8 heads per tile, 5 row tiles; H=40: 2 groups of 20 heads, 1 node each.
  VerifyPlan const p = Impl::planVerify<TypeParam, Impl::StreamedTiles>(PlanBounds{2, 17, 100, 34, 8, MaskLayout::kTree}, 3);
  EXPECT_EQ(p.num_head_groups, 1);
  EXPECT_EQ(p.rows_per_tile, 32);
  EXPECT_EQ(p.row_tiles, 5);
  EXPECT_EQ(p.leagueSize(), 2 * 1 * 4 * 5);
  VerifyPlan const q = Impl::planVerify<TypeParam, Impl::StreamedTiles>(PlanBounds{1, 3, 0, 3, 40, MaskLayout::kTree}, 1);
  EXPECT_EQ(q.num_head_groups, 2);
  EXPECT_EQ(q.heads_per_group, 20);
  EXPECT_EQ(q.row_tiles, 3);
}

TYPED_TEST(VerifyAttentionKokkos, autoSplitFollowsTheSpace)
{
  PlanBounds const b{8, 33, 16384, 8 * 33, 8, MaskLayout::kTree};
  // One host thread: no split. Sixteen: about 16 teams per thread over 8 requests.
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Impl::VerifyTiles<Kokkos::DefaultHostExecutionSpace>>(b, 1)), 1);
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Impl::VerifyTiles<Kokkos::DefaultHostExecutionSpace>>(b, 16)), 32);
  // An H200's Kokkos::Cuda concurrency (132 SMs x 2048 threads): B=8 T=256 needs no split
  // (512 teams per split), B=1 T=17 P=16K the cap of 64.
  int const h200 = 132 * 2048;
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Impl::StreamedTiles>(PlanBounds{8, 256, 16384, 2048, 8, MaskLayout::kTree}, h200)), 1);
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Impl::StreamedTiles>(PlanBounds{1, 17, 16384, 17, 8, MaskLayout::kTree}, h200)), 64);
  // The GPU default (sgemm tiles, 64 rows, 128 threads, 3 per SM) takes the league model's count
  // (canopy_SplitModel.hpp): one wave of one-tile teams at B=1 T=17 (3 row tiles x 128 splits +
  // 3 tree teams = 387 of 396 slots); 43 at B=1 T=65, where the fixed rule took 128; 6 at B=8
  // T=256, where it took 4 (2.6 waves); 32 at B=8 T=17 (the fastest of the measured counts).
  using Sgemm = Impl::SgemmTilesThreePerSm;
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{1, 17, 16384, 17, 8, MaskLayout::kTree}, h200)), 128);
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{1, 65, 16384, 65, 8, MaskLayout::kTree}, h200)), 43);
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{8, 17, 16384, 136, 8, MaskLayout::kTree}, h200)), 32);
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{8, 256, 16384, 2048, 8, MaskLayout::kTree}, h200)), 6);
  // The device's facts count: 188 SMs with 100 KB of shared memory each hold 2 sgemm teams, not 3.
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{8, 256, 16384, 2048, 8, MaskLayout::kTree}, 188 * 1536,
                                                 Impl::DeviceFacts{188, 102400})),
            10);
  // A short prefix: never more splits than KV tiles.
  EXPECT_EQ((Impl::autoNsplit<TypeParam, Sgemm>(PlanBounds{1, 17, 300, 17, 8, MaskLayout::kTree}, h200)), 3);
}

// The league model behind the sgemm split count, on leagues whose times follow by hand: a team
// alone runs at 0.65 of its SM; 396 one-tile teams on 132 SMs x 3 take 3 x 1.05; 645 of them add a
// second wave spread 2 or 1 per SM (2 x 1.05 / 0.9 on the SMs with two).
TEST(SplitModel, leagueTimesFollowTheModel)
{
  Impl::TeamSlots const h200{132, 3};
  double const team = 1 + Impl::SplitModel::TEAM_COST;
  EXPECT_NEAR(Impl::predictedLeagueTime({1}, h200), team / 0.65, 1e-9);
  EXPECT_NEAR(Impl::predictedLeagueTime(std::vector<int>(396, 1), h200), 3 * team, 1e-9);
  EXPECT_NEAR(Impl::predictedLeagueTime(std::vector<int>(645, 1), h200), 3 * team + 2 * team / 0.9, 1e-9);
  // Empty teams take an instant (1e-3 tiles); one long team sets the step.
  std::vector<int> work(395, 0);
  work.push_back(4);
  EXPECT_NEAR(Impl::predictedLeagueTime(work, h200), (4 + Impl::SplitModel::TEAM_COST) / 0.65, 0.01);
}

// Whatever the model picks, every split gets the same whole number of KV tiles but the last (none
// is empty), and no count exceeds the cap or the tiles.
TEST(SplitModel, everySplitHasWork)
{
  for (int B : {1, 3, 8})
    for (int T : {1, 17, 100, 256})
      for (int64_t P : {int64_t{1}, int64_t{300}, int64_t{5000}, int64_t{16384}, int64_t{40000}})
      {
        PlanBounds const b{B, T, P, int64_t{B} * T, 8, MaskLayout::kTree};
        int const n = Impl::modelNsplit(b, 1, (T + 7) / 8, 8, 128, Impl::TeamSlots{132, 3});
        int64_t const tiles = (P + 127) / 128, chunk = (tiles + n - 1) / n;
        SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " P=" + std::to_string(P));
        EXPECT_GE(n, 1);
        EXPECT_LE(n, std::min<int64_t>(tiles, Impl::SplitModel::MAX_SPLITS));
        EXPECT_GT(tiles - (n - 1) * chunk, 0) << n << " splits of " << chunk << " tiles";
      }
}

// With a long prefix and random values the tree keys carry little of the attention, so a
// visibility bug moves the output little (at P = 16384 the checker lets self-only, causal and
// sibling masks pass on random values, tstChecker.cpp); tree-dominant values make the tree carry
// it. Every layout with those values, and the kernel fed a wrong (self-only) mask at P = 16384
// must be rejected against the true tree's reference.
HostProblem treeDominantProblem(int batch, int heads, int tree, int64_t prefix, MaskLayout m, uint64_t seed)
{
  return problemOf(batch, heads, tree, prefix, m, seed, false, 0, ValueMode::kTreeDominant);
}

TYPED_TEST(VerifyAttentionKokkos, treeDominantValuesInEveryLayout)
{
  for (MaskLayout m : ALL_LAYOUTS)
  {
    SCOPED_TRACE(toString(m));
    expectCorrectAllFlavors<TypeParam>(treeDominantProblem(2, 2, 33, 1000, m, 26));
  }
}

TYPED_TEST(VerifyAttentionKokkos, aSelfOnlyMaskFailsAtALongPrefixWithTreeDominantValues)
{
  HostProblem const p = treeDominantProblem(1, 2, 17, 16384, MaskLayout::kTree, 27);
  HostProblem wrong = p;
  int64_t const T = wrong.meta.treeSize(0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      wrong.meta.custom_mask[wrong.meta.mask_indptr[0] + i * T + j] = i == j;
  RunResult const r = runKernel<TypeParam, TeamTiles>(wrong);
  EXPECT_TRUE(r.error.pass) << "the kernel follows the mask it is given: " << describe(r.error);
  ErrorStats const against_true = compareToReference(referenceAttention(p), r.out.data(), r.out.size());
  EXPECT_FALSE(against_true.pass) << "a self-only mask passes at P = 16384: " << describe(against_true);
}

// The checks above can fail: a kernel that misses rows leaves poison, one that reads a wrong mask
// is far outside the tolerance.
TYPED_TEST(VerifyAttentionKokkos, checksDetectUnwrittenRowsAndWrongMasks)
{
  using MemorySpace = typename TypeParam::memory_space;
  HostProblem const p = problemOf(3, 2, 9, 40, MaskLayout::kTree, 23);
  {
    // Planned for one request only: rows of requests 1 and 2 are never written.
    VerifyBatch<MemorySpace> batch(BatchCapacity::of(p));
    batch.upload(p);
    batch.poisonOutput();
    PlanBounds bounds = boundsOf(p);
    bounds.max_batch = 1;
    VerifyPlan const plan = Impl::planVerify<TypeParam>(bounds, 2);
    auto const ws = makeVerifyWorkspace<MemorySpace>(plan, plan.max_nodes);
    verifyAttention<TypeParam>(TypeParam(), makeVerifyArgs(batch), ws, plan);
    Kokkos::fence();
    std::vector<uint16_t> const out = batch.downloadOutput();
    ErrorStats const e = compareToReference(referenceAttention(p), out.data(), out.size());
    EXPECT_FALSE(e.pass);
    EXPECT_EQ(e.num_bad, static_cast<int64_t>(out.size()) - 9 * 2 * D_V);
  }
  {
    // Every tree node sees only itself (short prefix, so the tree part weighs): the kernel follows
    // the mask it is given, and the result is far from the true tree's.
    HostProblem const q = problemOf(2, 2, 12, 6, MaskLayout::kTree, 24);
    HostProblem wrong = q;
    for (int b = 0; b < wrong.meta.batchSize(); ++b)
    {
      int64_t const T = wrong.meta.treeSize(b);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j)
          wrong.meta.custom_mask[wrong.meta.mask_indptr[b] + i * T + j] = i == j;
    }
    RunResult const r = runKernel<TypeParam, TeamTiles>(wrong);
    EXPECT_TRUE(r.error.pass) << describe(r.error);
    ErrorStats const against_true = compareToReference(referenceAttention(q), r.out.data(), r.out.size());
    EXPECT_FALSE(against_true.pass);
    EXPECT_GT(against_true.rel_l2, 10 * REL_L2_TOLERANCE);
  }
}
} // namespace
