/// \file tstFp8Convert.cu
/// \brief The device conversion of FP8 pool bytes to bf16 (canopy_Fp8Convert.cuh, what cuda-sm90's
/// producer runs) against the exact host decoder, for all 256 bytes of each format, block scales
/// 2^-20 .. 2^20 among them: every finite value exact, subnormals and signed zeros included (a
/// flushed subnormal would be lost in a whole-kernel check's error budget). NaN and infinity
/// encodings are left out: the trace reader and the pool checks refuse them.
#include "canopy_CudaTestUtils.hpp"
#include "canopy_Fp8Convert.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace canopy::test
{
namespace
{
template <KvDtype KV>
__global__ void convertAll(float scale, uint16_t *out)
{
  // Thread t converts bytes 16 t .. 16 t + 15 as one 16-byte chunk, as the producer does.
  uint32_t const b = threadIdx.x * 16;
  uint4 const v = make_uint4(b | (b + 1) << 8 | (b + 2) << 16 | (b + 3) << 24,
                             (b + 4) | (b + 5) << 8 | (b + 6) << 16 | (b + 7) << 24,
                             (b + 8) | (b + 9) << 8 | (b + 10) << 16 | (b + 11) << 24,
                             (b + 12) | (b + 13) << 8 | (b + 14) << 16 | (b + 15) << 24);
  uint4 first, second;
  cuda::Impl::fp8x16ToBf16x16<KV>(v, scale, first, second);
  uint4 *const o = reinterpret_cast<uint4 *>(out + b);
  o[0] = first;
  o[1] = second;
}

template <KvDtype KV>
std::vector<uint16_t> convertOnDevice(float scale)
{
  uint16_t *d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 256 * sizeof(uint16_t)), cudaSuccess);
  convertAll<KV><<<1, 16>>>(scale, d);
  std::vector<uint16_t> h(256);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 256 * sizeof(uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  return h;
}

template <KvDtype KV>
void expectExact(float scale)
{
  Fp8Format const fmt = fp8FormatOf(KV);
  std::vector<uint16_t> const got = convertOnDevice<KV>(scale);
  int subnormals = 0;
  for (int byte = 0; byte < 256; ++byte)
  {
    float const want = fp8ToFloat(static_cast<uint8_t>(byte), fmt) * scale;
    if (!std::isfinite(want))
      continue;
    subnormals += ((byte >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)) == 0 && want != 0;
    float const have = bf16ToFloat(got[static_cast<size_t>(byte)]);
    EXPECT_EQ(std::memcmp(&have, &want, sizeof(float)), 0)
        << toString(KV) << " byte 0x" << std::hex << byte << std::dec << " scale " << scale << ": " << have
        << " instead of " << want;
  }
  EXPECT_GT(subnormals, 0);
}

TEST(Fp8Convert, everyFiniteByteIsExactOnTheDevice)
{
  CANOPY_REQUIRE_GPU();
  expectExact<KvDtype::kFp8E4m3>(1.f);
  expectExact<KvDtype::kFp8E5m2>(1.f);
  for (float scale : {0x1p-20f, 0.5f, 1.f, 2.f, 0x1p20f})
    expectExact<KvDtype::kFp8E4m3BlockScaled>(scale);
}
} // namespace
} // namespace canopy::test
