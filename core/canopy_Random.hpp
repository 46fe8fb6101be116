/// \file canopy_Random.hpp
/// \brief A tiny, portable, seeded generator (SplitMix64): identical streams on every platform,
/// unlike std::uniform_*_distribution whose output is implementation-defined.
#pragma once

#include <cmath>
#include <cstdint>

namespace canopy
{
class SplitMix64
{
public:
  explicit SplitMix64(uint64_t seed) : _state(seed) {}
  uint64_t next()
  {
    uint64_t z = (_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// uniform in [0, 1)
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  /// uniform in [-1, 1)
  float uniformSigned() { return static_cast<float>(2.0 * uniform() - 1.0); }
  /// uniform integer in [0, n)
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  /// standard exponential
  double exponential() { return -std::log1p(-uniform()); }
  /// standard normal (Box-Muller)
  double normal()
  {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
  }

private:
  uint64_t _state;
};
} // namespace canopy
