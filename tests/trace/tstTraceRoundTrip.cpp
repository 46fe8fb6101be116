/// \file tstTraceRoundTrip.cpp
/// \brief Writer -> reader round trips: every dataset comes back bit for bit, steps come back as the
/// requests that were written, metadata equals core's buildMetadata in every layout, values replay.
#include "canopy_Bf16.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Random.hpp"
#include "canopy_Reference.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceTestUtil.hpp"
#include "canopy_Tree.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace canopy::test
{
namespace
{
void expectSameColumns(TraceColumns const &a, TraceColumns const &b)
{
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.shape.num_heads, b.shape.num_heads);
  EXPECT_EQ(a.shape.sm_scale, b.shape.sm_scale);
  EXPECT_EQ(a.num_slots, b.num_slots);
  EXPECT_EQ(a.request_offset, b.request_offset);
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.prefix_len, b.prefix_len);
  EXPECT_EQ(a.tree_offset, b.tree_offset);
  EXPECT_EQ(a.kv_offset, b.kv_offset);
  EXPECT_EQ(a.accepted, b.accepted);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.out_cache_loc, b.out_cache_loc);
  EXPECT_EQ(a.kv_indices, b.kv_indices);
  EXPECT_EQ(a.has_values, b.has_values);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv, b.kv);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.kv_dtype, b.kv_dtype);
  EXPECT_EQ(std::memcmp(&a.kv_scale, &b.kv_scale, sizeof(float)), 0) << a.kv_scale << " vs " << b.kv_scale;
  EXPECT_EQ(a.kv_fp8, b.kv_fp8);
}

/// Bit-for-bit equality of two fp64 outputs (NaN equals only the same NaN bits).
void expectSameBits(std::vector<double> const &a, std::vector<double> const &b, std::string const &what)
{
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0) << what;
}

/// Step \p s of \p c as a problem built from the columns directly (no file in between).
HostProblem problemFromColumns(TraceColumns const &c, int64_t s)
{
  HostProblem p;
  p.shape = c.shape;
  p.num_slots = c.num_slots;
  p.meta = stepMetadata(c, s, MaskLayout::kParents);
  size_t const row = static_cast<size_t>(c.shape.num_heads) * D_QK;
  size_t const n0 = static_cast<size_t>(c.tree_offset[c.request_offset[s]]);
  p.q.assign(c.q.begin() + static_cast<std::ptrdiff_t>(n0 * row),
             c.q.begin() + static_cast<std::ptrdiff_t>((n0 + static_cast<size_t>(p.meta.numNodes())) * row));
  p.kv_dtype = c.kv_dtype;
  p.kv_scale = c.kv_scale;
  p.kv_pool = c.kv;
  p.kv_pool_fp8 = c.kv_fp8;
  return p;
}

/// The root attribute version of a trace file.
int64_t fileVersion(std::string const &path)
{
  H5Edit f(path);
  return Impl::readIntAttr(f.file(), "version", "/");
}

constexpr KvDtype FP8_DTYPES[] = {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled};

/// A small simulated trace with an FP8 pool stored as the serving stacks write it; scale 0.0371
/// (not a power of two, so a scale lost or applied twice changes every value).
TraceColumns fp8Columns(KvDtype dtype, uint64_t seed, bool values)
{
  TraceColumns c = smallColumns(seed);
  c.kv_dtype = dtype;
  c.kv_scale = kvDtypeHasScale(dtype) ? 0.0371f : 1.0f;
  if (values)
    addSyntheticValues(c, seed + 99);
  return c;
}

/// A hand-built trace: two steps, a request that persists (its prefix grows by the accepted path).
TraceContent handContent()
{
  TraceContent t;
  t.source = "hand";
  t.created = "2024-05-06T07:08:09+00:00";
  t.shape.num_heads = 3;
  t.shape.sm_scale = 0.125;
  t.num_slots = 64;
  TraceRequest a{7, {{10, 11, 12, 3}, {-1, 0, 0, 1}, {20, 21, 22, 23}}, 3};
  TraceRequest b{9, {{}, {-1}, {30}}, 1};
  TraceRequest a2{7, {{10, 11, 12, 3, 20, 21, 23}, {-1, 0, 1}, {40, 41, 42}}, 2};
  t.steps = {TraceStep{{a, b}}, TraceStep{{a2}}, TraceStep{}};
  return t;
}
} // namespace

TEST(TraceRoundTrip, handWrittenStepsComeBackAsWritten)
{
  TraceContent const t = handContent();
  std::string const path = tempPath("hand.h5");
  writeTrace(path, t);
  TraceReader const r(path);
  EXPECT_EQ(r.numSteps(), 3);
  EXPECT_EQ(r.info().source, "hand");
  EXPECT_EQ(r.info().created, t.created);
  EXPECT_EQ(r.info().shape.num_heads, 3);
  EXPECT_EQ(r.info().shape.sm_scale, 0.125);
  EXPECT_EQ(r.info().num_slots, 64);
  EXPECT_EQ(r.info().num_requests, 3);
  EXPECT_EQ(r.info().num_nodes, 8);
  EXPECT_EQ(r.info().num_prefix_tokens, 11);
  EXPECT_TRUE(r.info().has_accepted);
  EXPECT_FALSE(r.info().has_values);
  for (int64_t s = 0; s < r.numSteps(); ++s)
  {
    auto const got = r.stepRequests(s);
    auto const &want = t.steps[static_cast<size_t>(s)].requests;
    ASSERT_EQ(got.size(), want.size()) << "step " << s;
    EXPECT_EQ(r.stepBatchSize(s), static_cast<int>(want.size()));
    for (size_t i = 0; i < got.size(); ++i)
    {
      EXPECT_EQ(got[i].request_id, want[i].request_id);
      EXPECT_EQ(got[i].accepted, want[i].accepted);
      EXPECT_EQ(got[i].spec.prefix_slots, want[i].spec.prefix_slots);
      EXPECT_EQ(got[i].spec.parent, want[i].spec.parent);
      EXPECT_EQ(got[i].spec.tree_slots, want[i].spec.tree_slots);
    }
  }
  EXPECT_EQ(r.requestIds(0), (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(r.accepted(0), (std::vector<int32_t>{3, 1}));
  EXPECT_TRUE(r.expectedOutput(0).empty());
  EXPECT_EQ(r.stepBatchSize(2), 0);
  expectInputError([&] { r.stepMetadata(3, MaskLayout::kFull); }, {"step 3 out of range"});
  expectInputError([&] { r.stepBatchSize(-1); }, {"step -1 out of range"});
}

TEST(TraceRoundTrip, simulatedColumnsComeBackBitForBit)
{
  for (bool values : {false, true})
  {
    TraceColumns const c = smallColumns(11, values);
    // Something to compare: several steps, and the value datasets exactly when asked for.
    ASSERT_GT(c.request_offset.size(), 2u);
    ASSERT_FALSE(c.parent.empty());
    ASSERT_EQ(c.q.empty(), !values);
    ASSERT_EQ(c.kv.empty(), !values);
    std::string const path = tempPath(values ? "values.h5" : "meta.h5");
    writeTraceColumns(path, c);
    expectSameColumns(readTraceColumns(path), c);
    // The same through an in-memory image, and uncompressed.
    std::vector<unsigned char> const image = Impl::writeColumnsImage(c);
    expectSameColumns(TraceReader::fromImage(image.data(), image.size()).columns(), c);
    TraceWriteOptions raw;
    raw.deflate_level = 0;
    raw.chunk_bytes = 64;  // many chunks, partial last chunk
    writeTraceColumns(path, c, raw);
    expectSameColumns(readTraceColumns(path), c);
  }
}

TEST(TraceRoundTrip, stepMetadataEqualsBuildMetadataInEveryLayout)
{
  TraceColumns const c = smallColumns(5);
  std::string const path = tempPath("t.h5");
  writeTraceColumns(path, c);
  TraceReader const r(path);
  ASSERT_GT(r.numSteps(), 0);
  TraceStepView view;
  BatchMetadata reused;
  for (int64_t s = r.numSteps() - 1; s >= 0; --s)  // larger steps first, then smaller into the same buffers
  {
    std::vector<RequestSpec> specs;
    for (auto const &req : r.stepRequests(s))
      specs.push_back(req.spec);
    for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
    {
      BatchMetadata const got = r.stepMetadata(s, layout);
      BatchMetadata const want = buildMetadata(specs, layout);
      EXPECT_EQ(got.mask_layout, layout);
      EXPECT_EQ(got.kv_indptr, want.kv_indptr);
      EXPECT_EQ(got.kv_indices, want.kv_indices);
      EXPECT_EQ(got.qo_indptr, want.qo_indptr);
      EXPECT_EQ(got.out_cache_loc, want.out_cache_loc);
      EXPECT_EQ(got.custom_mask, want.custom_mask);
      EXPECT_EQ(got.mask_indptr, want.mask_indptr);
      EXPECT_EQ(got.tree_parent, want.tree_parent);
      EXPECT_NO_THROW(validateMetadata(got, r.info().num_slots));
      // Filling a reused BatchMetadata (last used for another step and layout) gives the same buffers.
      r.stepMetadata(s, layout, reused);
      EXPECT_EQ(reused.mask_layout, layout);
      EXPECT_EQ(reused.kv_indptr, got.kv_indptr);
      EXPECT_EQ(reused.kv_indices, got.kv_indices);
      EXPECT_EQ(reused.qo_indptr, got.qo_indptr);
      EXPECT_EQ(reused.out_cache_loc, got.out_cache_loc);
      EXPECT_EQ(reused.custom_mask, got.custom_mask);
      EXPECT_EQ(reused.mask_indptr, got.mask_indptr);
      EXPECT_EQ(reused.tree_parent, got.tree_parent);
    }
    // The zero-copy view points at the same numbers.
    r.stepView(s, view);
    BatchMetadata const m = r.stepMetadata(s, MaskLayout::kParents);
    EXPECT_EQ(view.batch_size, m.batchSize());
    EXPECT_EQ(view.kv_indptr, m.kv_indptr);
    EXPECT_EQ(view.qo_indptr, m.qo_indptr);
    ASSERT_EQ(view.num_prefix_tokens, static_cast<int64_t>(m.kv_indices.size()));
    ASSERT_EQ(view.num_nodes, m.numNodes());
    EXPECT_TRUE(std::equal(m.kv_indices.begin(), m.kv_indices.end(), view.kv_indices));
    EXPECT_TRUE(std::equal(m.out_cache_loc.begin(), m.out_cache_loc.end(), view.out_cache_loc));
    EXPECT_TRUE(std::equal(m.tree_parent.begin(), m.tree_parent.end(), view.tree_parent));
    ASSERT_NE(view.accepted, nullptr);
    EXPECT_EQ(view.accepted[0], r.accepted(s)[0]);
    EXPECT_EQ(view.request_id[0], r.requestIds(s)[0]);
  }
}

TEST(TraceRoundTrip, seededValuesAreReproducibleWithoutRecordedValues)
{
  TraceColumns const c = smallColumns(8);
  std::string const path = tempPath("t.h5");
  writeTraceColumns(path, c);
  TraceReader const r(path);
  HostProblem const a = r.stepProblem(1, MaskLayout::kTree, 42);
  HostProblem const b = r.stepProblem(1, MaskLayout::kTree, 42);
  HostProblem const other = r.stepProblem(1, MaskLayout::kTree, 43);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.kv_pool, b.kv_pool);
  EXPECT_NE(a.q, other.q);
  EXPECT_EQ(a.q.size(), static_cast<size_t>(a.meta.numNodes()) * a.shape.num_heads * D_QK);
  EXPECT_EQ(a.kv_pool.size(), static_cast<size_t>(r.info().num_slots) * D_QK);
  // Identical to filling a problem with the same metadata by hand: the seed alone fixes the bits.
  HostProblem manual;
  manual.shape = a.shape;
  manual.num_slots = a.num_slots;
  manual.meta = a.meta;
  fillRandomValues(manual, 42);
  EXPECT_EQ(manual.q, a.q);
  EXPECT_EQ(manual.kv_pool, a.kv_pool);
}

TEST(TraceRoundTrip, recordedValuesReplayToTheReference)
{
  TraceColumns const c = smallColumns(3, true);
  std::string const path = tempPath("v.h5");
  writeTraceColumns(path, c);
  TraceReader const r(path);
  ASSERT_TRUE(r.info().has_values);
  ASSERT_TRUE(r.info().has_expected_out);
  int64_t const H = r.info().shape.num_heads;
  for (int64_t s = 0; s < r.numSteps(); ++s)
  {
    HostProblem const p = r.stepProblem(s, MaskLayout::kFull, 1234);
    int64_t const n0 = c.tree_offset[c.request_offset[s]];
    // Recorded q rows of this step and the recorded pool, not seeded ones.
    ASSERT_EQ(p.q.size(), static_cast<size_t>(p.meta.numNodes() * H * D_QK));
    EXPECT_TRUE(std::equal(p.q.begin(), p.q.end(), c.q.begin() + n0 * H * D_QK));
    EXPECT_EQ(p.kv_pool, c.kv);
    std::vector<uint16_t> const out = r.expectedOutput(s);
    ASSERT_EQ(out.size(), p.outElements());
    ErrorStats const e = compareToReference(referenceAttention(p), out.data(), out.size());
    EXPECT_TRUE(e.pass) << "step " << s << " rel_l2 " << e.rel_l2 << " bad " << e.num_bad;
    // bf16 rounding of the fp64 reference: well under the kernels' tolerance.
    EXPECT_LT(e.rel_l2, 4e-3);
  }
  // The check can fail: a corrupted expected output is caught.
  std::vector<uint16_t> out = r.expectedOutput(0);
  out[5] = floatToBf16(bf16ToFloat(out[5]) + 1.0f);
  for (size_t i = 0; i < out.size(); i += 3)
    out[i] = floatToBf16(-bf16ToFloat(out[i]));
  HostProblem const p0 = r.stepProblem(0, MaskLayout::kFull, 0);
  EXPECT_FALSE(compareToReference(referenceAttention(p0), out.data(), out.size()).pass);
}

TEST(TraceRoundTrip, fp8PoolsComeBackBitForBitAndReplayToTheSameReference)
{
  for (KvDtype dtype : FP8_DTYPES)
  {
    SCOPED_TRACE(toString(dtype));
    TraceColumns const c = fp8Columns(dtype, 21, true);
    ASSERT_TRUE(c.kv.empty());
    ASSERT_EQ(c.kv_fp8.size(), static_cast<size_t>(c.num_slots) * kvRowBytes(dtype));
    std::string const path = tempPath("fp8.h5");
    writeTraceColumns(path, c);
    EXPECT_EQ(fileVersion(path), 2) << "an FP8 pool needs format v2";
    TraceColumns const back = readTraceColumns(path);
    expectSameColumns(back, c);
    EXPECT_EQ(back.format_version, 2);
    std::vector<unsigned char> const image = Impl::writeColumnsImage(c);
    expectSameColumns(TraceReader::fromImage(image.data(), image.size()).columns(), c);
    TraceWriteOptions raw;
    raw.deflate_level = 0;
    raw.chunk_bytes = 1000;  // chunks of one row, a partial chunk's worth of bytes
    writeTraceColumns(path, c, raw);
    expectSameColumns(readTraceColumns(path), c);

    TraceReader const r(path);
    EXPECT_EQ(r.info().kv_dtype, dtype);
    EXPECT_EQ(r.info().format_version, 2);
    EXPECT_EQ(r.info().kv_scale, c.kv_scale);
    ErrorBounds const bounds = errorBounds(dtype, Numerics::kDequant);
    for (int64_t s = 0; s < r.numSteps(); ++s)
    {
      HostProblem const p = r.stepProblem(s, MaskLayout::kParents, 7);
      EXPECT_EQ(p.kv_dtype, dtype);
      EXPECT_TRUE(p.kv_pool.empty());
      EXPECT_EQ(p.kv_pool_fp8, c.kv_fp8);
      EXPECT_EQ(p.kv_scale, c.kv_scale);
      // The reference on the read-back step equals the one on the written columns, bit for bit.
      HostProblem const original = problemFromColumns(c, s);
      expectSameBits(referenceAttention(p), referenceAttention(original), "dequant, step " + std::to_string(s));
      if (numericsUndefinedFor(dtype, Numerics::kFp8Mma).empty())
        expectSameBits(referenceAttention(p, Numerics::kFp8Mma), referenceAttention(original, Numerics::kFp8Mma),
                       "fp8-mma, step " + std::to_string(s));
      std::vector<uint16_t> const out = r.expectedOutput(s);
      ErrorStats const e = compareToReference(referenceAttention(p), out.data(), out.size(), bounds);
      EXPECT_TRUE(e.pass) << "step " << s << " rel_l2 " << e.rel_l2;
      EXPECT_LT(e.rel_l2, 4e-3);  // the expected output is the reference on the stored pool, rounded
    }
    // The stored pool is quantisePool of the drawn bf16 values (addSyntheticValues draws q, then the pool).
    SplitMix64 rng(21 + 99);
    for (size_t i = 0; i < c.q.size(); ++i)
      rng.uniformSigned();
    HostProblem drawn;
    drawn.num_slots = c.num_slots;
    drawn.kv_pool.resize(static_cast<size_t>(c.num_slots) * D_QK);
    for (auto &x : drawn.kv_pool)
      x = floatToBf16(rng.uniformSigned());
    quantisePool(drawn, dtype, c.kv_scale);
    EXPECT_EQ(drawn.kv_pool_fp8, c.kv_fp8);
  }
}

TEST(TraceRoundTrip, fp8TraceWithoutValuesSeedsAPoolStoredInItsDtype)
{
  for (KvDtype dtype : FP8_DTYPES)
  {
    SCOPED_TRACE(toString(dtype));
    TraceColumns const c = fp8Columns(dtype, 8, false);
    std::string const path = tempPath("fp8-meta.h5");
    writeTraceColumns(path, c);
    TraceReader const r(path);
    EXPECT_FALSE(r.info().has_values);
    HostProblem const a = r.stepProblem(1, MaskLayout::kTree, 42);
    EXPECT_EQ(a.kv_dtype, dtype);
    EXPECT_EQ(a.kv_scale, c.kv_scale);
    EXPECT_TRUE(a.kv_pool.empty());
    ASSERT_EQ(a.kv_pool_fp8.size(), static_cast<size_t>(r.info().num_slots) * kvRowBytes(dtype));
    // The seeded bf16 values of a bf16 trace, quantised as the trace's pool is stored.
    HostProblem manual;
    manual.shape = a.shape;
    manual.num_slots = a.num_slots;
    manual.meta = a.meta;
    fillRandomValues(manual, 42);
    quantisePool(manual, dtype, c.kv_scale);
    EXPECT_EQ(manual.q, a.q);
    EXPECT_EQ(manual.kv_pool_fp8, a.kv_pool_fp8);
    EXPECT_EQ(a.kv_pool_fp8, r.stepProblem(1, MaskLayout::kTree, 42).kv_pool_fp8);
  }
  // A scale that suits recorded values may overflow seeded ones (|x| <= 1): e4m3 saturates to NaN
  // above 448, so 1/1000 cannot store them. Named, not replayed as NaN.
  TraceColumns c = fp8Columns(KvDtype::kFp8E4m3, 8, false);
  c.kv_scale = 1e-3f;
  std::string const path = tempPath("tiny-scale.h5");
  writeTraceColumns(path, c);
  TraceReader const r(path);
  expectInputError([&] { r.stepProblem(0, MaskLayout::kParents, 1); },
                   {"tiny-scale.h5", "/model attribute kv_scale", "too small", "NaN"});
}

TEST(TraceRoundTrip, bf16TracesStayVersion1AndReadAsVersion2Too)
{
  TraceColumns const c = smallColumns(12, true);
  std::string const path = tempPath("bf16.h5");
  writeTraceColumns(path, c);
  EXPECT_EQ(fileVersion(path), 1) << "a bf16 trace keeps format v1, readable by v1 readers";
  TraceReader const r1(path);
  EXPECT_EQ(r1.info().format_version, 1);
  EXPECT_EQ(r1.info().kv_dtype, KvDtype::kBf16);
  // The same file marked version 2 (kv_dtype "bf16", no kv_scale) reads as the same trace.
  H5Edit(path).setIntAttr("/", "version", 2);
  TraceReader const r2(path);
  EXPECT_EQ(r2.info().format_version, 2);
  expectSameColumns(r2.columns(), r1.columns());
  HostProblem const p = r2.stepProblem(0, MaskLayout::kParents, 0);
  EXPECT_EQ(p.kv_dtype, KvDtype::kBf16);
  EXPECT_EQ(p.kv_pool, c.kv);
  EXPECT_TRUE(p.kv_pool_fp8.empty());
}

TEST(TraceRoundTrip, writerIsAtomicAndRefusesInvalidContent)
{
  std::string const path = tempPath("atomic.h5");
  TraceColumns good = smallColumns(4);
  writeTraceColumns(path, good);
  auto const before = std::filesystem::file_size(path);

  TraceColumns bad = good;
  bad.parent[bad.tree_offset[1] + 1] = 5;  // parent not < node
  expectInputError([&] { writeTraceColumns(path, bad); }, {"refusing", "/tree/parent", "index"});
  // The old file is untouched and no temporary file is left beside it.
  EXPECT_EQ(std::filesystem::file_size(path), before);
  EXPECT_NO_THROW(TraceReader{path});
  int files = 0;
  for (auto const &e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);

  // A new trace replaces the old one as a whole.
  TraceColumns other = smallColumns(9);
  other.source = "replacement";
  writeTraceColumns(path, other);
  EXPECT_EQ(TraceReader(path).info().source, "replacement");

  expectInputError([&] { writeTraceColumns(tempPath("x") + "/no/such/dir/t.h5", good); }, {"output folder", "does not exist"});
}

TEST(TraceRoundTrip, aFullDiskIsAFailureNamingTheFileNeverACrash)
{
  // A file size limit makes write(2) fail as a full disk does. In a child, so the limit (and the exit
  // handlers of HDF5, which once tripped over a file left open by the failed write) stay there.
  std::string const path = tempPath("full.h5");
  TraceColumns const c = smallColumns(60);
  pid_t const child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0)
  {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try
    {
      writeTraceColumns(path, c);
    }
    catch (RuntimeFailure const &e)
    {
      bool const named = std::string(e.what()).find("full.h5") != std::string::npos &&
                         std::string(e.what()).find("trace writer") != std::string::npos;
      std::exit(named ? 3 : 10);
    }
    std::exit(11);  // written within 4 KiB: the test proves nothing
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 3) << "10: message does not name the file; 11: nothing failed";
  EXPECT_FALSE(std::filesystem::exists(path));
  for (auto const &e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    EXPECT_EQ(e.path().filename().string().find("full.h5.tmp"), std::string::npos) << "temporary left behind";
}

TEST(TraceRoundTrip, contentWithMismatchedTreeIsRejected)
{
  TraceContent t = handContent();
  t.steps[0].requests[0].spec.tree_slots.pop_back();
  expectInputError([&] { writeTrace(tempPath("t.h5"), t); }, {"request id 7", "parents", "tree slots"});
}

TEST(TraceRoundTrip, emptyTraceIsValid)
{
  TraceReader const r(writeEmptyTrace("empty.h5"));
  EXPECT_EQ(r.numSteps(), 0);
  EXPECT_EQ(r.info().num_requests, 0);
  EXPECT_FALSE(r.info().has_accepted);
}
} // namespace canopy::test
