/// \file tstFp8Convert.cu
/// \brief The device conversion of FP8 pool bytes to bf16 (canopy_Fp8Convert.cuh, what cuda-sm90's
/// producer runs) against the exact host decoder, for all 256 bytes of each format, block scales
/// 2^-20 .. 2^20 among them: every finite value exact, subnormals and signed zeros included (a
/// flushed subnormal would be lost in a whole-kernel check's error budget). NaN and infinity
/// encodings are left out: the trace reader and the pool checks refuse them. And the other way
/// (fp8-mma's casts of Q and the softmax weights): floats and bf16 chunks to FP8 against the host
/// encoder, ties and signs included.
#include "canopy_CudaTestUtils.hpp"
#include "canopy_Fp8Convert.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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
/// floatsToFp8x2 (fp8-mma's Q and P casts) on \p n floats, two at a time as (lo, hi) pairs, and the
/// 16-byte chunk cast bf16x8ToFp8x8 on the same values rounded to bf16 first.
template <KvDtype KV>
__global__ void castAll(float const *in, int n, uint8_t *out, uint16_t const *in_bf16, uint8_t *out_bf16)
{
  int const i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 1 < n)
  {
    uint32_t const two = cuda::Impl::floatsToFp8x2<KV>(in[i], in[i + 1]);
    out[i] = static_cast<uint8_t>(two);
    out[i + 1] = static_cast<uint8_t>(two >> 8);
  }
  if (i % 8 == 0 && i + 7 < n)
  {
    uint4 const v = *reinterpret_cast<uint4 const *>(in_bf16 + i);
    *reinterpret_cast<uint2 *>(out_bf16 + i) = cuda::Impl::bf16x8ToFp8x8<KV>(v);
  }
}

/// Every finite FP8 value, the midpoints between neighbours (ties: to even), values a quarter
/// past each, and spread random values, both signs, through the device casts against the host
/// encoder; a magnitude past the largest finite value saturates on the device (the host: NaN or inf).
template <KvDtype KV>
void expectCastsMatchTheHostEncoder()
{
  Fp8Format const fmt = fp8FormatOf(KV);
  std::vector<float> finite;
  for (int byte = 0; byte < 128; ++byte)
    if (float const v = fp8ToFloat(static_cast<uint8_t>(byte), fmt); std::isfinite(v))
      finite.push_back(v);
  std::sort(finite.begin(), finite.end());
  float const largest = finite.back();
  std::vector<float> in;
  for (size_t k = 0; k < finite.size(); ++k)
  {
    in.push_back(finite[k]);
    if (k + 1 < finite.size())
    {
      float const gap = finite[k + 1] - finite[k];
      in.push_back(finite[k] + gap / 2);
      in.push_back(finite[k] + gap / 4);
      in.push_back(finite[k] + 3 * gap / 4);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> expo(-20.f, std::log2(largest));
  for (int k = 0; k < 2000; ++k)
    in.push_back(std::exp2(expo(rng)));
  in.push_back(largest * 4);  // saturates on the device
  size_t const half = in.size();
  for (size_t k = 0; k < half; ++k)
    in.push_back(-in[k]);
  while (in.size() % 8 != 0)
    in.push_back(0.f);
  std::vector<uint16_t> in_bf16(in.size());
  for (size_t k = 0; k < in.size(); ++k)
    in_bf16[k] = floatToBf16(in[k]);
  int const n = static_cast<int>(in.size());
  float *d_in = nullptr;
  uint16_t *d_bf16 = nullptr;
  uint8_t *d_out = nullptr, *d_out_bf16 = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_bf16, in.size() * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, in.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out_bf16, in.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_bf16, in_bf16.data(), in.size() * sizeof(uint16_t), cudaMemcpyHostToDevice), cudaSuccess);
  castAll<KV><<<(n / 2 + 127) / 128, 128>>>(d_in, n, d_out, d_bf16, d_out_bf16);
  std::vector<uint8_t> out(in.size()), out_bf16(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, in.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out_bf16.data(), d_out_bf16, in.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_in);
  cudaFree(d_bf16);
  cudaFree(d_out);
  cudaFree(d_out_bf16);
  auto want = [&](float x) {
    uint8_t const b = floatToFp8(x, fmt);
    if (std::isfinite(fp8ToFloat(b, fmt)))
      return b;
    return floatToFp8(std::copysign(largest, x), fmt);  // the device saturates
  };
  int bad = 0;
  for (size_t k = 0; k < in.size() && bad < 10; ++k)
  {
    float const b = bf16ToFloat(in_bf16[k]);
    if (out[k] != want(in[k]) || out_bf16[k] != want(b))
    {
      ++bad;
      ADD_FAILURE() << toString(KV) << " " << in[k] << ": 0x" << std::hex << int(out[k]) << " (from bf16 0x"
                    << int(out_bf16[k]) << ") instead of 0x" << int(want(in[k])) << " (0x" << int(want(b)) << ")";
    }
  }
}

TEST(Fp8Convert, castsToFp8RoundLikeTheHostEncoder)
{
  CANOPY_REQUIRE_GPU();
  expectCastsMatchTheHostEncoder<KvDtype::kFp8E4m3>();
  expectCastsMatchTheHostEncoder<KvDtype::kFp8E5m2>();
}
} // namespace
} // namespace canopy::test
