/// \file tstTraceRecorder.cpp
/// \brief Files written by experiments/tools/trace_recorder.py (from numpy arrays, by
/// recorder_roundtrip.py) read back as the same steps: requests, ids, accepted lengths, SGLang
/// buffers in the full layout (mask built independently in numpy) and recorded values. FP8 pools
/// recorded from SGLang-shaped buffers come back as the same bytes and scale, and the reference on
/// the read-back trace equals, bit for bit, the reference on the original buffers.
#include "canopy_Reference.hpp"
#include "canopy_TraceReader.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>

namespace canopy::test
{
namespace
{
std::string recorderDir()
{
  char const *dir = std::getenv("CANOPY_RECORDER_DIR");
  return dir ? dir : "";
}

template <class T>
std::vector<T> vec(nlohmann::json const &j)
{
  return j.get<std::vector<T>>();
}

/// Step \p s of an expected.json trace as a problem built from the buffers the recorder was given
/// (not from the file): the requests, q, the pool rows the steps read (others 0) and the scale.
HostProblem originalProblem(nlohmann::json const &t, int64_t s, int64_t node0)
{
  HostProblem p;
  p.shape.num_heads = t["num_heads"].get<int>();
  p.shape.sm_scale = t["sm_scale"].get<double>();
  p.num_slots = t["num_slots"].get<int64_t>();
  std::vector<RequestSpec> specs;
  for (auto const &want : t["steps"][static_cast<size_t>(s)]["requests"])
    specs.push_back({vec<int64_t>(want["prefix_slots"]), vec<int32_t>(want["parent"]), vec<int64_t>(want["tree_slots"])});
  p.meta = buildMetadata(specs, MaskLayout::kParents);
  std::vector<uint16_t> const q = vec<uint16_t>(t["q"]);
  size_t const row = static_cast<size_t>(p.shape.num_heads) * D_QK;
  p.q.assign(q.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(node0) * row),
             q.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(node0 + p.meta.numNodes()) * row));
  p.kv_dtype = parseKvDtype(t["kv_dtype"].get<std::string>());
  if (!t["kv_scale_bits"].is_null())
  {
    uint32_t const bits = t["kv_scale_bits"].get<uint32_t>();
    std::memcpy(&p.kv_scale, &bits, sizeof(bits));
  }
  size_t const bytes = static_cast<size_t>(kvRowBytes(p.kv_dtype));
  p.kv_pool_fp8.assign(static_cast<size_t>(p.num_slots) * bytes, 0);
  for (auto const &[slot, rowj] : t["kv_rows"].items())
  {
    std::vector<uint8_t> const want = vec<uint8_t>(rowj);
    std::copy(want.begin(), want.end(), p.kv_pool_fp8.begin() + static_cast<std::ptrdiff_t>(std::stoul(slot) * bytes));
  }
  return p;
}
} // namespace

TEST(TraceRecorder, recordedStepsReadBackUnchanged)
{
  std::string const dir = recorderDir();
  ASSERT_FALSE(dir.empty()) << "CANOPY_RECORDER_DIR is not set (run through ctest)";
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in.good()) << "no expected.json in " << dir;
  nlohmann::json const expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected["traces"].size(), 5u);
  for (auto const &t : expected["traces"])
  {
    std::string const file = dir + "/" + t["file"].get<std::string>();
    SCOPED_TRACE(file);
    TraceReader const r(file);
    EXPECT_EQ(r.info().source, t["source"].get<std::string>());
    EXPECT_EQ(r.info().shape.num_heads, t["num_heads"].get<int>());
    EXPECT_EQ(r.info().num_slots, t["num_slots"].get<int64_t>());
    ASSERT_EQ(r.numSteps(), static_cast<int64_t>(t["steps"].size()));
    for (int64_t s = 0; s < r.numSteps(); ++s)
    {
      auto const &step = t["steps"][static_cast<size_t>(s)];
      auto const got = r.stepRequests(s);
      ASSERT_EQ(got.size(), step["requests"].size()) << "step " << s << " (padded rows are dropped)";
      for (size_t i = 0; i < got.size(); ++i)
      {
        auto const &want = step["requests"][i];
        EXPECT_EQ(got[i].request_id, want["id"].get<int64_t>());
        EXPECT_EQ(got[i].spec.prefix_slots, vec<int64_t>(want["prefix_slots"]));
        EXPECT_EQ(got[i].spec.parent, vec<int32_t>(want["parent"]));
        EXPECT_EQ(got[i].spec.tree_slots, vec<int64_t>(want["tree_slots"]));
        if (r.info().has_accepted)
          EXPECT_EQ(got[i].accepted, want["accepted"].get<int32_t>());
      }
      BatchMetadata const m = r.stepMetadata(s, MaskLayout::kFull);
      auto const &full = step["full"];
      EXPECT_EQ(m.kv_indptr, vec<int32_t>(full["kv_indptr"]));
      EXPECT_EQ(m.kv_indices, vec<int64_t>(full["kv_indices"]));
      EXPECT_EQ(m.qo_indptr, vec<int64_t>(full["qo_indptr"]));
      EXPECT_EQ(m.out_cache_loc, vec<int64_t>(full["out_cache_loc"]));
      EXPECT_EQ(m.custom_mask, vec<uint8_t>(full["custom_mask"]));
      EXPECT_EQ(m.mask_indptr, vec<int64_t>(full["mask_indptr"]));
    }
    if (!t.contains("q"))
    {
      EXPECT_FALSE(r.info().has_values);
      EXPECT_TRUE(r.info().has_accepted);
      continue;
    }
    ASSERT_TRUE(r.info().has_values);
    ASSERT_TRUE(r.info().has_expected_out);
    EXPECT_EQ(r.columns().q, vec<uint16_t>(t["q"]));
    EXPECT_EQ(r.columns().out, vec<uint16_t>(t["out"]));
    HostProblem const p = r.stepProblem(0, MaskLayout::kParents, 1);
    ASSERT_FALSE(t["kv_rows"].empty()) << "expected.json holds no pool rows to compare";
    if (t.contains("kv_dtype"))
    {
      KvDtype const dtype = parseKvDtype(t["kv_dtype"].get<std::string>());
      EXPECT_EQ(r.info().format_version, 2);
      EXPECT_EQ(r.info().kv_dtype, dtype);
      size_t const bytes = static_cast<size_t>(kvRowBytes(dtype));
      for (auto const &[slot, row] : t["kv_rows"].items())
      {
        std::vector<uint8_t> const want = vec<uint8_t>(row);
        ASSERT_EQ(want.size(), bytes);
        EXPECT_TRUE(std::equal(want.begin(), want.end(),
                               p.kv_pool_fp8.begin() + static_cast<std::ptrdiff_t>(std::stoul(slot) * bytes)))
            << "pool row " << slot;
      }
      int64_t node0 = 0;
      for (int64_t s = 0; s < r.numSteps(); ++s)
      {
        SCOPED_TRACE("step " + std::to_string(s));
        HostProblem const got = r.stepProblem(s, MaskLayout::kParents, 1);
        HostProblem const original = originalProblem(t, s, node0);
        node0 += original.meta.numNodes();
        uint32_t got_bits = 0, want_bits = 0;
        std::memcpy(&got_bits, &got.kv_scale, 4);
        std::memcpy(&want_bits, &original.kv_scale, 4);
        EXPECT_EQ(got_bits, want_bits) << "kv_scale " << got.kv_scale << " vs " << original.kv_scale;
        EXPECT_EQ(got.kv_dtype, dtype);
        std::vector<double> const ref = referenceAttention(got);
        std::vector<double> const want = referenceAttention(original);
        ASSERT_EQ(ref.size(), want.size());
        EXPECT_EQ(std::memcmp(ref.data(), want.data(), ref.size() * sizeof(double)), 0)
            << "the reference on the read-back trace differs from the one on the recorded buffers";
        // The output recorded beside it is the reference computed in numpy on the original
        // buffers (its own FP8 decoding): the two references agree within bf16 rounding ...
        std::vector<uint16_t> const out = r.expectedOutput(s);
        ErrorStats const e = compareToReference(ref, out.data(), out.size(), errorBounds(dtype, Numerics::kDequant));
        EXPECT_TRUE(e.pass) << "rel L2 " << e.rel_l2;
        EXPECT_LT(e.rel_l2, 4e-3);
        // ... and the comparison can fail: the pool misread as the mutations misread it does.
        Mutation const misread = dtype == KvDtype::kFp8E4m3BlockScaled ? Mutation::kRopeAsFp8 : Mutation::kKvScaleWrong;
        EXPECT_FALSE(compareToReference(mutatedReference(got, misread), out.data(), out.size()).pass)
            << toString(misread);
      }
      continue;
    }
    for (auto const &[slot, row] : t["kv_rows"].items())
    {
      size_t const s = std::stoul(slot);
      std::vector<uint16_t> const want = vec<uint16_t>(row);
      ASSERT_EQ(want.size(), static_cast<size_t>(D_QK));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), p.kv_pool.begin() + static_cast<std::ptrdiff_t>(s * D_QK)))
          << "pool row " << s;
    }
  }
}
} // namespace canopy::test
