/// \file tstProblem.cpp
/// \brief Metadata building and validation, padding, the generator, the cost model and batch upload.
#include "canopy_Batch.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_Error.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Problem.hpp"
#include "canopy_TestSpaces.hpp"

#include <gtest/gtest.h>

#include <set>

namespace
{
using namespace canopy;

BatchMetadata twoRequests(MaskLayout layout)
{
  return buildMetadata({RequestSpec{{3, 4, 5}, {-1, 0, 0}, {7, 8, 9}}, RequestSpec{{}, {-1, 0}, {1, 2}}}, layout);
}

TEST(Metadata, nativeBuffersForFullLayout)
{
  auto const m = twoRequests(MaskLayout::kFull);
  EXPECT_EQ(m.kv_indptr, (std::vector<int32_t>{0, 3, 3}));
  EXPECT_EQ(m.qo_indptr, (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(m.mask_indptr, (std::vector<int64_t>{0, 18, 22}));  // 3*(3+3), 2*(0+2)
  EXPECT_EQ(m.out_cache_loc, (std::vector<int64_t>{7, 8, 9, 1, 2}));
  EXPECT_EQ(m.tree_parent, (std::vector<int32_t>{-1, 0, 0, -1, 0}));
  EXPECT_NO_THROW(validateMetadata(m, 10));
  EXPECT_EQ(twoRequests(MaskLayout::kTree).mask_indptr, (std::vector<int64_t>{0, 9, 13}));
  EXPECT_TRUE(twoRequests(MaskLayout::kParents).custom_mask.empty());
}

void expectInvalid(BatchMetadata const &m, int64_t slots, std::string const &fragment)
{
  try
  {
    validateMetadata(m, slots);
    FAIL() << "accepted, expected: " << fragment;
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Metadata, validationNamesBufferAndIndex)
{
  auto m = twoRequests(MaskLayout::kFull);
  expectInvalid(m, 9, "out_cache_loc: index 2 holds slot 9");
  auto a = m;
  a.kv_indices[1] = -1;
  expectInvalid(a, 10, "kv_indices: index 1");
  auto b = m;
  b.qo_indptr[1] = 6;
  expectInvalid(b, 10, "qo_indptr: index 2 holds");
  auto c = m;
  c.tree_parent[4] = 1;
  expectInvalid(c, 10, "tree_parent of request 1: node 1 has parent 1");
  auto d = m;
  d.mask_indptr[1] = 17;
  expectInvalid(d, 10, "mask_indptr: request 0");
  auto e = m;
  e.kv_indptr.back() = 4;
  expectInvalid(e, 10, "kv_indptr: last entry 4");
  EXPECT_THROW(buildMetadata({RequestSpec{{}, {0}, {1}}}, MaskLayout::kFull), InputError);
  EXPECT_THROW(buildMetadata({RequestSpec{{}, {-1, 0}, {1}}}, MaskLayout::kFull), InputError);
}

TEST(Metadata, paddingAddsEmptyRows)
{
  auto m = twoRequests(MaskLayout::kTree);
  padBatch(m, 4);
  EXPECT_EQ(m.batchSize(), 4);
  EXPECT_EQ(m.treeSize(3), 0);
  EXPECT_EQ(m.prefixLen(2), 0);
  EXPECT_NO_THROW(validateMetadata(m, 10));
  EXPECT_THROW(padBatch(m, 3), InputError);
}

TEST(Generator, deterministicFragmentedAndValid)
{
  GeneratorOptions g;
  g.batch = 4;
  g.tree_size = 17;
  g.prefix_len = 300;
  g.ragged = true;
  g.padded_rows = 1;
  g.seed = 9;
  HostProblem const a = generateProblem(g), b = generateProblem(g);
  EXPECT_EQ(a.meta.kv_indices, b.meta.kv_indices);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv_pool, b.kv_pool);
  EXPECT_NO_THROW(validateMetadata(a.meta, a.num_slots));
  EXPECT_EQ(a.meta.batchSize(), 5);
  EXPECT_EQ(a.meta.treeSize(4), 0);
  // Every slot used once (prefix and tree), and slots are not one contiguous run.
  std::set<int64_t> used(a.meta.kv_indices.begin(), a.meta.kv_indices.end());
  used.insert(a.meta.out_cache_loc.begin(), a.meta.out_cache_loc.end());
  EXPECT_EQ(used.size(), a.meta.kv_indices.size() + a.meta.out_cache_loc.size());
  int breaks = 0;
  for (size_t i = 1; i < a.meta.kv_indices.size(); ++i)
    breaks += a.meta.kv_indices[i] != a.meta.kv_indices[i - 1] + 1;
  EXPECT_GT(breaks, 3);
  // Values are not zeros.
  int zeros = 0;
  for (auto x : a.q)
    zeros += (x & 0x7fff) == 0;
  EXPECT_LT(zeros, static_cast<int>(a.q.size() / 100));
  g.seed = 10;
  EXPECT_NE(generateProblem(g).q, a.q);
}

TEST(Metadata, aNodeThatDoesNotSeeItselfIsRefusedNamingTheMaskIndex)
{
  for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree})
  {
    GeneratorOptions g;
    g.batch = 2;
    g.tree_size = 5;
    g.prefix_len = 7;
    g.mask_layout = layout;
    HostProblem p = generateProblem(g);
    EXPECT_NO_THROW(validateMetadata(p.meta, p.num_slots));
    // Request 1, node 3: its own bit.
    int64_t const row_len = layout == MaskLayout::kFull ? 7 + 5 : 5, col0 = layout == MaskLayout::kFull ? 7 : 0;
    int64_t const at = p.meta.mask_indptr[1] + 3 * row_len + col0 + 3;
    p.meta.custom_mask[static_cast<size_t>(at)] = 0;
    try
    {
      validateMetadata(p.meta, p.num_slots);
      ADD_FAILURE() << toString(layout) << ": a node that does not see itself was accepted";
    }
    catch (InputError const &e)
    {
      EXPECT_NE(std::string(e.what()).find("custom_mask: index " + std::to_string(at)), std::string::npos) << e.what();
    }
  }
}

TEST(Generator, treeSizesChooseEachRequestsTree)
{
  GeneratorOptions g;
  g.batch = 5;
  g.tree_sizes = {8, 0, 40};
  g.prefix_len = 100;
  g.ragged = true;
  HostProblem const a = generateProblem(g);
  EXPECT_NO_THROW(validateMetadata(a.meta, a.num_slots));
  std::vector<int64_t> const want{8, 0, 40, 8, 0};
  for (int b = 0; b < 5; ++b)
    EXPECT_EQ(a.meta.treeSize(b), want[static_cast<size_t>(b)]) << "request " << b;
  g.tree_sizes = {3, -1};
  EXPECT_THROW(generateProblem(g), InputError);
}

TEST(CostModel, knownShape)
{
  // B=1, H=8, T=33, P=4096: FLOPs = 2*8*33*(4096+33)*(576+512).
  GeneratorOptions g;
  g.tree_size = 33;
  g.prefix_len = 4096;
  g.mask_layout = MaskLayout::kTree;
  HostProblem const p = generateProblem(g);
  Cost const c = costOf(p.meta, 8);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 8 * 33 * 4129 * 1088);
  // KV rows and their slot indices, q and out, the 33 x 33 tree mask.
  double const bytes = 4129.0 * (1152 + 8) + 33.0 * 8 * (576 + 512) * 2 + 33.0 * 33;
  EXPECT_DOUBLE_EQ(c.bytes_min, bytes);
  // 33 x 8 = 264 rows: 5 row tiles of 64, each gathering all 4,129 KV rows.
  EXPECT_DOUBLE_EQ(c.tile_copy_bytes, 5.0 * 4129 * 1152);
  EXPECT_DOUBLE_EQ(copyRooflineSeconds(c, 1e15, 1e12), 5.0 * 4129 * 1152 / 1e12);
  // A full mask costs the same: its prefix columns are 1 by definition and need no reading.
  g.mask_layout = MaskLayout::kFull;
  EXPECT_DOUBLE_EQ(costOf(generateProblem(g).meta, 8).bytes_min, bytes);
  // The parents layout reads 4 bytes per node instead of the mask.
  g.mask_layout = MaskLayout::kParents;
  EXPECT_DOUBLE_EQ(costOf(generateProblem(g).meta, 8).bytes_min, bytes - 33.0 * 33 + 4.0 * 33);
  // "about 1.89 H T FLOP/byte" (docs/design.md §1) ignores q and out bytes, which lower it a little.
  EXPECT_GT(c.intensity(), 0.85 * 1.89 * 8 * 33);
  EXPECT_LT(c.intensity(), 1.89 * 8 * 33);
  EXPECT_DOUBLE_EQ(rooflineSeconds(c, 1e12, 1e9), bytes / 1e9);
}

TEST(CostModel, requestsAddUpAndRowsWithoutNodesCountNothing)
{
  // Each request on its own terms: request 0 (P=3, T=3) and request 1 (P=2, T=2), H=2, full mask.
  BatchMetadata m = buildMetadata({RequestSpec{{3, 4, 5}, {-1, 0, 0}, {7, 8, 9}}, RequestSpec{{10, 11}, {-1, 0}, {1, 2}}},
                                  MaskLayout::kFull);
  double const r0 = 6.0 * (1152 + 8) + 3.0 * 2 * (1152 + 1024) + 3.0 * 3;
  double const r1 = 4.0 * (1152 + 8) + 2.0 * 2 * (1152 + 1024) + 2.0 * 2;
  Cost const c = costOf(m, 2);
  EXPECT_DOUBLE_EQ(c.bytes_min, r0 + r1);
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2 * (3 * 6 + 2 * 4) * 1088);
  // Padded rows of a graph bucket (P = T = 0) add nothing.
  padBatch(m, 4);
  EXPECT_DOUBLE_EQ(costOf(m, 2).bytes_min, r0 + r1);
  // A request with a prefix and no tree node has no query: none of its prefix is read.
  BatchMetadata const no_nodes = buildMetadata({RequestSpec{{3, 4, 5}, {}, {}}}, MaskLayout::kTree);
  EXPECT_DOUBLE_EQ(costOf(no_nodes, 2).bytes_min, 0);
  EXPECT_DOUBLE_EQ(costOf(no_nodes, 2).flops, 0);
}

template <class ExecutionSpace>
struct BatchUpload : ::testing::Test
{
};
TYPED_TEST_SUITE(BatchUpload, CanopyExecSpaces);

TYPED_TEST(BatchUpload, roundTripsMetadataAndPoisonsOutput)
{
  using Mem = typename TypeParam::memory_space;
  GeneratorOptions g;
  g.batch = 2;
  g.tree_size = 5;
  g.prefix_len = 20;
  HostProblem const p = generateProblem(g);
  VerifyBatch<Mem> batch(BatchCapacity::of(p));
  batch.upload(p);
  batch.poisonOutput();
  auto out = batch.downloadOutput();
  ASSERT_EQ(out.size(), p.outElements());
  for (auto x : out)
    ASSERT_TRUE(bf16IsNan(x));
  auto kv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), batch.kv_indices);
  for (size_t i = 0; i < p.meta.kv_indices.size(); ++i)
    ASSERT_EQ(kv(i), p.meta.kv_indices[i]);
  BatchRef const r = batch.ref();
  EXPECT_EQ(r.batch_size, 2);
  EXPECT_EQ(r.num_nodes, 10);
  GeneratorOptions big = g;
  big.batch = 3;
  EXPECT_THROW(batch.setMetadata(generateProblem(big).meta, p.shape), InputError);
}
} // namespace
