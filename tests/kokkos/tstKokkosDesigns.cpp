/// \file tstKokkosDesigns.cpp
/// \brief The registered designs `kokkos-team` and `kokkos-kk` through the registry and
/// checkDesign: every workspace strategy and mask layout against the fp64 reference, one plan
/// serving several steps of a bucket, the path they report, bad use refused with InputError, and
/// on Kokkos::Cuda a CUDA error pending after the launches failing the run.
#include "canopy_TestProblems.hpp"
#include "canopy_BatchStorage.hpp"
#include "canopy_Config.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"

#include <Kokkos_Core.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

std::vector<std::string> kokkosDesigns()
{
  std::vector<std::string> d{"kokkos-team"};
#ifdef CANOPY_HAVE_KOKKOSKERNELS
  d.push_back("kokkos-kk");
#endif
  // Registered where they differ from kokkos-team: the portable kernel beside a specialisation,
  // and the other device tiles (sgemm at 4 teams per SM, streamed) on a device space.
  auto const names = designNames();
  for (char const *n : {"kokkos-team-portable", "kokkos-team-portable-sgemm", "kokkos-team-portable-streamed"})
    if (std::find(names.begin(), names.end(), n) != names.end())
      d.push_back(n);
  return d;
}

/// The flavour a design's path starts with (kokkos-team-portable* run kokkos-team's kernel).
std::string flavorOf(std::string const &name) { return name.substr(0, name.find("-portable")); }

using canopy::test::problemOf;

TEST(KokkosDesigns, registeredWithKokkosMemory)
{
  auto const names = designNames();
  for (auto const &n : kokkosDesigns())
  {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    DesignPtr d = makeDesign(n);
    EXPECT_EQ(d->name(), n);
    // On a CUDA Kokkos the designs use CUDA device memory (the CUDA storage and executor).
    EXPECT_TRUE(d->memory() == MemoryKind::kKokkos || d->memory() == MemoryKind::kCudaDevice) << n;
    EXPECT_FALSE(designSummary(n).empty());
  }
}

/// Whether design \p name serves \p dtype pools in \p numerics (docs/design.md §8): the reference
/// every mode; kokkos-team and its variants FP8 in dequant numerics (tstKokkosFp8.cpp checks them).
/// cuda-sm90 serves them too, in both numerics (tstSm90Fp8.cpp, on the GPU).
bool servedFp8(std::string const &name, Numerics numerics)
{
  return name == "reference" || (name.rfind("kokkos-team", 0) == 0 && numerics == Numerics::kDequant);
}

// FP8 pools (docs/design.md §8): every registered design states what it serves; those that serve
// a mode pass the check in it; the others refuse an FP8 bucket in plan() and in checkDesign with
// Unsupported naming the design and dtype, never running it another way.
TEST(KokkosDesigns, fp8PoolsAreServedOnlyWhereDesignsSaySo)
{
  struct Mode
  {
    KvDtype dtype;
    Numerics numerics;
  };
  for (Mode const m : {Mode{KvDtype::kFp8E4m3, Numerics::kDequant}, Mode{KvDtype::kFp8E5m2, Numerics::kFp8Mma},
                       Mode{KvDtype::kFp8E4m3BlockScaled, Numerics::kDequant}})
  {
    GeneratorOptions g;
    g.num_heads = 2;
    g.tree_size = 9;
    g.prefix_len = 100;
    g.kv_dtype = m.dtype;
    g.kv_scale = 0.05f;
    HostProblem const p = generateProblem(g);
    std::vector<double> const ref = referenceAttention(p, m.numerics);
    DesignOptions options;
    options.numerics = m.numerics;
    for (auto const &n : designNames())
    {
      DesignPtr d = makeDesign(n);
      EXPECT_EQ(d->whyNotServed(KvDtype::kBf16, Numerics::kDequant), "") << n;
      std::string const what = n + " " + toString(m.dtype) + " " + toString(m.numerics);
      if (servedFp8(n, m.numerics))
      {
        EXPECT_EQ(d->whyNotServed(m.dtype, m.numerics), "") << what;
        EXPECT_TRUE(checkDesign(*d, p, options, ref).error.pass) << what;
        continue;
      }
      if (n == "cuda-sm90")  // both numerics (fp8-mma on the one-scale dtypes this loop draws)
      {
        EXPECT_EQ(d->whyNotServed(m.dtype, m.numerics), "") << what << " (checked on the GPU: tstSm90Fp8.cpp)";
        continue;
      }
      EXPECT_NE(d->whyNotServed(m.dtype, m.numerics), "") << what;
      PlanBounds bounds = boundsOf(p);
      EXPECT_EQ(bounds.kv_dtype, m.dtype);
      try
      {
        d->plan(bounds, options);
        ADD_FAILURE() << what << ": planned";
      }
      catch (Unsupported const &e)
      {
        EXPECT_NE(std::string(e.what()).find(n + ": kv dtype " + toString(m.dtype)), std::string::npos) << e.what();
      }
      EXPECT_THROW(checkDesign(*d, p, options, ref), Unsupported) << what;
    }
  }
  // Host storage takes an FP8 pool of the dtype's row width and a usable scale only.
  GeneratorOptions g;
  g.tree_size = 5;
  g.prefix_len = 20;
  g.kv_dtype = KvDtype::kFp8E4m3BlockScaled;
  HostProblem const p = generateProblem(g);
  auto storage = makeBatchStorage(MemoryKind::kHost, BatchCapacity::of(p));
  storage->upload(p);
  EXPECT_EQ(storage->ref().kv_pool, nullptr);
  EXPECT_EQ(storage->ref().kv_dtype, KvDtype::kFp8E4m3BlockScaled);
  auto const refusal = [&](std::vector<uint8_t> const &pool, KvDtype dtype, float scale) {
    try
    {
      storage->uploadFp8Pool(pool, dtype, scale);
    }
    catch (InputError const &e)
    {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(p.kv_pool_fp8, KvDtype::kFp8E4m3, 1.0f).rfind("kv_pool: ", 0), 0u) << "656-byte rows as 576";
  std::vector<uint8_t> const short_pool(p.kv_pool_fp8.begin(), p.kv_pool_fp8.end() - 1);
  EXPECT_EQ(refusal(short_pool, KvDtype::kFp8E4m3BlockScaled, 1.0f).rfind("kv_pool: ", 0), 0u);
  for (float bad : {0.0f, -2.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    EXPECT_EQ(refusal(p.kv_pool_fp8, KvDtype::kFp8E4m3BlockScaled, bad).rfind("kv_scale: ", 0), 0u) << bad;

  // fp8-mma on a pool it is undefined for is bad input, before any design is asked.
  PlanBounds bf16;
  DesignOptions mma;
  mma.numerics = Numerics::kFp8Mma;
  EXPECT_THROW(makeDesign("reference")->plan(bf16, mma), InputError);
}

TEST(KokkosDesigns, passCheckDesignForEveryStrategyAndLayout)
{
  WorkspaceStrategy const strategies[] = {WorkspaceStrategy::kPersistent, WorkspaceStrategy::kPerCall,
                                          WorkspaceStrategy::kGrow};
  MaskLayout const layouts[] = {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents};
  uint64_t seed = 100;
  for (auto const &name : kokkosDesigns())
    for (WorkspaceStrategy ws : strategies)
      for (MaskLayout m : layouts)
      {
        HostProblem const p = problemOf(3, 3, 19, 80, m, ++seed, /*ragged=*/true, /*padded=*/1);
        DesignOptions o;
        o.nsplit = 4;
        o.workspace = ws;
        o.strict = true;
        DesignPtr d = makeDesign(name);
        CheckResult const r = checkDesign(*d, p, o, referenceAttention(p));
        SCOPED_TRACE(name + " " + toString(ws) + " " + toString(m) + " seed " + std::to_string(seed));
        EXPECT_TRUE(r.error.pass) << "rel_l2 " << r.error.rel_l2 << ", bad " << r.error.num_bad;
        // The path names the design's kernel: its own, or the specialisation it reached.
        EXPECT_EQ(r.path.rfind(flavorOf(name), 0), 0u) << r.path;
        EXPECT_EQ(r.path.find("fallback"), std::string::npos) << r.path;
      }
}

TEST(KokkosDesigns, workspaceStrategiesHoldWhatTheySay)
{
  HostProblem const p = problemOf(2, 2, 9, 40, MaskLayout::kFull, 7, false, 0);
  std::vector<double> const ref = referenceAttention(p);
  for (auto const &name : kokkosDesigns())
  {
    DesignOptions o;
    o.nsplit = 4;
    DesignPtr d = makeDesign(name);
    o.workspace = WorkspaceStrategy::kPersistent;
    d->plan(boundsOf(p), o);
    // nsplit counts prefix splits (docs/experiments.md): 4 of them plus the tree's own partial.
    EXPECT_EQ(d->splits(), 4) << name;
    size_t const persistent = d->workspaceBytes();
    EXPECT_GE(persistent, static_cast<size_t>(5 * p.meta.numNodes() * 2 * (D_V + 1) * sizeof(float)));

    o.workspace = WorkspaceStrategy::kPerCall;
    EXPECT_TRUE(checkDesign(*d, p, o, ref).error.pass);
    EXPECT_EQ(d->workspaceBytes(), 0u) << "per-call holds nothing between runs";

    o.workspace = WorkspaceStrategy::kGrow;
    d->plan(boundsOf(p), o);
    EXPECT_EQ(d->workspaceBytes(), 0u) << "grow starts empty";
    EXPECT_TRUE(checkDesign(*d, p, o, ref).error.pass);
    EXPECT_GT(d->workspaceBytes(), 0u) << "and grows in the first run";
  }
}

// One plan for a bucket, several steps run through it (what replay does): grid sizes come from the
// bounds, the steps' sizes from the metadata.
TEST(KokkosDesigns, onePlanServesEveryStepOfABucket)
{
  std::vector<HostProblem> steps;
  steps.push_back(problemOf(2, 4, 17, 120, MaskLayout::kParents, 31, true, 2));
  steps.push_back(problemOf(4, 4, 9, 60, MaskLayout::kParents, 32, true, 0));
  steps.push_back(problemOf(1, 4, 17, 0, MaskLayout::kParents, 33, false, 3));
  PlanBounds bounds{0, 0, 0, 0, 4, MaskLayout::kParents};
  BatchCapacity const cap = BatchCapacity::covering(steps);
  for (auto const &s : steps)
  {
    PlanBounds const b = boundsOf(s);
    bounds.max_batch = std::max(bounds.max_batch, b.max_batch);
    bounds.max_tree = std::max(bounds.max_tree, b.max_tree);
    bounds.max_prefix = std::max(bounds.max_prefix, b.max_prefix);
    bounds.max_nodes = std::max(bounds.max_nodes, b.max_nodes);
  }
  for (auto const &name : kokkosDesigns())
    for (WorkspaceStrategy ws : {WorkspaceStrategy::kPersistent, WorkspaceStrategy::kGrow})
    {
      DesignPtr d = makeDesign(name);
      DesignOptions o;
      o.nsplit = 16;
      o.workspace = ws;
      d->plan(bounds, o);
      auto storage = makeBatchStorage(d->memory(), cap);
      for (size_t i = 0; i < steps.size(); ++i)
      {
        SCOPED_TRACE(name + " " + toString(ws) + " step " + std::to_string(i));
        storage->upload(steps[i]);
        storage->poisonOutput();
        storage->sync();
        d->run(storage->ref(), storage->context());
        std::vector<uint16_t> const out = storage->downloadOutput();
        ErrorStats const e = compareToReference(referenceAttention(steps[i]), out.data(), out.size());
        EXPECT_TRUE(e.pass) << "rel_l2 " << e.rel_l2 << ", bad " << e.num_bad;
      }
    }
}

#if defined(KOKKOS_ENABLE_CUDA)
// A CUDA error pending after a run's launches (a kernel that failed to launch leaves one; a failed
// allocation stands in for it here) is a RuntimeFailure of that run, and consumed by it: the next
// run is clean and correct.
TEST(KokkosDesigns, aPendingCudaErrorFailsTheRun)
{
  if (!std::is_same_v<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>)
    GTEST_SKIP() << "the default space is not Kokkos::Cuda";
  HostProblem const p = problemOf(2, 8, 17, 300, MaskLayout::kTree, 43, false, 0);
  for (auto const &name : kokkosDesigns())
  {
    SCOPED_TRACE(name);
    DesignPtr d = makeDesign(name);
    auto storage = makeBatchStorage(d->memory(), BatchCapacity::of(p));
    storage->upload(p);
    d->plan(boundsOf(p), DesignOptions{});
    void *huge = nullptr;
    ASSERT_NE(cudaMalloc(&huge, size_t{1} << 60), cudaSuccess);
    EXPECT_THROW(d->run(storage->ref(), storage->context()), RuntimeFailure);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    storage->poisonOutput();
    d->run(storage->ref(), storage->context());
    std::vector<uint16_t> const out = storage->downloadOutput();
    EXPECT_TRUE(compareToReference(referenceAttention(p), out.data(), out.size()).pass);
  }
}
#endif

TEST(KokkosDesigns, badUseIsAnInputError)
{
  HostProblem const p = problemOf(3, 2, 9, 30, MaskLayout::kTree, 41, false, 0);
  for (auto const &name : kokkosDesigns())
  {
    DesignPtr d = makeDesign(name);
    auto storage = makeBatchStorage(d->memory(), BatchCapacity::of(p));
    storage->upload(p);
    EXPECT_THROW(d->run(storage->ref(), storage->context()), InputError) << "run before plan";

    DesignOptions o;
    o.nsplit = -1;
    EXPECT_THROW(d->plan(boundsOf(p), o), InputError) << "nsplit -1";
    o.nsplit = 0;  // auto: the design chooses from the bounds
    EXPECT_NO_THROW(d->plan(boundsOf(p), o));

    o.nsplit = 4;
    PlanBounds small = boundsOf(p);
    small.max_batch = 2;
    d->plan(small, o);
    EXPECT_THROW(d->run(storage->ref(), storage->context()), InputError) << "batch beyond the plan";

    PlanBounds heads = boundsOf(p);
    heads.num_heads = 3;
    d->plan(heads, o);
    EXPECT_THROW(d->run(storage->ref(), storage->context()), InputError) << "heads differ from the plan";

    PlanBounds nodes = boundsOf(p);
    nodes.max_nodes = p.meta.numNodes() - 1;
    d->plan(nodes, o);
    EXPECT_THROW(d->run(storage->ref(), storage->context()), InputError) << "more nodes than planned";
  }
}
} // namespace
