/// \file tstKokkosFp8.cpp
/// \brief kokkos-team on FP8 KV pools (docs/design.md §8): the KV tile load of each of its kernels
/// (the space's resident tiles, and the device's streamed and sgemm tiles run by host threads)
/// dequantises fp8-e4m3, fp8-e5m2 and fp8-e4m3-blockscaled pools, checked element by element against
/// the fp64 reference on the dequantised pool within errorBounds(dtype, dequant): random and
/// tree-dominant values, every mask layout, ragged batches with padded rows, a 1024-node tree;
/// the same through the registry and checkDesign; what it does not serve refused with the reason;
/// and a misread pool (scale doubled, e5m2 bytes read as e4m3) failing the check.
#include "canopy_TestProblems.hpp"
#include "canopy_OneThreadTeams.hpp"
#include "canopy_BatchStorage.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"
#include "canopy_TestSpaces.hpp"
#include "canopy_VerifyAttention_spec.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

constexpr KvDtype FP8_DTYPES[] = {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled};
constexpr MaskLayout ALL_LAYOUTS[] = {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents};
constexpr ValueMode ALL_VALUES[] = {ValueMode::kRandom, ValueMode::kTreeDominant};

/// A scale that is not a power of two for e5m2 (dequantised values are then not bf16 values), a
/// power of two for e4m3; the block-scaled rows carry their own.
float scaleOf(KvDtype dtype) { return dtype == KvDtype::kFp8E5m2 ? 0.0371f : 1.0f / 32; }

HostProblem fp8Problem(KvDtype dtype, int batch, int heads, int tree, int64_t prefix, MaskLayout mask, uint64_t seed,
                       ValueMode values = ValueMode::kRandom, bool ragged = true, int padded = 1)
{
  return test::problemOf(batch, heads, tree, prefix, mask, seed, ragged, padded, values, dtype, scaleOf(dtype));
}

std::string describe(ErrorStats const &e)
{
  return "rel_l2 " + std::to_string(e.rel_l2) + ", worst row " + std::to_string(e.worst_row_rel_l2) + ", bad " +
         std::to_string(e.num_bad) + " (first " + std::to_string(e.first_bad) + ")";
}

using test::SgemmOnHost;
using test::StreamedOnHost;

/// Runs kokkos-team's kernel in \p Tiles on \p problem's FP8 pool (poisoned output, metadata and q
/// in a VerifyBatch, the pool bytes beside it), after \p misread edits what the kernel is told of
/// the pool; compares with the fp64 reference of the true pool in dequant numerics.
template <class ExecutionSpace, class Tiles>
ErrorStats runTiles(HostProblem const &problem, int nsplit, std::function<void(BatchRef &)> const &misread = {})
{
  using MemorySpace = typename ExecutionSpace::memory_space;
  VerifyBatch<MemorySpace> batch(BatchCapacity::of(problem));
  batch.upload(problem);  // metadata and q; the bf16 pool of an FP8 problem is empty
  batch.poisonOutput();
  Kokkos::View<uint8_t *, MemorySpace> pool("kv_pool_fp8", problem.kv_pool_fp8.size());
  Kokkos::deep_copy(pool, Kokkos::View<uint8_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              problem.kv_pool_fp8.data(), problem.kv_pool_fp8.size()));
  BatchRef ref = batch.ref();
  ref.kv_pool = nullptr;
  ref.kv_dtype = problem.kv_dtype;
  ref.kv_pool_fp8 = pool.data();
  ref.kv_scale = problem.kv_scale;
  if (misread)
    misread(ref);
  VerifyPlan const plan = Impl::planVerify<ExecutionSpace, Tiles>(boundsOf(problem), nsplit);
  auto const ws = makeVerifyWorkspace<MemorySpace>(plan, plan.max_nodes);
  Impl::verifyAttentionTeams<ExecutionSpace, Impl::TeamTileProducts, Tiles>(
      ExecutionSpace(), VerifyArgs<MemorySpace>(ref, batch.capacity().counts()), ws, plan);
  Kokkos::fence();
  std::vector<uint16_t> const out = batch.downloadOutput();
  EXPECT_EQ(out.size(), problem.outElements());
  return compareToReference(referenceAttention(problem, Numerics::kDequant), out.data(), out.size(),
                            errorBounds(problem.kv_dtype, Numerics::kDequant));
}

template <class ExecutionSpace, class Tiles>
void expectTilesCorrect(HostProblem const &problem, int nsplit, char const *tiles)
{
  ErrorStats const e = runTiles<ExecutionSpace, Tiles>(problem, nsplit);
  EXPECT_TRUE(e.pass) << tiles << ": " << describe(e);
  EXPECT_EQ(e.num_bad, 0) << tiles << ": NaN or unwritten elements";
}

/// The space's own tiles (resident on hosts, sgemm on devices) and the two device row-tile shapes.
template <class ExecutionSpace>
void expectEveryTileShapeCorrect(HostProblem const &problem, int nsplit)
{
  expectTilesCorrect<ExecutionSpace, Impl::VerifyTiles<ExecutionSpace>>(problem, nsplit, "the space's tiles");
  expectTilesCorrect<ExecutionSpace, StreamedOnHost>(problem, nsplit, "streamed tiles");
  expectTilesCorrect<ExecutionSpace, SgemmOnHost>(problem, nsplit, "sgemm tiles");
}

template <class ExecutionSpace>
struct KokkosFp8 : ::testing::Test
{
};
TYPED_TEST_SUITE(KokkosFp8, CanopyExecSpaces);

// Every dtype, layout and value mode; ragged requests with a padded row; 3 heads (tiles of whole
// nodes do not fill the rows), prefixes not a multiple of any KV tile, 3 splits.
TYPED_TEST(KokkosFp8, everyDtypeLayoutAndValueModeInEveryTileShape)
{
  uint64_t seed = 4700;
  for (KvDtype dtype : FP8_DTYPES)
    for (MaskLayout m : ALL_LAYOUTS)
      for (ValueMode v : ALL_VALUES)
      {
        SCOPED_TRACE(toString(dtype) + " " + toString(m) + (v == ValueMode::kRandom ? " random" : " tree-dominant"));
        expectEveryTileShapeCorrect<TypeParam>(fp8Problem(dtype, 3, 3, 21, 300, m, ++seed, v), 3);
      }
}

// Trees past one KV tile of every shape, and a 1024-node tree (the largest DDTree size the
// designs are measured at) in the space's own tiles.
TYPED_TEST(KokkosFp8, largeTrees)
{
  for (KvDtype dtype : FP8_DTYPES)
  {
    SCOPED_TRACE(toString(dtype));
    expectEveryTileShapeCorrect<TypeParam>(
        fp8Problem(dtype, 2, 2, 140, 200, MaskLayout::kParents, 4750, ValueMode::kTreeDominant), 2);
    HostProblem const big =
        fp8Problem(dtype, 1, 1, 1024, 130, MaskLayout::kTree, 4760, ValueMode::kTreeDominant, false, 0);
    ASSERT_EQ(big.meta.numNodes(), 1024);
    expectTilesCorrect<TypeParam, Impl::VerifyTiles<TypeParam>>(big, 2, "the space's tiles, T = 1024");
  }
}

// Empty prefixes, one-node trees and prefixes shorter than the split count reach the FP8 loads
// with partial and empty tiles.
TYPED_TEST(KokkosFp8, emptyAndShortParts)
{
  for (KvDtype dtype : FP8_DTYPES)
  {
    SCOPED_TRACE(toString(dtype));
    expectEveryTileShapeCorrect<TypeParam>(
        fp8Problem(dtype, 2, 4, 9, 0, MaskLayout::kFull, 4770, ValueMode::kRandom, false, 0), 4);
    expectEveryTileShapeCorrect<TypeParam>(
        fp8Problem(dtype, 3, 2, 1, 5, MaskLayout::kTree, 4771, ValueMode::kRandom, false, 0), 16);
  }
}

// The check can fail: the kernel told a wrong scale, or e5m2 bytes told they are e4m3, lands far
// outside the dequant bounds, in every tile shape (docs/design.md §8 lists these misreads).
TYPED_TEST(KokkosFp8, misreadPoolsFail)
{
  auto const expectFails = [](ErrorStats const &e, char const *what) {
    EXPECT_FALSE(e.pass) << what << ": " << describe(e);
    EXPECT_GT(e.rel_l2, 10 * errorBounds(KvDtype::kFp8E4m3, Numerics::kDequant).rel_l2) << what;
  };
  auto const doubled = [](BatchRef &r) { r.kv_scale *= 2; };
  HostProblem const e4m3 =
      fp8Problem(KvDtype::kFp8E4m3, 2, 2, 17, 100, MaskLayout::kTree, 4780, ValueMode::kTreeDominant);
  expectFails(runTiles<TypeParam, Impl::VerifyTiles<TypeParam>>(e4m3, 2, doubled), "scale doubled");
  expectFails(runTiles<TypeParam, StreamedOnHost>(e4m3, 2, doubled), "scale doubled, streamed");
  expectFails(runTiles<TypeParam, SgemmOnHost>(e4m3, 2, doubled), "scale doubled, sgemm");
  auto const asE4m3 = [](BatchRef &r) { r.kv_dtype = KvDtype::kFp8E4m3; };
  HostProblem const e5m2 = fp8Problem(KvDtype::kFp8E5m2, 2, 2, 17, 100, MaskLayout::kTree, 4781);
  expectFails(runTiles<TypeParam, Impl::VerifyTiles<TypeParam>>(e5m2, 2, asE4m3), "e5m2 read as e4m3");
  expectFails(runTiles<TypeParam, SgemmOnHost>(e5m2, 2, asE4m3), "e5m2 read as e4m3, sgemm");
}

/// The registered designs that run kokkos-team's kernel: kokkos-team and, where registered, its
/// portable and other-tile variants.
std::vector<std::string> teamDesigns()
{
  std::vector<std::string> d;
  for (auto const &n : designNames())
    if (n.rfind("kokkos-team", 0) == 0)
      d.push_back(n);
  return d;
}

// Through the registry and checkDesign (the storage's FP8 pool, the design's plan and run): every
// dtype, layout and value mode, every workspace strategy, strict (no fallback), on the path named.
TEST(KokkosFp8Designs, kokkosTeamServesEveryFp8DtypeInDequant)
{
  ASSERT_FALSE(teamDesigns().empty());
  WorkspaceStrategy const strategies[] = {WorkspaceStrategy::kPersistent, WorkspaceStrategy::kPerCall,
                                          WorkspaceStrategy::kGrow};
  uint64_t seed = 4800;
  for (auto const &name : teamDesigns())
    for (KvDtype dtype : FP8_DTYPES)
      for (MaskLayout m : ALL_LAYOUTS)
        for (ValueMode v : ALL_VALUES)
        {
          HostProblem const p = fp8Problem(dtype, 3, 3, 19, 150, m, ++seed, v, true, 1);
          DesignOptions o;
          o.nsplit = 4;
          o.strict = true;
          o.workspace = strategies[seed % 3];
          DesignPtr d = makeDesign(name);
          EXPECT_EQ(d->whyNotServed(dtype, Numerics::kDequant), "") << name;
          CheckResult const r = checkDesign(*d, p, o, referenceAttention(p, Numerics::kDequant));
          SCOPED_TRACE(name + " " + toString(dtype) + " " + toString(m) + " " + toString(o.workspace) +
                       (v == ValueMode::kRandom ? " random" : " tree-dominant"));
          EXPECT_TRUE(r.error.pass) << describe(r.error);
          EXPECT_EQ(r.path.rfind("kokkos-team", 0), 0u) << r.path;
          EXPECT_EQ(r.path.find("fallback"), std::string::npos) << r.path;
        }
}

// One plan for an FP8 bucket, several steps run through it (what replay does), each with its own
// pool and scale: the scale is read from the batch at every run, never kept from an earlier one.
TEST(KokkosFp8Designs, onePlanServesStepsWithDifferentScales)
{
  std::vector<HostProblem> steps;
  float const scales[] = {0.0371f, 0.125f, 0.02f};
  for (int i = 0; i < 3; ++i)
  {
    GeneratorOptions g;
    g.batch = 2 + i % 2;
    g.num_heads = 2;
    g.tree_size = 13;
    g.prefix_len = 90;
    g.ragged = true;
    g.mask_layout = MaskLayout::kParents;
    g.seed = test::testSeed(4900 + static_cast<uint64_t>(i));
    g.kv_dtype = KvDtype::kFp8E5m2;
    g.kv_scale = scales[i];
    steps.push_back(generateProblem(g));
  }
  PlanBounds bounds{3, 13, 90, 39, 2, MaskLayout::kParents, KvDtype::kFp8E5m2};
  BatchCapacity const cap = BatchCapacity::covering(steps);
  for (auto const &name : teamDesigns())
  {
    DesignPtr d = makeDesign(name);
    DesignOptions o;
    o.nsplit = 4;
    d->plan(bounds, o);
    for (size_t i = 0; i < steps.size(); ++i)
    {
      SCOPED_TRACE(name + " step " + std::to_string(i));
      // The pool's byte count is the storage's capacity: a storage per step, one plan for all.
      BatchCapacity c = cap;
      c.num_slots = steps[i].num_slots;
      auto storage = makeBatchStorage(d->memory(), c);
      storage->upload(steps[i]);
      storage->poisonOutput();
      storage->sync();
      d->run(storage->ref(), storage->context());
      std::vector<uint16_t> const out = storage->downloadOutput();
      ErrorStats const e = compareToReference(referenceAttention(steps[i], Numerics::kDequant), out.data(), out.size(),
                                              errorBounds(KvDtype::kFp8E5m2, Numerics::kDequant));
      EXPECT_TRUE(e.pass) << describe(e);
    }
  }
}

// fp8-mma is not kokkos-team's (Unsupported, with the reason); kokkos-kk reads bf16 pools only; a
// batch whose pool is not the planned dtype is refused before anything is enqueued.
TEST(KokkosFp8Designs, whatIsNotServedIsRefused)
{
  HostProblem const p = fp8Problem(KvDtype::kFp8E4m3, 2, 2, 9, 40, MaskLayout::kFull, 4850);
  for (auto const &name : teamDesigns())
  {
    DesignPtr d = makeDesign(name);
    EXPECT_NE(d->whyNotServed(KvDtype::kFp8E4m3, Numerics::kFp8Mma).find("fp8-mma"), std::string::npos) << name;
    DesignOptions mma;
    mma.numerics = Numerics::kFp8Mma;
    EXPECT_THROW(d->plan(boundsOf(p), mma), Unsupported) << name;

    // Planned for bf16, run on an FP8 pool: InputError naming both dtypes.
    auto storage = makeBatchStorage(d->memory(), BatchCapacity::of(p));
    storage->upload(p);
    PlanBounds bf16 = boundsOf(p);
    bf16.kv_dtype = KvDtype::kBf16;
    d->plan(bf16, DesignOptions{});
    try
    {
      d->run(storage->ref(), storage->context());
      ADD_FAILURE() << name << ": ran an fp8-e4m3 pool on a bf16 plan";
    }
    catch (InputError const &e)
    {
      EXPECT_NE(std::string(e.what()).find("fp8-e4m3"), std::string::npos) << e.what();
    }
  }
  auto const names = designNames();
  if (std::find(names.begin(), names.end(), "kokkos-kk") != names.end())
  {
    DesignPtr kk = makeDesign("kokkos-kk");
    EXPECT_EQ(kk->whyNotServed(KvDtype::kFp8E4m3, Numerics::kDequant), "reads bf16 KV pools only");
    EXPECT_THROW(kk->plan(boundsOf(p), DesignOptions{}), Unsupported);
  }
}
} // namespace
