/// \file tstFp8Contract.cpp
/// \brief FP8 KV caches (docs/design.md §8): the generator writes the pool as SGLang and DeepSeek
/// V3.2 do; the reference reads it back exactly; the error contract of each numerics mode, measured
/// on an emulated tile kernel (printed: the numbers behind the bounds) and pinned from both sides; and
/// every misread of the pool (wrong scale, scale twice, e5m2 as e4m3, rope as FP8) fails the check.
#include "canopy_Bf16.hpp"
#include "canopy_Fp8.hpp"
#include "canopy_Generator.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_Reference.hpp"
#include "canopy_TestSeed.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

constexpr float SCALE = 1.0f / 32;  // a power of two: dequantised values are exact bf16 values

GeneratorOptions options(int64_t prefix, ValueMode values, KvDtype dtype, float scale = SCALE)
{
  GeneratorOptions g;
  g.batch = 2;
  g.num_heads = 2;
  g.tree_size = 17;
  g.prefix_len = prefix;
  g.ragged = true;
  g.mask_layout = MaskLayout::kParents;
  g.values = values;
  g.kv_dtype = dtype;
  g.kv_scale = scale;
  g.seed = test::testSeed(4600 + static_cast<uint64_t>(prefix));
  return g;
}

std::vector<uint16_t> asBf16(std::vector<double> const &v)
{
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = floatToBf16(static_cast<float>(v[i]));
  return out;
}

TEST(Fp8Pool, generatorQuantisesAsTheServingStacks)
{
  for (ValueMode values : {ValueMode::kRandom, ValueMode::kTreeDominant})
  {
    HostProblem const bf16 = generateProblem(options(300, values, KvDtype::kBf16));
    for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2})
    {
      HostProblem const p = generateProblem(options(300, values, dtype));
      ASSERT_EQ(p.kv_pool_fp8.size(), static_cast<size_t>(p.num_slots) * D_QK);
      EXPECT_TRUE(p.kv_pool.empty());
      EXPECT_EQ(p.kv_scale, SCALE);
      EXPECT_EQ(p.q, bf16.q);
      for (size_t i = 0; i < bf16.kv_pool.size(); ++i)  // SGLang: (x / k_scale).to(fp8)
        ASSERT_EQ(p.kv_pool_fp8[i], floatToFp8(bf16ToFloat(bf16.kv_pool[i]) / SCALE, fp8FormatOf(dtype))) << i;
    }
    HostProblem const p = generateProblem(options(300, values, KvDtype::kFp8E4m3BlockScaled));
    ASSERT_EQ(p.kv_pool_fp8.size(), static_cast<size_t>(p.num_slots) * 656);
    for (int64_t slot = 0; slot < p.num_slots; ++slot)
    {
      uint8_t const *row = p.kv_pool_fp8.data() + slot * 656;
      uint16_t const *x = bf16.kv_pool.data() + slot * D_QK;
      for (int blk = 0; blk < 4; ++blk)
      {
        float scale;
        std::memcpy(&scale, row + 512 + 4 * blk, 4);
        float amax = 0;
        for (int d = 0; d < 128; ++d)
          amax = std::max(amax, std::abs(bf16ToFloat(x[blk * 128 + d])));
        int e;
        ASSERT_EQ(std::frexp(scale, &e), 0.5f) << "a power of two";
        // 2^ceil(log2(amax / 448)): the smallest power of two that brings amax within 448.
        ASSERT_LE(amax / scale, 448.0f) << "slot " << slot << " block " << blk;
        ASSERT_GT(amax / scale, 224.0f) << "slot " << slot << " block " << blk;
        for (int d = 0; d < 128; ++d)
          ASSERT_EQ(row[blk * 128 + d], floatToFp8(bf16ToFloat(x[blk * 128 + d]) / scale, FP8_E4M3));
      }
      ASSERT_EQ(std::memcmp(row + 528, x + 512, 128), 0) << "the rope part stays bf16, slot " << slot;
    }
  }
  HostProblem p = generateProblem(options(30, ValueMode::kRandom, KvDtype::kBf16));
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_THROW(quantisePool(p, KvDtype::kFp8E4m3, bad), InputError) << bad;
}

/// The bf16 pool of the values an FP8 pool holds, decoded here by hand (the test's own reading of
/// the layouts, not the library's).
HostProblem dequantisedByHand(HostProblem const &p)
{
  HostProblem out = p;
  out.kv_dtype = KvDtype::kBf16;
  out.kv_pool_fp8.clear();
  out.kv_pool.resize(static_cast<size_t>(p.num_slots) * D_QK);
  int const width = p.kv_dtype == KvDtype::kFp8E4m3BlockScaled ? 656 : 576;
  for (int64_t slot = 0; slot < p.num_slots; ++slot)
  {
    uint8_t const *row = p.kv_pool_fp8.data() + slot * width;
    for (int d = 0; d < D_QK; ++d)
    {
      float v;
      if (p.kv_dtype == KvDtype::kFp8E5m2)
        v = fp8ToFloat(row[d], FP8_E5M2) * p.kv_scale;
      else if (p.kv_dtype == KvDtype::kFp8E4m3)
        v = fp8ToFloat(row[d], FP8_E4M3) * p.kv_scale;
      else if (d < 512)
      {
        float scale;
        std::memcpy(&scale, row + 512 + 4 * (d / 128), 4);
        v = fp8ToFloat(row[d], FP8_E4M3) * scale;
      }
      else
      {
        uint16_t bits;
        std::memcpy(&bits, row + 528 + 2 * (d - 512), 2);
        v = bf16ToFloat(bits);
      }
      out.kv_pool[slot * D_QK + d] = floatToBf16(v);
      EXPECT_EQ(bf16ToFloat(out.kv_pool[slot * D_QK + d]), v) << "exact in bf16";
    }
  }
  return out;
}

TEST(Fp8Pool, referenceReadsThePoolExactly)
{
  for (KvDtype dtype : {KvDtype::kFp8E4m3, KvDtype::kFp8E5m2, KvDtype::kFp8E4m3BlockScaled})
  {
    HostProblem const p = generateProblem(options(200, ValueMode::kTreeDominant, dtype));
    HostProblem const by_hand = dequantisedByHand(p);
    EXPECT_EQ(referenceAttention(p), referenceAttention(by_hand)) << toString(dtype);
    if (dtype == KvDtype::kFp8E4m3BlockScaled)
      EXPECT_THROW(referenceAttention(p, Numerics::kFp8Mma), InputError) << "fp8-mma is undefined for the V3.2 layout";
    else
      EXPECT_NE(referenceAttention(p, Numerics::kFp8Mma), referenceAttention(by_hand)) << "fp8-mma casts Q and P";
  }
}

/// A tile kernel's numerics on the host: keys in tiles of 64 (the prefix, then the visible tree),
/// fp32 scores and accumulators, an online softmax whose weights are cast relative to the running
/// max (to bf16 in dequant numerics, to the pool's FP8 type in fp8-mma, as SGLang's kernels do; the
/// denominator sums them before the cast), K/V dequantised to bf16 (dequant) or read as FP8 times
/// the scale (fp8-mma), the output rounded to bf16.
std::vector<uint16_t> emulatedKernel(HostProblem const &p, Numerics numerics)
{
  BatchRef const r = hostRef(p);
  bool const fp8 = numerics == Numerics::kFp8Mma;
  Fp8Format const fmt = fp8FormatOf(p.kv_dtype);
  auto const castFp8 = [&](float x) { return fp8ToFloat(floatToFp8(x, fmt), fmt); };
  int const H = p.shape.num_heads;
  std::vector<uint16_t> out(p.outElements());
  std::vector<double> row(D_QK);
  for (int b = 0; b < p.meta.batchSize(); ++b)
  {
    int64_t const P = p.meta.prefixLen(b), T = p.meta.treeSize(b), n0 = p.meta.qo_indptr[b];
    std::vector<float> kv(static_cast<size_t>((P + T) * D_QK));
    for (int64_t k = 0; k < P + T; ++k)
    {
      int64_t const slot = k < P ? p.meta.kv_indices[p.meta.kv_indptr[b] + k] : p.meta.out_cache_loc[n0 + k - P];
      dequantiseRow(r, slot, row.data());
      for (int d = 0; d < D_QK; ++d)
        kv[k * D_QK + d] = fp8 ? static_cast<float>(row[d]) : bf16ToFloat(floatToBf16(static_cast<float>(row[d])));
    }
    for (int64_t i = 0; i < T; ++i)
      for (int h = 0; h < H; ++h)
      {
        float q[D_QK];
        for (int d = 0; d < D_QK; ++d)
        {
          float const x = bf16ToFloat(p.q[((n0 + i) * H + h) * D_QK + d]);
          q[d] = fp8 ? castFp8(x) : x;
        }
        std::vector<int64_t> keys;
        for (int64_t k = 0; k < P + T; ++k)
        {
          bool vis = k < P;
          for (int64_t a = i; !vis && a >= 0; a = p.meta.tree_parent[n0 + a])
            vis = a == k - P;
          if (vis)
            keys.push_back(k);
        }
        float m = -1e30f, l = 0;
        std::vector<float> acc(D_V, 0.0f);
        for (size_t t0 = 0; t0 < keys.size(); t0 += 64)
        {
          size_t const t1 = std::min(keys.size(), t0 + 64);
          std::vector<float> s(t1 - t0);
          float tile_max = -1e30f;
          for (size_t t = t0; t < t1; ++t)
          {
            float dot = 0;
            for (int d = 0; d < D_QK; ++d)
              dot += q[d] * kv[keys[t] * D_QK + d];
            s[t - t0] = dot * static_cast<float>(p.shape.sm_scale);
            tile_max = std::max(tile_max, s[t - t0]);
          }
          float const m_new = std::max(m, tile_max);
          float const rescale = std::exp(m - m_new);
          l *= rescale;
          for (float &a : acc)
            a *= rescale;
          for (size_t t = t0; t < t1; ++t)
          {
            float const w = std::exp(s[t - t0] - m_new);
            l += w;
            float const pw = fp8 ? castFp8(w) : bf16ToFloat(floatToBf16(w));
            for (int d = 0; d < D_V; ++d)
              acc[d] += pw * kv[keys[t] * D_QK + d];
          }
          m = m_new;
        }
        for (int d = 0; d < D_V; ++d)
          out[((n0 + i) * H + h) * D_V + d] = floatToBf16(acc[d] / l);
      }
  }
  return out;
}

struct Case
{
  KvDtype dtype;
  Numerics numerics;
};
Case const CASES[] = {{KvDtype::kFp8E4m3, Numerics::kDequant},
                      {KvDtype::kFp8E5m2, Numerics::kDequant},
                      {KvDtype::kFp8E4m3BlockScaled, Numerics::kDequant},
                      {KvDtype::kFp8E4m3, Numerics::kFp8Mma},
                      {KvDtype::kFp8E5m2, Numerics::kFp8Mma}};

// The measurement behind the bounds of docs/design.md §8: the emulated kernel against the
// reference of its mode, at prefix lengths from short to long, both value modes, a non-power-of-two
// scale too. Printed as the worst rel-L2 and worst row per mode; every case within its mode's bounds.
TEST(Fp8Contract, measuredErrorOfATileKernelIsWithinTheBounds)
{
  for (Case const &c : CASES)
  {
    double worst = 0, worst_row = 0;
    for (int64_t P : {16, 700, 3000})
      for (ValueMode values : {ValueMode::kRandom, ValueMode::kTreeDominant})
        for (float scale : {SCALE, 0.0371f})
        {
          GeneratorOptions g = options(P, values, c.dtype, scale);
          g.seed += static_cast<uint64_t>(scale * 1e4);  // each scale its own values
          HostProblem const p = generateProblem(g);
          std::vector<double> const ref = referenceAttention(p, c.numerics);
          std::vector<uint16_t> const out = emulatedKernel(p, c.numerics);
          ErrorStats const e = compareToReference(ref, out.data(), out.size(), errorBounds(c.dtype, c.numerics));
          EXPECT_TRUE(e.pass) << toString(c.dtype) << " " << toString(c.numerics) << " P=" << P << " "
                              << toString(values) << ": rel-L2 " << e.rel_l2 << ", worst row " << e.worst_row_rel_l2;
          std::printf("  %-22s %-8s P=%-5lld %-14s scale %-8g rel-L2 %.2e  worst row %.2e\n", toString(c.dtype).c_str(),
                      toString(c.numerics).c_str(), static_cast<long long>(P), toString(values).c_str(),
                      static_cast<double>(scale), e.rel_l2, e.worst_row_rel_l2);
          worst = std::max(worst, e.rel_l2);
          worst_row = std::max(worst_row, e.worst_row_rel_l2);
        }
    std::printf("%-22s %-8s worst rel-L2 %.2e  worst row %.2e\n", toString(c.dtype).c_str(),
                toString(c.numerics).c_str(), worst, worst_row);
  }
}

// Each misread of the pool fails the check of its mode, under both value modes at every prefix
// length; the correct reference, rounded to bf16, passes.
TEST(Fp8Contract, everyMisreadOfThePoolFails)
{
  struct Misread
  {
    Mutation mutation;
    KvDtype dtype;
  };
  Misread const misreads[] = {{Mutation::kKvScaleWrong, KvDtype::kFp8E4m3}, {Mutation::kKvScaleWrong, KvDtype::kFp8E5m2},
                              {Mutation::kKvScaleTwice, KvDtype::kFp8E4m3}, {Mutation::kKvScaleTwice, KvDtype::kFp8E5m2},
                              {Mutation::kE5m2AsE4m3, KvDtype::kFp8E5m2},  {Mutation::kRopeAsFp8, KvDtype::kFp8E4m3BlockScaled}};
  for (Misread const &m : misreads)
    for (Numerics numerics : {Numerics::kDequant, Numerics::kFp8Mma})
    {
      if (!numericsUndefinedFor(m.dtype, numerics).empty())
        continue;
      for (int64_t P : {16, 2000})
        for (ValueMode values : {ValueMode::kRandom, ValueMode::kTreeDominant})
        {
          HostProblem const p = generateProblem(options(P, values, m.dtype, 0.0371f));
          std::string const what = toString(m.mutation) + " " + toString(m.dtype) + " " + toString(numerics) +
                                   " P=" + std::to_string(P) + " " + toString(values);
          std::vector<double> const ref = referenceAttention(p, numerics);
          ErrorBounds const bound = errorBounds(m.dtype, numerics);
          EXPECT_TRUE(compareToReference(ref, asBf16(ref).data(), ref.size(), bound).pass) << what;
          std::vector<double> const wrong = mutatedReference(p, m.mutation, numerics);
          ErrorStats const e = compareToReference(ref, asBf16(wrong).data(), ref.size(), bound);
          std::printf("%-48s rel-L2 %.2e  worst row %.2e\n", what.c_str(), e.rel_l2, e.worst_row_rel_l2);
          EXPECT_FALSE(e.pass) << what << " passes: rel-L2 " << e.rel_l2 << ", worst row " << e.worst_row_rel_l2;
        }
    }
  HostProblem const bf16 = generateProblem(options(16, ValueMode::kRandom, KvDtype::kBf16));
  EXPECT_THROW(mutatedReference(bf16, Mutation::kKvScaleTwice), InputError);
  EXPECT_THROW(mutatedReference(bf16, Mutation::kRopeAsFp8), InputError);
  EXPECT_THROW(referenceAttention(bf16, Numerics::kFp8Mma), InputError);
}
// The loosest bounds (e5m2 in fp8-mma) still reject a wrong visible set under tree-dominant values.
TEST(Fp8Contract, fp8MmaBoundsStillRejectWrongVisibility)
{
  for (int64_t P : {16, 2000})
  {
    HostProblem const p = generateProblem(options(P, ValueMode::kTreeDominant, KvDtype::kFp8E5m2));
    std::vector<double> const ref = referenceAttention(p, Numerics::kFp8Mma);
    ErrorBounds const bound = errorBounds(KvDtype::kFp8E5m2, Numerics::kFp8Mma);
    for (Mutation m : {Mutation::kSelfOnly, Mutation::kCausalTree, Mutation::kSiblingsVisible})
    {
      ErrorStats const e =
          compareToReference(ref, asBf16(mutatedReference(p, m, Numerics::kFp8Mma)).data(), ref.size(), bound);
      EXPECT_FALSE(e.pass) << toString(m) << " P=" << P << ": worst row " << e.worst_row_rel_l2;
    }
  }
}
} // namespace
