/// \file tstTraceRecorder.cpp
/// \brief Files written by experiments/tools/trace_recorder.py (from numpy arrays, by
/// recorder_roundtrip.py) read back as the same steps: requests, ids, accepted lengths, SGLang
/// buffers in the full layout (mask built independently in numpy) and recorded values.
#include "canopy_TraceReader.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
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
} // namespace

TEST(TraceRecorder, recordedStepsReadBackUnchanged)
{
  std::string const dir = recorderDir();
  ASSERT_FALSE(dir.empty()) << "CANOPY_RECORDER_DIR is not set (run through ctest)";
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in.good()) << "no expected.json in " << dir;
  nlohmann::json const expected = nlohmann::json::parse(in);
  ASSERT_EQ(expected["traces"].size(), 2u);
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
