/// \file canopy_Statistics.hpp
/// \brief The one definition of order statistics in Canopy: the q-quantile of n sorted samples is
/// linear between the closest ranks at position q (n - 1) (numpy's default, Hyndman-Fan type 7).
/// Every median, p10 and p90 the project reports (canopy run, the microbenchmarks, the PyTorch
/// peer, trace statistics) is computed this way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace canopy
{
struct Summary
{
  size_t n = 0;
  double median = NAN, p10 = NAN, p90 = NAN, min = NAN, max = NAN, mean = NAN;
};

/// \brief q-quantile (0 <= q <= 1) of sorted samples, linear between closest ranks (numpy's default).
inline double quantileSorted(std::vector<double> const &s, double q)
{
  if (s.empty())
    return NAN;
  double const pos = q * static_cast<double>(s.size() - 1);
  size_t const lo = static_cast<size_t>(std::floor(pos));
  size_t const hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

inline Summary summarize(std::vector<double> samples)
{
  Summary r;
  r.n = samples.size();
  if (samples.empty())
    return r;
  std::sort(samples.begin(), samples.end());
  r.median = quantileSorted(samples, 0.5);
  r.p10 = quantileSorted(samples, 0.1);
  r.p90 = quantileSorted(samples, 0.9);
  r.min = samples.front();
  r.max = samples.back();
  double sum = 0;
  for (double x : samples)
    sum += x;
  r.mean = sum / static_cast<double>(samples.size());
  return r;
}
} // namespace canopy
