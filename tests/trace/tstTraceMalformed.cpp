/// \file tstTraceMalformed.cpp
/// \brief A corpus of malformed traces, built here from a valid one: each must be rejected with an
/// InputError naming the dataset (or attribute) and the first bad index; never a crash, never a fix.
#include "canopy_Bf16.hpp"
#include "canopy_TraceIsolation.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceTestUtil.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <unistd.h>

namespace canopy::test
{
namespace
{
std::string writeValid(std::string const &name, bool values = false)
{
  std::string const path = tempPath(name);
  writeTraceColumns(path, smallColumns(21, values));
  return path;
}

/// Writes \p c without validation and expects the reader to reject it naming every needle.
void expectRejected(TraceColumns const &c, std::vector<std::string> const &needles)
{
  std::string const path = tempPath("bad.h5");
  Impl::writeColumnsUnchecked(path, c);
  std::vector<std::string> with_file = needles;
  with_file.push_back(path);
  expectInputError([&] { TraceReader r(path); }, with_file);
  // And the in-memory path agrees.
  std::vector<unsigned char> const image = Impl::writeColumnsImage(c);
  expectInputError([&] { TraceReader::fromImage(image.data(), image.size()); }, needles);
}

std::string idx(int64_t i) { return "index " + std::to_string(i) + " "; }
} // namespace

// ---- files that are not (whole) HDF5 traces ---------------------------------------------------
TEST(TraceMalformed, missingFileAndNonHdf5)
{
  expectInputError([] { TraceReader r(tempPath("absent.h5")); }, {"absent.h5", "no such file"});
  std::string const text = tempPath("text.h5");
  std::ofstream(text) << "this is not an HDF5 file\n";
  expectInputError([&] { TraceReader r(text); }, {"text.h5", "not a readable HDF5 file"});
  std::string const empty = tempPath("empty.h5");
  std::ofstream{empty};
  expectInputError([&] { TraceReader r(empty); }, {"empty.h5", "not a readable HDF5 file"});
  expectInputError([&] { TraceReader r(std::filesystem::path(text).parent_path().string()); }, {"not a regular file"});
}

TEST(TraceMalformed, truncatedFilesAreRejected)
{
  std::string const path = writeValid("full.h5");
  auto const size = static_cast<int64_t>(std::filesystem::file_size(path));
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (double frac : {0.02, 0.25, 0.5, 0.9, 0.99})
  {
    std::string const cut = tempPath("cut.h5");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(static_cast<double>(size) * frac));
    expectInputError([&] { TraceReader r(cut); }, {"cut.h5"});
  }
  // Dropping a single trailing byte is caught too.
  std::string const cut = tempPath("cut1.h5");
  std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size - 1));
  expectInputError([&] { TraceReader r(cut); }, {"cut1.h5"});
}

// ---- attributes ---------------------------------------------------------------------------------
TEST(TraceMalformed, formatAndVersionAttributes)
{
  struct Case
  {
    std::function<void(H5Edit &)> edit;
    std::vector<std::string> needles;
  };
  std::vector<Case> const cases = {
      {[](H5Edit &e) { e.removeAttr("/", "format"); }, {"attribute format", "missing"}},
      {[](H5Edit &e) { e.setStringAttr("/", "format", "other-trace"); }, {"attribute format", "other-trace"}},
      {[](H5Edit &e) { e.setIntAttr("/", "format", 1); }, {"attribute format", "must be a string"}},
      {[](H5Edit &e) { e.removeAttr("/", "version"); }, {"attribute version", "missing"}},
      {[](H5Edit &e) { e.setIntAttr("/", "version", 3); }, {"attribute version is 3", "versions 1 and 2"}},
      {[](H5Edit &e) { e.setIntAttr("/", "version", 0); }, {"attribute version is 0"}},
      {[](H5Edit &e) { e.setStringAttr("/", "version", "1"); }, {"attribute version", "must be a integer"}},
      {[](H5Edit &e) { e.setStringAttr("/", "created", "yesterday"); }, {"attribute created", "ISO-8601"}},
      {[](H5Edit &e) { e.removeAttr("/", "source"); }, {"attribute source", "missing"}},
      {[](H5Edit &e) { e.setIntAttr("/model", "num_heads", 0); }, {"/model", "num_heads is 0"}},
      {[](H5Edit &e) { e.setIntAttr("/model", "d_latent", 256); }, {"/model", "d_latent = 256"}},
      {[](H5Edit &e) { e.setStringAttr("/model", "kv_dtype", "fp8"); }, {"/model", "kv_dtype", "fp8"}},
      // Version 1 holds bf16 pools only, whatever its kv_dtype says.
      {[](H5Edit &e) { e.setStringAttr("/model", "kv_dtype", "fp8-e4m3"); },
       {"/model", "kv_dtype is 'fp8-e4m3'", "version 1", "needs version 2"}},
      {[](H5Edit &e) { e.setDoubleAttr("/model", "sm_scale", -1.0); }, {"/model", "sm_scale"}},
      {[](H5Edit &e) { e.setIntAttr("/model", "sm_scale", 1); }, {"/model attribute sm_scale", "floating-point"}},
      {[](H5Edit &e) { e.removeAttr("/pool", "num_slots"); }, {"/pool attribute num_slots", "missing"}},
      {[](H5Edit &e) { e.setIntAttr("/pool", "num_slots", -5); }, {"/pool", "num_slots is -5"}},
      // Slots are checked against num_slots: shrinking the pool leaves slots outside it.
      {[](H5Edit &e) { e.setIntAttr("/pool", "num_slots", 1); }, {"/tokens/kv_indices", "index 0 ", "outside the pool"}},
      {[](H5Edit &e) { e.remove("/model"); }, {"/model", "missing"}},
  };
  for (size_t i = 0; i < cases.size(); ++i)
  {
    SCOPED_TRACE("case " + std::to_string(i));
    std::string const path = writeValid("attr.h5");
    {
      H5Edit e(path);
      cases[i].edit(e);
    }
    expectInputError([&] { TraceReader r(path); }, cases[i].needles);
  }
}

// ---- datasets: presence, dtype, rank --------------------------------------------------------
TEST(TraceMalformed, everyRequiredDatasetMustExist)
{
  for (char const *name : {"/steps/request_offset", "/requests/request_id", "/requests/prefix_len",
                           "/requests/tree_offset", "/requests/kv_offset", "/tree/parent", "/tree/out_cache_loc",
                           "/tokens/kv_indices"})
  {
    SCOPED_TRACE(name);
    std::string const path = writeValid("missing.h5");
    {
      H5Edit e(path);
      e.remove(name);
    }
    expectInputError([&] { TraceReader r(path); }, {name, "missing"});
  }
  // A whole group gone.
  std::string const path = writeValid("nogroup.h5");
  {
    H5Edit e(path);
    e.remove("/tree");
  }
  expectInputError([&] { TraceReader r(path); }, {"/tree/parent", "missing"});
  // Objects of the wrong kind: a group where a dataset belongs and the other way round.
  std::string const kind = writeValid("kind.h5");
  {
    H5Edit e(kind);
    e.remove("/tree/parent");
    Impl::createGroup(e.file(), "/tree/parent");
  }
  expectInputError([&] { TraceReader r(kind); }, {"/tree/parent", "is not a dataset"});
  std::string const pool = writeValid("pool.h5");
  {
    H5Edit e(pool);
    e.remove("/pool");
    int64_t const one = 1;
    e.replace("/pool", H5T_STD_I64LE, H5T_NATIVE_INT64, &one, {1});
  }
  expectInputError([&] { TraceReader r(pool); }, {"/pool", "is not a group"});
}

TEST(TraceMalformed, wrongDtypesAreRejected)
{
  TraceColumns const c = smallColumns(21);
  std::vector<int64_t> const parent64(c.parent.begin(), c.parent.end());
  std::vector<int32_t> const kv32(c.kv_indices.begin(), c.kv_indices.end());
  std::vector<double> const kvf(c.kv_indices.begin(), c.kv_indices.end());
  std::vector<uint32_t> const prefixu(c.prefix_len.begin(), c.prefix_len.end());
  hsize_t const N = c.parent.size(), K = c.kv_indices.size(), R = c.prefix_len.size();
  struct Case
  {
    std::function<void(H5Edit &)> edit;
    std::vector<std::string> needles;
  };
  std::vector<Case> const cases = {
      {[&](H5Edit &e) { e.replace("/tree/parent", H5T_STD_I64LE, H5T_NATIVE_INT64, parent64.data(), {N}); },
       {"/tree/parent", "int64", "expected int32"}},
      {[&](H5Edit &e) { e.replace("/tokens/kv_indices", H5T_STD_I32LE, H5T_NATIVE_INT32, kv32.data(), {K}); },
       {"/tokens/kv_indices", "int32", "expected int64"}},
      {[&](H5Edit &e) { e.replace("/tokens/kv_indices", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, kvf.data(), {K}); },
       {"/tokens/kv_indices", "non-integer"}},
      {[&](H5Edit &e) { e.replace("/tokens/kv_indices", H5T_STD_I64BE, H5T_NATIVE_INT64, c.kv_indices.data(), {K}); },
       {"/tokens/kv_indices", "not little-endian"}},
      {[&](H5Edit &e) { e.replace("/requests/prefix_len", H5T_STD_U32LE, H5T_NATIVE_UINT32, prefixu.data(), {R}); },
       {"/requests/prefix_len", "uint32", "expected int32"}},
      {[&](H5Edit &e) { e.replace("/tree/parent", H5T_STD_I32LE, H5T_NATIVE_INT32, c.parent.data(), {N / 1, 1}); },
       {"/tree/parent", "rank 2", "expected 1"}},
  };
  for (size_t i = 0; i < cases.size(); ++i)
  {
    SCOPED_TRACE("case " + std::to_string(i));
    std::string const path = writeValid("dtype.h5");
    {
      H5Edit e(path);
      cases[i].edit(e);
    }
    expectInputError([&] { TraceReader r(path); }, cases[i].needles);
  }
}

// ---- invariants -----------------------------------------------------------------------------
TEST(TraceMalformed, offsetsMustStartAtZeroBeMonotoneAndConsistent)
{
  TraceColumns const good = smallColumns(21);
  ASSERT_GE(good.numSteps(), 4);
  ASSERT_GE(good.numRows(), 6);
  {
    TraceColumns c = good;
    std::swap(c.request_offset[2], c.request_offset[3]);  // first decrease at index 3
    expectRejected(c, {"/steps/request_offset", idx(3), "monotone"});
  }
  {
    TraceColumns c = good;
    c.request_offset[0] = 1;
    expectRejected(c, {"/steps/request_offset", "index 0 holds 1"});
  }
  {
    TraceColumns c = good;
    c.request_offset.back() -= 1;
    expectRejected(c, {"/steps/request_offset", "(last)", "/requests/request_id"});
  }
  {
    TraceColumns c = good;
    c.tree_offset[4] = c.tree_offset[3] - 1;
    expectRejected(c, {"/requests/tree_offset", idx(4), "monotone"});
  }
  {
    TraceColumns c = good;
    c.tree_offset.back() += 1;
    expectRejected(c, {"/requests/tree_offset", "/tree/parent"});
  }
  {
    TraceColumns c = good;
    c.tree_offset[2] = c.tree_offset[1];  // row 1 has no nodes
    expectRejected(c, {"/requests/tree_offset", idx(2), "empty tree"});
  }
  {
    TraceColumns c = good;
    c.prefix_len[3] += 1;  // no longer matches kv_offset
    expectRejected(c, {"/requests/kv_offset", idx(4), "/requests/prefix_len[3]"});
  }
  {
    TraceColumns c = good;
    c.prefix_len.pop_back();
    expectRejected(c, {"/requests/prefix_len", "entries, expected"});
  }
  {
    TraceColumns c = good;
    c.out_cache_loc.pop_back();
    expectRejected(c, {"/tree/out_cache_loc", "entries, expected"});
  }
  {
    TraceColumns c = good;
    c.kv_offset.back() -= 1;
    expectRejected(c, {"/requests/kv_offset", "(last)", "/tokens/kv_indices"});
  }
}

TEST(TraceMalformed, slotsMustLieInThePoolAndNotAlias)
{
  TraceColumns const good = smallColumns(21);
  ASSERT_GT(good.kv_indices.size(), 10u);
  {
    TraceColumns c = good;
    c.kv_indices[7] = c.num_slots;  // first bad at 7
    c.kv_indices[9] = -1;
    expectRejected(c, {"/tokens/kv_indices", idx(7), "outside the pool"});
  }
  {
    TraceColumns c = good;
    c.out_cache_loc[5] = -3;
    expectRejected(c, {"/tree/out_cache_loc", idx(5), "slot -3"});
  }
  {
    // Two tree nodes of one step share a slot: the first repeat is reported.
    TraceColumns c = good;
    int64_t const r = c.request_offset[1];
    c.out_cache_loc[c.tree_offset[r] + 2] = c.out_cache_loc[c.tree_offset[r]];
    expectRejected(c, {"/tree/out_cache_loc", idx(c.tree_offset[r] + 2), "already used"});
  }
  {
    // A prefix token sits in a slot of a tree node of the same step (a common recorder mistake:
    // kv_indices taken after the draft tokens were appended).
    TraceColumns c = good;
    int64_t const s = 2, r = c.request_offset[s];
    ASSERT_GT(c.prefix_len[r], 0);
    int64_t const k = c.kv_offset[r];
    c.kv_indices[k] = c.out_cache_loc[c.tree_offset[c.request_offset[s + 1] - 1]];
    expectRejected(c, {"/tokens/kv_indices", idx(k), "also a tree node's slot"});
  }
  {
    TraceColumns c = good;
    int64_t const r = c.request_offset[3];
    ASSERT_GT(c.prefix_len[r], 2);
    int64_t const k = c.kv_offset[r] + 2;
    c.kv_indices[k] = c.kv_indices[k - 2];
    expectRejected(c, {"/tokens/kv_indices", idx(k), "already earlier in the same prefix"});
  }
  {
    // The same checks over a sparse pool (slots up to 2^35: the validator ranks the slots in use
    // instead of allocating for the whole pool), where they hold as well.
    TraceColumns c = good;
    int64_t const big = int64_t{1} << 35;
    c.num_slots = big + 1;
    for (auto &slot : c.kv_indices)
      slot = big - slot;
    for (auto &slot : c.out_cache_loc)
      slot = big - slot;
    EXPECT_NO_THROW(validateTraceColumns(c));
    int64_t const s = 2, r = c.request_offset[s];
    int64_t const k = c.kv_offset[r];
    c.kv_indices[k] = c.out_cache_loc[c.tree_offset[c.request_offset[s + 1] - 1]];
    expectRejected(c, {"/tokens/kv_indices", idx(k), "also a tree node's slot"});
  }
}

TEST(TraceMalformed, treesNeedOneRootAndParentsBeforeChildren)
{
  TraceColumns const good = smallColumns(21);
  int64_t const r = 4, base = good.tree_offset[r];
  ASSERT_GE(good.tree_offset[r + 1] - base, 4);
  {
    TraceColumns c = good;
    c.parent[base + 3] = 3;  // parent == node
    c.parent[base + 2] = 7;  // earlier, but not the first bad one? base+2 comes first
    expectRejected(c, {"/tree/parent", idx(base + 2), "node 2", "0 <= parent < 2"});
  }
  {
    TraceColumns c = good;
    c.parent[base + 3] = -1;  // a second root
    expectRejected(c, {"/tree/parent", idx(base + 3), "second root"});
  }
  {
    TraceColumns c = good;
    c.parent[base] = 0;  // root without parent -1
    expectRejected(c, {"/tree/parent", idx(base), "root", "parent -1"});
  }
  {
    TraceColumns c = good;
    c.parent[base + 1] = -7;
    expectRejected(c, {"/tree/parent", idx(base + 1), "has parent -7"});
  }
}

TEST(TraceMalformed, acceptedMustLieInOneToTreeSize)
{
  TraceColumns const good = smallColumns(21);
  {
    TraceColumns c = good;
    c.accepted[3] = 0;
    expectRejected(c, {"/requests/accepted", idx(3), "is 0", "[1, "});
  }
  {
    TraceColumns c = good;
    c.accepted[2] = static_cast<int32_t>(c.tree_offset[3] - c.tree_offset[2] + 1);
    expectRejected(c, {"/requests/accepted", idx(2), "the tree size"});
  }
  {
    TraceColumns c = good;
    c.accepted.pop_back();
    expectRejected(c, {"/requests/accepted", "entries, expected"});
  }
}

TEST(TraceMalformed, requestIdsAreUniqueWithinAStep)
{
  TraceColumns c = smallColumns(21);
  int64_t const r = c.request_offset[2];
  ASSERT_GE(c.request_offset[3] - r, 2);
  c.request_id[r + 1] = c.request_id[r];
  expectRejected(c, {"/requests/request_id", idx(r + 1), "step 2", "repeats id"});
}

TEST(TraceMalformed, valuesMustHaveTheirShapesAndBeFinite)
{
  TraceColumns const good = smallColumns(21, true);
  int64_t const H = good.shape.num_heads;
  {
    TraceColumns c = good;
    c.q.resize(c.q.size() - D_QK);  // one head row short: first dimension N - 1 ... written as fewer rows
    expectRejected(c, {"/values/q", "has shape", "expected"});
  }
  {
    TraceColumns c = good;
    c.kv.resize(c.kv.size() - 2 * D_QK);
    expectRejected(c, {"/values/kv", "has shape", "[num_slots][576]", "dimension 0"});
  }
  {
    TraceColumns c = good;
    c.out.resize(c.out.size() - H * D_V);
    expectRejected(c, {"/values/out", "has shape", "dimension 0"});
  }
  {
    TraceColumns c = good;
    c.q[3 * D_QK + 17] = BF16_POISON;
    expectRejected(c, {"/values/q", "element " + std::to_string(3 * D_QK + 17), "NaN"});
  }
  {
    TraceColumns c = good;
    int64_t const slot = c.kv_indices[0];
    c.kv[static_cast<size_t>(slot * D_QK + 4)] = 0x7f80;  // +Inf in a row a step reads
    expectRejected(c, {"/values/kv", "row " + std::to_string(slot), "Inf"});
  }
  {
    // A NaN in a pool row no step reads is allowed: recorded pools hold stale rows.
    TraceColumns c = good;
    c.kv[0] = BF16_POISON;  // slot 0 is the padding slot, never referenced
    std::string const path = tempPath("ok.h5");
    Impl::writeColumnsUnchecked(path, c);
    EXPECT_NO_THROW(TraceReader{path});
  }
  {
    std::string const path = tempPath("dtype.h5");
    writeTraceColumns(path, good);
    {
      H5Edit e(path);
      e.setStringAttr("/values/q", "dtype", "float16");
    }
    expectInputError([&] { TraceReader r(path); }, {"/values/q", "dtype", "float16"});
  }
  {
    std::string const path = tempPath("nokv.h5");
    writeTraceColumns(path, good);
    {
      H5Edit e(path);
      e.remove("/values/kv");
    }
    expectInputError([&] { TraceReader r(path); }, {"/values/kv", "missing"});
  }
  {
    std::string const path = tempPath("qtype.h5");
    writeTraceColumns(path, good);
    std::vector<int16_t> const q16(good.q.begin(), good.q.end());
    hsize_t const N = static_cast<hsize_t>(good.numNodes());
    {
      H5Edit e(path);
      e.replace("/values/q", H5T_STD_I16LE, H5T_NATIVE_INT16, q16.data(), {N, static_cast<hsize_t>(H), D_QK});
    }
    expectInputError([&] { TraceReader r(path); }, {"/values/q", "int16", "expected uint16"});
  }
}

// ---- format v2: the KV dtype, its scale and the FP8 pool -----------------------------------------
namespace
{
/// A valid v2 trace of \p dtype with recorded values (the pool quantised as the serving stacks do).
TraceColumns fp8Good(KvDtype dtype)
{
  TraceColumns c = smallColumns(21);
  c.kv_dtype = dtype;
  c.kv_scale = dtype == KvDtype::kFp8E4m3BlockScaled ? 1.0f : 0.0371f;
  addSyntheticValues(c, 120);
  return c;
}

/// Two slots some step reads, the smaller first.
std::pair<int64_t, int64_t> twoUsedSlots(TraceColumns const &c)
{
  int64_t const a = c.kv_indices.empty() ? c.out_cache_loc[1] : c.kv_indices[0];
  int64_t const b = c.out_cache_loc[0];
  return {std::min(a, b), std::max(a, b)};
}
} // namespace

TEST(TraceMalformed, fp8AttributesAreCheckedByName)
{
  struct Case
  {
    KvDtype dtype;
    std::function<void(H5Edit &)> edit;
    std::vector<std::string> needles;
  };
  KvDtype const e4m3 = KvDtype::kFp8E4m3, block = KvDtype::kFp8E4m3BlockScaled;
  std::vector<Case> const cases = {
      {e4m3, [](H5Edit &e) { e.setStringAttr("/model", "kv_dtype", "fp8-e4m3fn"); },
       {"/model attribute kv_dtype", "unknown kv dtype 'fp8-e4m3fn'", "fp8-e4m3-blockscaled"}},
      {e4m3, [](H5Edit &e) { e.setIntAttr("/", "version", 1); }, {"/model", "kv_dtype is 'fp8-e4m3'", "version 1"}},
      {e4m3, [](H5Edit &e) { e.removeAttr("/model", "kv_scale"); }, {"/model attribute kv_scale", "missing", "k_scale"}},
      {e4m3, [](H5Edit &e) { e.setDoubleAttr("/model", "kv_scale", 0.5); }, {"/model attribute kv_scale", "float32", "64-bit"}},
      {e4m3, [](H5Edit &e) { e.setStringAttr("/model", "kv_scale", "0.5"); },
       {"/model attribute kv_scale", "floating-point"}},
      {block, [](H5Edit &e) { e.setDoubleAttr("/model", "kv_scale", 1.0); },
       {"/model attribute kv_scale", "present", "fp8-e4m3-blockscaled", "block scales"}},
      // The pool dataset: its integer type, its dtype attribute and its row width are the dtype's.
      {e4m3, [](H5Edit &e) { e.setStringAttr("/values/kv", "dtype", "bfloat16"); },
       {"/values/kv", "attribute dtype is 'bfloat16'", "expected 'fp8-e4m3'"}},
      {e4m3, [](H5Edit &e) { e.setStringAttr("/values/kv", "dtype", "fp8-e5m2"); },
       {"/values/kv", "attribute dtype is 'fp8-e5m2'", "expected 'fp8-e4m3'"}},
      {e4m3, [](H5Edit &e) { e.removeAttr("/values/kv", "dtype"); }, {"/values/kv attribute dtype", "missing"}},
      {e4m3,
       [](H5Edit &e) {
         std::vector<uint16_t> const bf16(64 * D_QK, 0x3f80);  // a bf16 pool in an FP8 trace
         e.replace("/values/kv", H5T_STD_U16LE, H5T_NATIVE_UINT16, bf16.data(), {64, D_QK});
       },
       {"/values/kv", "uint16", "expected uint8"}},
      {block,
       [](H5Edit &e) {
         std::vector<uint8_t> const rows(1024 * D_QK, 0x38);  // 576-byte rows where the layout has 656
         e.replace("/values/kv", H5T_STD_U8LE, H5T_NATIVE_UINT8, rows.data(), {1024, D_QK});
         e.setStringAttr("/values/kv", "dtype", "fp8-e4m3-blockscaled");
       },
       {"/values/kv", "has shape [1024][576]", "expected [1024][656]", "fp8-e4m3-blockscaled row", "dimension 1"}},
  };
  for (size_t i = 0; i < cases.size(); ++i)
  {
    SCOPED_TRACE("case " + std::to_string(i));
    std::string const path = tempPath("fp8-attr.h5");
    TraceColumns const c = fp8Good(cases[i].dtype);
    ASSERT_EQ(c.num_slots, 1024);
    writeTraceColumns(path, c);
    {
      H5Edit e(path);
      cases[i].edit(e);
    }
    expectInputError([&] { TraceReader r(path); }, cases[i].needles);
  }
}

TEST(TraceMalformed, fp8ScaleMustBeFiniteAndPositive)
{
  for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2})
    for (float scale : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    {
      SCOPED_TRACE(toString(dtype) + " scale " + std::to_string(scale));
      TraceColumns c = fp8Good(dtype);
      c.kv_scale = scale;
      expectRejected(c, {"/model", "attribute kv_scale is", "must be finite and > 0"});
      // The writer refuses it before anything is written.
      std::string const path = tempPath("never.h5");
      expectInputError([&] { writeTraceColumns(path, c); }, {"refusing", "kv_scale"});
      EXPECT_FALSE(std::filesystem::exists(path));
    }
}

TEST(TraceMalformed, fp8PoolRowsSomeStepReadsMustBeReadable)
{
  auto byteCase = [](KvDtype dtype, int column, uint8_t byte, std::vector<std::string> needles) {
    SCOPED_TRACE(toString(dtype) + " column " + std::to_string(column) + " byte " + std::to_string(byte));
    TraceColumns c = fp8Good(dtype);
    auto const [first, second] = twoUsedSlots(c);
    size_t const row = static_cast<size_t>(kvRowBytes(dtype));
    c.kv_fp8[static_cast<size_t>(second) * row + static_cast<size_t>(column)] = byte;
    c.kv_fp8[static_cast<size_t>(first) * row + static_cast<size_t>(column)] = byte;
    needles.insert(needles.begin(), {"/values/kv", "row " + std::to_string(first) + " "});
    expectRejected(c, needles);
  };
  // e4m3fn: S.1111.111 is NaN (no infinity).
  byteCase(KvDtype::kFp8E4m3, 4, 0x7f, {"column 4 ", "0x7f", "a NaN encoding in e4m3fn"});
  byteCase(KvDtype::kFp8E4m3, 575, 0xff, {"column 575 ", "0xff", "NaN"});
  // e5m2: exponent all ones is infinity (mantissa 0) or NaN.
  byteCase(KvDtype::kFp8E5m2, 0, 0x7c, {"column 0 ", "0x7c", "infinity in e5m2"});
  byteCase(KvDtype::kFp8E5m2, 300, 0xfd, {"column 300 ", "0xfd", "a NaN encoding in e5m2"});
  byteCase(KvDtype::kFp8E4m3BlockScaled, 511, 0xff, {"column 511 ", "NaN"});
  // Block-scaled rows: a block scale that is not finite and > 0; a rope value that is NaN or Inf.
  auto put = [](std::vector<uint8_t> &bytes, size_t at, auto value) { std::memcpy(bytes.data() + at, &value, sizeof(value)); };
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
  {
    SCOPED_TRACE("block scale " + std::to_string(scale));
    TraceColumns c = fp8Good(KvDtype::kFp8E4m3BlockScaled);
    int64_t const slot = twoUsedSlots(c).first;
    put(c.kv_fp8, static_cast<size_t>(slot) * 656 + KV_BLOCKSCALED_SCALES_AT + 4 * 2, scale);
    expectRejected(c, {"/values/kv", "row " + std::to_string(slot) + " ", "block scale 2", "bytes 520..523",
                       "must be finite and > 0"});
  }
  for (uint16_t bits : {uint16_t{0x7fc0}, uint16_t{0xff80}})
  {
    SCOPED_TRACE("rope bits " + std::to_string(bits));
    TraceColumns c = fp8Good(KvDtype::kFp8E4m3BlockScaled);
    int64_t const slot = twoUsedSlots(c).first;
    put(c.kv_fp8, static_cast<size_t>(slot) * 656 + KV_BLOCKSCALED_ROPE_AT + 2 * 5, bits);
    expectRejected(c, {"/values/kv", "row " + std::to_string(slot) + " ", "column 517", "rope value 5",
                       bits == 0x7fc0 ? "NaN" : "Inf"});
  }
  // What is refused is unreadable bytes, not large ones: the largest finite values read, and so
  // does any byte in a row no step reads (slot 0 is the padding slot a recorded pool holds stale).
  for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    SCOPED_TRACE(toString(dtype));
    TraceColumns c = fp8Good(dtype);
    size_t const row = static_cast<size_t>(kvRowBytes(dtype));
    uint8_t const largest = dtype == KvDtype::kFp8E5m2 ? 0x7b : 0x7e;  // 57344, 448
    c.kv_fp8[static_cast<size_t>(twoUsedSlots(c).first) * row + 3] = largest;
    std::fill(c.kv_fp8.begin(), c.kv_fp8.begin() + static_cast<std::ptrdiff_t>(row), uint8_t{0xff});
    std::string const path = tempPath("ok.h5");
    Impl::writeColumnsUnchecked(path, c);
    EXPECT_NO_THROW(TraceReader{path});
  }
  // The pool's length is the dtype's row width times num_slots, and an FP8 pool is not also bf16.
  {
    TraceColumns c = fp8Good(KvDtype::kFp8E5m2);
    c.kv_fp8.resize(c.kv_fp8.size() - 2 * D_QK);
    expectRejected(c, {"/values/kv", "has shape", "dimension 0"});
  }
  {
    TraceColumns c = fp8Good(KvDtype::kFp8E4m3);
    c.kv.assign(static_cast<size_t>(c.num_slots) * D_QK, 0);
    expectInputError([&] { validateTraceColumns(c); }, {"/values/kv", "held as row bytes, not bf16"});
  }
}

TEST(TraceMalformed, declaredSizesAreCheckedBeforeAllocating)
{
  // A dataset can declare any size in its header; nothing of it need be stored. Each declared size
  // is refused by name before the reader allocates for it (2^40 int64 used to be a bare bad_alloc).
  for (hsize_t declared : {hsize_t{1} << 30, hsize_t{1} << 40})
  {
    std::string const path = writeValid("declared.h5");
    {
      H5Edit e(path);
      e.remove("/tokens/kv_indices");
      Impl::Hid space = Impl::ownSpace(H5Screate_simple(1, &declared, nullptr));
      Impl::Hid dcpl = Impl::ownPlist(H5Pcreate(H5P_DATASET_CREATE));
      hsize_t const chunk = 1024;
      H5Pset_chunk(dcpl.get(), 1, &chunk);
      Impl::Hid ds = Impl::ownDataset(H5Dcreate2(e.file(), "/tokens/kv_indices", H5T_STD_I64LE, space.get(),
                                                 H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
      ASSERT_TRUE(ds.valid());
    }
    for (bool isolate : {true, false})
    {
      TraceReadOptions o;
      o.isolate = isolate;
      expectInputError([&] { TraceReader r(path, o); },
                       {"declared.h5", "/tokens/kv_indices", "more than the", "/requests/kv_offset", "before reading"});
    }
  }
}

TEST(TraceMalformed, datasetsLongerThanTheirOffsetsAreRefusedBeforeInflating)
{
  // Zeros compress about 1000:1, so a small file can hold a dataset that inflates to gigabytes; the
  // offsets read before it already say how long it may be. Each indexed dataset, stored in full.
  struct Case
  {
    char const *dataset;
    hid_t type;
    char const *offsets;
  };
  for (Case const &k : {Case{"/tokens/kv_indices", H5T_STD_I64LE, "/requests/kv_offset"},
                        Case{"/tree/parent", H5T_STD_I32LE, "/requests/tree_offset"},
                        Case{"/requests/request_id", H5T_STD_I64LE, "/steps/request_offset"},
                        Case{"/requests/tree_offset", H5T_STD_I64LE, "/steps/request_offset"}})
  {
    std::string const path = writeValid("inflate.h5");
    hsize_t const n = hsize_t{1} << 22;
    {
      H5Edit e(path);
      e.remove(k.dataset);
      std::vector<int64_t> const zeros(n, 0);
      Impl::Hid space = Impl::ownSpace(H5Screate_simple(1, &n, nullptr));
      Impl::Hid dcpl = Impl::ownPlist(H5Pcreate(H5P_DATASET_CREATE));
      hsize_t const chunk = 1 << 16;
      H5Pset_chunk(dcpl.get(), 1, &chunk);
      H5Pset_deflate(dcpl.get(), 9);
      Impl::Hid ds = Impl::ownDataset(H5Dcreate2(e.file(), k.dataset, k.type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
      ASSERT_TRUE(ds.valid());
      ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
    }
    ASSERT_LT(std::filesystem::file_size(path), n / 16) << "the dataset is stored compressed";
    expectInputError([&] { TraceReader r(path); },
                     {"inflate.h5", k.dataset, "declares 4194304 entries", k.offsets, "before reading"});
  }
}

/// A filter this process registers for one write and removes before the read, standing for a
/// compression plugin the reader's HDF5 lacks (e.g. a trace written with blosc or zstd).
size_t passThroughFilter(unsigned, size_t, unsigned const *, size_t nbytes, size_t *, void **)
{
  return nbytes;
}

TEST(TraceMalformed, aFilterThisHdf5LacksIsNamedNotCalledCorrupt)
{
  constexpr H5Z_filter_t FILTER = 32123;
  H5Z_class2_t const cls{H5Z_CLASS_T_VERS, FILTER, 1, 1, "test-only filter", nullptr, nullptr, passThroughFilter};
  std::string const path = writeValid("filter.h5");
  {
    ASSERT_GE(H5Zregister(&cls), 0);
    H5Edit e(path);
    Impl::Hid parents = Impl::ownDataset(H5Dopen2(e.file(), "/tree/parent", H5P_DEFAULT));
    Impl::Hid space = Impl::ownSpace(H5Dget_space(parents.get()));
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    std::vector<int32_t> values(n);
    ASSERT_GE(H5Dread(parents.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    parents = Impl::Hid();
    e.remove("/tree/parent");
    Impl::Hid dcpl = Impl::ownPlist(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 1, &n);
    ASSERT_GE(H5Pset_filter(dcpl.get(), FILTER, H5Z_FLAG_MANDATORY, 0, nullptr), 0);
    Impl::Hid ds = Impl::ownDataset(
        H5Dcreate2(e.file(), "/tree/parent", H5T_STD_I32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    ASSERT_TRUE(ds.valid());
    ASSERT_GE(H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  ASSERT_GE(H5Zunregister(FILTER), 0);
  for (bool isolate : {true, false})
  {
    TraceReadOptions o;
    o.isolate = isolate;
    expectInputError([&] { TraceReader r(path, o); }, {"filter.h5", "/tree/parent", "HDF5 filter 32123", "does not have"});
  }
}

TEST(TraceMalformed, aCrashWhileParsingBecomesAnInputError)
{
  // The isolated reader turns a crash of the parsing child into an InputError naming the file ...
  expectInputError([] { Impl::readColumnsIsolated([]() -> TraceColumns { std::raise(SIGSEGV); return {}; }, "f.h5", 60); },
                   {"f.h5", "crashed", "signal " + std::to_string(SIGSEGV)});
  // ... passes the child's own errors through ...
  expectInputError([] { Impl::readColumnsIsolated([]() -> TraceColumns { throw InputError("f.h5: /x: bad"); }, "f.h5", 60); },
                   {"f.h5: /x: bad"});
  EXPECT_THROW(Impl::readColumnsIsolated([]() -> TraceColumns { throw RuntimeFailure("disk"); }, "f", 60), RuntimeFailure);
  // ... and returns the child's columns intact.
  TraceColumns const c = smallColumns(6, true);
  TraceColumns const back = Impl::readColumnsIsolated([&] { return c; }, "f", 60);
  EXPECT_EQ(back.kv_indices, c.kv_indices);
  EXPECT_EQ(back.parent, c.parent);
  EXPECT_EQ(back.q, c.q);
  EXPECT_EQ(back.out, c.out);
  EXPECT_EQ(back.created, c.created);
  EXPECT_EQ(back.shape.sm_scale, c.shape.sm_scale);
}

TEST(TraceMalformed, aReaderThatLoopsIsKilledAtItsDeadline)
{
  // libhdf5 1.10 loops forever on some corrupt files (a global-heap read under a string attribute):
  // the child is killed at the deadline and the file reported unreadable, in bounded time.
  auto const t0 = std::chrono::steady_clock::now();
  expectInputError(
      [] {
        Impl::readColumnsIsolated([]() -> TraceColumns { while (true) ::pause(); }, "loop.h5", 0.5);
      },
      {"loop.h5", "unreadable (reader did not finish)"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  // The default deadline grows with the file: a large valid trace is never cut short.
  EXPECT_GE(Impl::readerDeadlineSeconds(0), 10.0);
  EXPECT_GE(Impl::readerDeadlineSeconds(uint64_t{1} << 30), 256.0);
}

TEST(TraceMalformed, everyRejectionIsAnInputErrorNeverACrash)
{
  // Flip bytes all over a small valid file: every outcome is a valid read or an InputError. (Some
  // of these flips crash libhdf5 1.10 itself, e.g. in a vlen string's global heap: the isolated
  // reader reports those as InputError too.)
  std::string const path = writeValid("flip.h5");
  std::ifstream in(path, std::ios::binary);
  std::string const bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int rejected = 0, accepted = 0;
  for (size_t pos = 0; pos < bytes.size(); pos += std::max<size_t>(1, bytes.size() / 97))
  {
    std::string b = bytes;
    b[pos] = static_cast<char>(b[pos] ^ 0x5a);
    try
    {
      TraceReader r = TraceReader::fromImage(b.data(), b.size(), "flipped");
      ++accepted;
    }
    catch (InputError const &)
    {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  RecordProperty("accepted", accepted);
}
} // namespace canopy::test
