/// \file tstSoftmaxState.cu
/// \brief SoftmaxState, the online softmax the tile kernels and the split combine share, run on the
/// host (its exp2 path) against the exact fp64 softmax: the tile kernels' block protocol (lazy
/// advance, rescale by alpha, add the block's weights), fully masked blocks, and the combine's
/// two-pass merge of split parts. Host only: runs wherever nvcc builds the CUDA designs.
#include "canopy_SoftmaxState.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace
{
using canopy::cuda::Impl::NEG_INF;
using canopy::cuda::Impl::SoftmaxState;

/// The exact softmax of scaled scores \p x (log2 units, -inf = masked) over values \p v.
struct Exact
{
  double out, lse;
};
Exact exact(std::vector<float> const &x, std::vector<float> const &v)
{
  double mx = -INFINITY;
  for (float s : x)
    mx = std::max(mx, static_cast<double>(s));
  double l = 0, acc = 0;
  for (size_t i = 0; i < x.size(); ++i)
  {
    double const w = std::exp2(static_cast<double>(x[i]) - mx);
    l += w;
    acc += w * v[i];
  }
  return {acc / l, mx + std::log2(l)};
}

/// What a tile kernel does with one row: keys in blocks of \p block, the block max into advance,
/// l and the output scaled by alpha, then the block's weights 2^(x - msub) added.
struct Streamed
{
  SoftmaxState st;
  float out = 0.f;
  float max_weight = 0.f;
  int moves = 0;  ///< blocks after the first visible one whose alpha was not 1
};
Streamed streamed(std::vector<float> const &x, std::vector<float> const &v, int block)
{
  Streamed r;
  float acc = 0.f;
  bool seen = false;
  for (size_t b0 = 0; b0 < x.size(); b0 += block)
  {
    size_t const b1 = std::min(x.size(), b0 + block);
    float mx = NEG_INF;
    for (size_t i = b0; i < b1; ++i)
      mx = std::max(mx, x[i]);
    float msub = -1.f;
    float const alpha = r.st.advance(mx, msub);
    r.moves += seen && alpha != 1.f;
    seen = seen || mx != NEG_INF;
    r.st.l *= alpha;
    acc *= alpha;
    for (size_t i = b0; i < b1; ++i)
    {
      float const w = canopy::cuda::Impl::fastExp2(x[i] - msub);
      r.max_weight = std::max(r.max_weight, w);
      r.st.l += w;
      acc += w * v[i];
    }
  }
  r.out = acc / r.st.l;
  return r;
}

std::vector<float> randomValues(size_t n, std::mt19937 &rng)
{
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float &e : v)
    e = u(rng);
  return v;
}
} // namespace

TEST(SoftmaxState, lazyAdvanceMatchesTheExactSoftmax)
{
  std::mt19937 rng(20261202);
  std::normal_distribution<float> noise(0.f, 3.f);
  for (int block : {16, 32})
  {
    // A rising ramp (the reference must move, more than RESCALE_SLACK per step at times) and a
    // flat stretch after it (it must not move again: scores stay within the slack of the max).
    std::vector<float> x;
    for (int i = 0; i < 40 * block; ++i)
      x.push_back(i < 20 * block ? 0.5f * static_cast<float>(i) / block * 4.f + noise(rng) : 40.f + 0.5f * noise(rng));
    std::vector<float> const v = randomValues(x.size(), rng);
    Exact const e = exact(x, v);
    Streamed const s = streamed(x, v, block);
    SCOPED_TRACE("block " + std::to_string(block));
    EXPECT_NEAR(s.out, e.out, 1e-5 * std::max(1.0, std::abs(e.out)));
    EXPECT_NEAR(s.st.lse(), e.lse, 1e-4);
    EXPECT_GT(s.moves, 0) << "the reference max never moved on a rising ramp";
    EXPECT_LE(s.max_weight, std::exp2(SoftmaxState::RESCALE_SLACK)) << "weights must stay within 2^RESCALE_SLACK";

    // Flat scores: after the first block the reference never moves (lazy), and the result is exact.
    std::vector<float> flat(20 * block);
    for (float &f : flat)
      f = 3.f + 0.25f * noise(rng);
    std::vector<float> const fv = randomValues(flat.size(), rng);
    Streamed const sf = streamed(flat, fv, block);
    EXPECT_EQ(sf.moves, 0) << "scores within RESCALE_SLACK of the first block's max moved the reference";
    EXPECT_NEAR(sf.out, exact(flat, fv).out, 1e-5);
  }
}

TEST(SoftmaxState, maskedBlocksNeitherMoveNorPoison)
{
  SoftmaxState st;
  float msub = -1.f;
  EXPECT_EQ(st.advance(NEG_INF, msub), 1.f);  // nothing visible yet: no rescale
  EXPECT_EQ(msub, 0.f);                       // -inf - msub stays -inf, never NaN
  EXPECT_EQ(st.m, NEG_INF);
  EXPECT_EQ(canopy::cuda::Impl::fastExp2(NEG_INF - msub), 0.f);

  // Masked blocks first, then keys; and a masked block between visible ones.
  std::mt19937 rng(7);
  std::vector<float> x(5 * 16, NEG_INF);
  std::normal_distribution<float> n(0.f, 4.f);
  for (int i = 2 * 16; i < 5 * 16; ++i)
    if (i < 3 * 16 || i >= 4 * 16)
      x[i] = n(rng);
  std::vector<float> const v = randomValues(x.size(), rng);
  Streamed const s = streamed(x, v, 16);
  ASSERT_FALSE(std::isnan(s.out));
  EXPECT_NEAR(s.out, exact(x, v).out, 1e-5);
  EXPECT_NEAR(s.st.lse(), exact(x, v).lse, 1e-4);
}

TEST(SoftmaxState, mergePartMatchesTheWholeRow)
{
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 6.f);
  std::vector<float> x(4096);
  for (float &e : x)
    e = n(rng);
  std::vector<float> const v = randomValues(x.size(), rng);
  Exact const whole = exact(x, v);
  for (int parts : {1, 3, 43, 256})
  {
    // Each part as a split leaves it: its lse and its output normalised by its own sum. Parts past
    // the keys are empty (lse = -inf) and skipped, as the combine does.
    std::vector<float> lse, out;
    size_t const chunk = (x.size() + parts - 1) / parts;
    for (int p = 0; p < parts + 2; ++p)
    {
      size_t const b = std::min(x.size(), p * chunk), e = std::min(x.size(), b + chunk);
      if (b == e)
      {
        lse.push_back(NEG_INF);
        out.push_back(0.f);
        continue;
      }
      Exact const part = exact({x.begin() + b, x.begin() + e}, {v.begin() + b, v.begin() + e});
      lse.push_back(static_cast<float>(part.lse));
      out.push_back(static_cast<float>(part.out));
    }
    SoftmaxState st;
    for (float l : lse)
      st.m = std::max(st.m, l);
    float acc = 0.f;
    for (size_t p = 0; p < lse.size(); ++p)
      if (lse[p] != NEG_INF)
        acc += st.mergePart(lse[p]) * out[p];
    SCOPED_TRACE(std::to_string(parts) + " parts");
    EXPECT_NEAR(acc / st.l, whole.out, 1e-5);
    EXPECT_NEAR(st.lse(), whole.lse, 1e-4);
  }
}
