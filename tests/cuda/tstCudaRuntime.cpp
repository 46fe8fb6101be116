/// \file tstCudaRuntime.cpp
/// \brief The host CUDA API: availability never throws, buffers round-trip, global-mode capture
/// refuses a capture-unsafe call, timing gives positive samples, percentiles are nearest-rank.
#include "canopy_CudaRuntime.hpp"
#include "canopy_CudaTestUtils.hpp"

#include <gtest/gtest.h>

#include <numeric>

namespace canopy::test
{
namespace
{
TEST(CudaRuntime, availabilityAnswersWithAReason)
{
  std::string why;
  bool const ok = cuda::cudaAvailable(&why);
  if (!ok)
    EXPECT_FALSE(why.empty());
  EXPECT_EQ(cuda::cudaAvailable(nullptr), ok);
}

TEST(CudaRuntime, summarizeUsesNearestRank)
{
  std::vector<double> s(11);
  std::iota(s.begin(), s.end(), 0.0);  // 0..10, shuffled below
  std::swap(s[0], s[7]);
  std::swap(s[3], s[10]);
  cuda::TimingStats const t = cuda::summarize(s);
  EXPECT_EQ(t.samples, 11);
  EXPECT_DOUBLE_EQ(t.median_ms, 5.0);
  EXPECT_DOUBLE_EQ(t.p10_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.p90_ms, 9.0);
  EXPECT_DOUBLE_EQ(t.min_ms, 0.0);
}

TEST(CudaRuntime, deviceBufferRoundTrip)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  std::vector<int64_t> host(1000);
  std::iota(host.begin(), host.end(), -500);
  cuda::DeviceBuffer<int64_t> buf(host.size());
  buf.upload(host, stream.get());
  std::vector<int64_t> back(host.size(), 0);
  buf.download(back.data(), back.size(), stream.get());
  stream.sync();
  EXPECT_EQ(back, host);
  EXPECT_THROW(buf.upload(host.data(), host.size(), stream.get(), 1), RuntimeFailure);
}

TEST(CudaRuntime, globalCaptureRefusesAnAllocation)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  EXPECT_THROW(cuda::Graph::capture(stream.get(), [] { cuda::DeviceBuffer<int> b(16); }), RuntimeFailure);
  // A capture of stream-ordered work succeeds afterwards and replays.
  cuda::DeviceBuffer<int> b(16);
  cuda::Graph g = cuda::Graph::capture(stream.get(), [&] { b.fillBytes(1, stream.get()); });
  EXPECT_TRUE(g.valid());
  g.replay(stream.get());
  std::vector<int> back(16);
  b.download(back.data(), back.size(), stream.get());
  stream.sync();
  EXPECT_EQ(back[15], 0x01010101);
}

TEST(CudaRuntime, timedReplaysArePositive)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  cuda::DeviceBuffer<uint8_t> b(size_t(1) << 24);
  cuda::Graph g = cuda::Graph::capture(stream.get(), [&] { b.fillBytes(3, stream.get()); });
  cuda::L2Flusher flusher(size_t(1) << 22);
  cuda::TimingStats const t = cuda::timeGraph(g, stream.get(), 9, 2, &flusher);
  EXPECT_EQ(t.samples, 9);
  EXPECT_GT(t.median_ms, 0.0);
  EXPECT_LE(t.p10_ms, t.median_ms);
  EXPECT_LE(t.median_ms, t.p90_ms);
  EXPECT_FALSE(cuda::deviceInfo(0).summary().empty());
}
} // namespace
} // namespace canopy::test
