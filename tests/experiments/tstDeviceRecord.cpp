/// \file tstDeviceRecord.cpp
/// \brief How a results file names the GPU a row ran on (index as pinned, UUID, nvidia-smi's line),
/// and that a merge of shards from several GPUs keeps each shard's card rather than shard 0's.
#include "canopy_DeviceRecord.hpp"
#include "canopy_Error.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_Merge.hpp"
#include "canopy_ReplayEngine.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace
{
using namespace canopy;

TEST(DeviceRecord, indexIsTheEntryThatPinnedTheProcess)
{
  EXPECT_EQ(visibleDeviceIndex(nullptr, 0), "0");
  EXPECT_EQ(visibleDeviceIndex("", 1), "1");
  EXPECT_EQ(visibleDeviceIndex("5", 0), "5");
  EXPECT_EQ(visibleDeviceIndex("3,1, 7", 2), "7");
  EXPECT_EQ(visibleDeviceIndex("3,1", 1), "1");
  EXPECT_EQ(visibleDeviceIndex("GPU-8c1f0a2e-1111-2222-3333-444455556666", 0), "GPU-8c1f0a2e-1111-2222-3333-444455556666");
  // An ordinal past the list (CUDA would not number it) falls back to the ordinal itself.
  EXPECT_EQ(visibleDeviceIndex("4", 1), "1");
  EXPECT_EQ(visibleDeviceIndex("4,,6", 1), "1");
}

TEST(DeviceRecord, uuidAndRowTextAreNvidiaSmis)
{
  unsigned char const bytes[16] = {0x8c, 0x1f, 0x0a, 0x2e, 0x11, 0x22, 0x33, 0x44,
                                   0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc};
  std::string const uuid = gpuUuidText(bytes);
  EXPECT_EQ(uuid, "GPU-8c1f0a2e-1122-3344-5566-778899aabbcc");
  EXPECT_EQ(gpuRowDevice("3", "NVIDIA H100 80GB HBM3", uuid),
            "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-8c1f0a2e-1122-3344-5566-778899aabbcc)");
}

/// Three shards of a tiny host run, relabelled as if each had run on its own card of one model.
std::vector<ShardResults> shardsOnThreeGpus(std::string const &model_of_shard2)
{
  ExperimentConfig c = parseExperimentConfig(R"(
[experiment]
name = "gpus"
repetitions = 1
warmup = 0
[[inputs.sweep]]
batch = [1, 2, 3]
heads = [2]
tree = [5]
prefix = [16]
[designs]
names = ["reference"]
)",
                                             "gpus.toml");
  std::vector<ShardResults> shards;
  for (int k = 0; k < 3; ++k)
  {
    c.shard_index = k;
    c.shard_count = 3;
    ShardResults s{"shard-" + std::to_string(k), runExperiment(c)};
    std::string const uuid = "GPU-0000000" + std::to_string(k) + "-0000-0000-0000-000000000000";
    std::string const model = k == 2 ? model_of_shard2 : "NVIDIA H100 80GB HBM3";
    s.results.environment["device"] = "GPU: " + model + " (sm_90, 132 SMs)";
    s.results.environment["gpu_index"] = std::to_string(k);
    s.results.environment["gpu_uuid"] = uuid;
    s.results.environment["gpu_sm_clock_mhz"] = std::to_string(1980 - k);
    for (ResultRow &r : s.results.rows)
      r.device = gpuRowDevice(std::to_string(k), model, uuid);
    shards.push_back(s);
  }
  return shards;
}

TEST(DeviceRecord, mergeKeepsEachShardsGpu)
{
  std::vector<ShardResults> const shards = shardsOnThreeGpus("NVIDIA H100 80GB HBM3");
  ResultSet const merged = mergeShards(shards);  // one model, three cards: no refusal
  ASSERT_EQ(merged.rows.size(), 3u);
  for (ResultRow const &r : merged.rows)
    EXPECT_EQ(r.device.rfind("GPU " + std::to_string(r.order % 3) + ": NVIDIA H100", 0), 0u) << r.device;
  for (int k = 0; k < 3; ++k)
  {
    std::string const record = merged.environment.at("shard_" + std::to_string(k));
    EXPECT_NE(record.find("gpu_index=" + std::to_string(k)), std::string::npos) << record;
    EXPECT_NE(record.find("gpu_uuid=GPU-0000000" + std::to_string(k)), std::string::npos) << record;
    EXPECT_NE(record.find("gpu_sm_clock_mhz=" + std::to_string(1980 - k)), std::string::npos) << record;
  }
  // Shard 0's card would otherwise stand for every row.
  EXPECT_EQ(merged.environment.count("gpu_uuid"), 0u);
  EXPECT_EQ(merged.environment.count("gpu_index"), 0u);
  EXPECT_EQ(merged.environment.at("device"), "GPU: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)");
}

TEST(DeviceRecord, mergeOfTwoGpuModelsIsRefusedUnlessAllowed)
{
  std::vector<ShardResults> const shards = shardsOnThreeGpus("NVIDIA H200");
  try
  {
    mergeShards(shards);
    ADD_FAILURE() << "merged rows of an H100 and an H200 into one table";
  }
  catch (InputError const &e)
  {
    std::string const what = e.what();
    EXPECT_NE(what.find("shard-2: device \"GPU: NVIDIA H200"), std::string::npos) << what;
    EXPECT_NE(what.find("--allow-mixed-devices"), std::string::npos) << what;
  }
  MergeOptions allow;
  allow.allow_mixed_devices = true;
  ResultSet const merged = mergeShards(shards, allow);
  EXPECT_NE(merged.environment.at("device").find("NVIDIA H100"), std::string::npos);
  EXPECT_NE(merged.environment.at("device").find("NVIDIA H200"), std::string::npos);
  EXPECT_NE(merged.rows[2].device.find("NVIDIA H200"), std::string::npos);
}
} // namespace
