/// \file tstCudaRuntime.cpp
/// \brief The host CUDA API: availability never throws, buffers round-trip, global-mode capture
/// refuses a capture-unsafe call; the measuring tools (experiments/lab): timing gives positive
/// samples, the mma.sync peak launcher refuses bad sizes and measures a rate below what the clock
/// allows.
#include "canopy_CudaRuntime.hpp"
#include "canopy_CudaTestUtils.hpp"
#include "canopy_GpuLab.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>


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
  Summary const t = cuda::timeGraph(g, stream.get(), 9, 2, &flusher);
  EXPECT_EQ(t.n, 9u);
  EXPECT_GT(t.median, 0.0);
  EXPECT_LE(t.p10, t.median);
  EXPECT_LE(t.median, t.p90);
  EXPECT_FALSE(cuda::deviceInfo(0).summary().empty());
}

TEST(CudaRuntime, timedLaunchesKeepTheUntimedWorkOutsideTheSamples)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  cuda::DeviceBuffer<uint8_t> big(size_t(1) << 28), small(4096);
  // The one timed-launch loop of canopy run and the peaks: before() runs first, untimed. A 256 MB
  // memset as before() and a 4 KB one as the launch: the samples must be the small one's time.
  int before = 0, launches = 0;
  std::vector<double> const ms = cuda::timedLaunchesMs(
      stream.get(), 5, "test",
      [&] {
        ++before;
        big.fillBytes(before, stream.get());
      },
      [&] {
        ++launches;
        small.fillBytes(launches, stream.get());
      });
  ASSERT_EQ(ms.size(), 5u);
  EXPECT_EQ(before, 5);
  EXPECT_EQ(launches, 5);
  for (double x : ms)
    EXPECT_GT(x, 0.0);
  double const big_ms = summarize(cuda::timedLaunchesMs(stream.get(), 5, "test", [] {}, [&] {
                                    big.fillBytes(7, stream.get());
                                  })).median;
  EXPECT_LT(summarize(ms).median, 0.5 * big_ms) << "the untimed work leaked into the samples";
}

TEST(CudaRuntime, mmaSyncPeakRefusesBadSizes)
{
  // Checked before any launch, so this runs without a GPU too.
  for (auto feed : {cuda::MmaFeed::kRegisters, cuda::MmaFeed::kLdmatrix, cuda::MmaFeed::kLdmatrixWide})
  {
    size_t const smem = cuda::mmaSyncPeakSharedBytes(feed);
    EXPECT_EQ(cuda::launchMmaSyncPeak(feed, 0, 8, 1, smem, nullptr, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cuda::launchMmaSyncPeak(feed, 1, 33, 1, smem, nullptr, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cuda::launchMmaSyncPeak(feed, 1, 8, 0, smem, nullptr, nullptr), cudaErrorInvalidValue);
  }
  EXPECT_EQ(cuda::launchMmaSyncPeak(cuda::MmaFeed::kLdmatrix, 1, 8, 1, 16, nullptr, nullptr), cudaErrorInvalidValue);
  // 2 * m16n8k16 = 4096 FLOPs per mma; 8 chains from registers, 72 mma per ldmatrix-fed round.
  EXPECT_EQ(cuda::mmaSyncPeakFlops(cuda::MmaFeed::kRegisters, 3, 2, 5), int64_t(4096) * 8 * 5 * 2 * 3);
  EXPECT_EQ(cuda::mmaSyncPeakFlops(cuda::MmaFeed::kLdmatrix, 1, 1, 1), int64_t(4096) * 72);
  EXPECT_EQ(cuda::mmaSyncPeakFlops(cuda::MmaFeed::kLdmatrixWide, 1, 1, 1), int64_t(4096) * 72);
}

TEST(CudaRuntime, mmaSyncPeakIsBelowTheClockBound)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  cuda::DeviceInfo const dev = cuda::deviceInfo(0);
  // No GPU so far does more than 4 dense bf16 m16n8k16 per SM and cycle (16 K FLOP/clk/SM, 4x
  // Hopper's wgmma rate): a rate above that means the kernel was optimised away or mis-counted.
  double const ceiling = 16384.0 * dev.sm_count * dev.sm_clock_khz * 1e3;
  for (auto feed : {cuda::MmaFeed::kRegisters, cuda::MmaFeed::kLdmatrix, cuda::MmaFeed::kLdmatrixWide})
  {
    double const f = cuda::measureMmaSyncFlops(stream.get(), feed, 8, 2e-4, 3);
    EXPECT_GT(f, 0.0);
    EXPECT_LT(f, ceiling);
  }
}

TEST(CudaRuntime, launchFloorRefusesBadSizes)
{
  // Checked before any launch, so this runs without a GPU too.
  int sink = 0;
  EXPECT_EQ(cuda::launchFloorGrid(0, 128, 4, &sink, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchFloorGrid(1, 0, 4, &sink, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchFloorGrid(1, 1025, 4, &sink, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchFloorGrid(1, 128, 0, &sink, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchFloorGrid(1, 128, 4, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST(CudaRuntime, launchFloorIsAFewMicroseconds)
{
  CANOPY_REQUIRE_GPU();
  cuda::Stream stream;
  cuda::LaunchFloor const f = cuda::measureLaunchFloor(stream.get(), 5);
  EXPECT_EQ(f.blocks, cuda::deviceInfo(0).sm_count);
  EXPECT_EQ(f.samples, 5);
  // An empty grid's graph replay takes microseconds; a floor of 0 or of a millisecond means the
  // timing or the graph is wrong.
  EXPECT_GT(f.split_us, 0.5);
  EXPECT_LT(f.split_us, 1000.0);
  EXPECT_GT(f.split_combine_us, 0.5);
  EXPECT_LT(f.split_combine_us, 1000.0);
}
} // namespace
} // namespace canopy::test
