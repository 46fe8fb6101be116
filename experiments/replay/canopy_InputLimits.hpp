/// \file canopy_InputLimits.hpp
/// \brief The one validation of a run's inputs: the limits of every shape and run knob, checked with
/// the same words for a command-line flag (`--tree`) and a config key (`inputs.sweep[0].tree[1]`).
#pragma once

#include "canopy_Error.hpp"
#include "canopy_MemoryEstimate.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace canopy
{
/// \brief What a knob counts, its range, and whether 0 means "no work" (then refused as such).
struct Limit
{
  char const *what;
  int64_t lo, hi;
  bool zero_is_empty = false;
};

/// Limits shared by `canopy check` and `canopy run`. The shape limits are what the designs serve and
/// what a host can allocate for (tree: the kernels' 1024 nodes; prefix: 16M tokens per request;
/// nsplit: past 1024 splits the partials outgrow the work); a value outside is refused by name
/// before anything is allocated.
namespace limits
{
inline constexpr Limit BATCH{"requests with work", 1, 4096, true};
inline constexpr Limit PADDED{"padded rows", 0, 4096};
inline constexpr Limit HEADS{"query heads", 1, 128};
inline constexpr Limit TREE{"tree nodes per request", 1, 1024, true};
inline constexpr Limit PREFIX{"prefix tokens per request", 0, int64_t{1} << 24};
inline constexpr Limit NSPLIT{"KV splits per request (0 = auto)", 0, 1024};
inline constexpr Limit STEPS{"steps", 1, 1000000, true};
inline constexpr Limit MAX_STEPS{"steps per trace (0 = all)", 0, int64_t{1} << 40};
inline constexpr Limit REPETITIONS{"timed repetitions", 1, 1000000};
inline constexpr Limit WARMUP{"warm-up repetitions", 0, 1000000};
inline constexpr Limit BUCKET{"graph bucket (padded batch size)", 1, 4096};
} // namespace limits

/// \brief InputError "<key>: must be in [lo, hi] (<what>), got v", or "<key>: 0 <what>: nothing to
/// check" for a knob where 0 means no work.
inline void requireWithin(Limit const &l, int64_t value, std::string const &key)
{
  if (value == 0 && l.zero_is_empty)
    throw InputError(key + ": 0 " + l.what + ": nothing to check");
  if (value < l.lo || value > l.hi)
    throw InputError(key + ": must be in [" + std::to_string(l.lo) + ", " + std::to_string(l.hi) + "] (" + l.what +
                     "), got " + std::to_string(value));
}

/// \brief The same for every element of a list, naming the first bad index ("<key>[i]: ...").
template <class T>
void requireWithin(Limit const &l, std::vector<T> const &values, std::string const &key)
{
  for (size_t i = 0; i < values.size(); ++i)
    requireWithin(l, static_cast<int64_t>(values[i]), key + "[" + std::to_string(i) + "]");
}

/// \brief A finite number in [lo, hi]: NaN and infinities are refused by name (a NaN passes every
/// `<` test, so a plain range check lets it through).
inline void requireFinite(double value, double lo, double hi, std::string const &key)
{
  auto const text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (!std::isfinite(value) || value < lo || value > hi)
    throw InputError(key + ": must be a finite number in [" + text(lo) + ", " + text(hi) + "], got " + text(value));
}

/// \brief InputError when a shape needs more host memory than this machine has: "<key>: <shape> needs
/// about N bytes (G GiB) of host memory, more than the M bytes (..) this machine has", with the flag
/// that skips the check. \p bytes is estimated before any allocation, from a shape (problemHostBytes)
/// or a source's metadata (StepSource::hostBytes).
inline void requireFitsInMemory(double bytes, std::string const &key, std::string const &shape,
                                std::string const &override_flag)
{
  double const have = static_cast<double>(hostMemoryBytes());
  if (bytes <= have)
    return;
  auto const text = [](double b) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f bytes (%.1f GiB)", b, b / (1024.0 * 1024.0 * 1024.0));
    return std::string(buf);
  };
  throw InputError(key + ": " + shape + " needs about " + text(bytes) + " of host memory, more than the " + text(have) +
                   " this machine has; choose a smaller shape, or pass " + override_flag + " to try anyway");
}

/// \brief No value twice (each would get duplicate rows, and the baseline's speedups would count it
/// twice); names the first repeat.
template <class T>
void requireUnique(std::vector<T> const &values, std::string const &key)
{
  std::set<T> seen;
  for (size_t i = 0; i < values.size(); ++i)
    if (!seen.insert(values[i]).second)
    {
      std::string text;
      if constexpr (std::is_same_v<T, std::string>)
        text = "'" + values[i] + "'";
      else if constexpr (std::is_same_v<T, bool>)
        text = values[i] ? "true" : "false";
      else
        text = std::to_string(values[i]);
      throw InputError(key + "[" + std::to_string(i) + "]: " + text + " is listed twice");
    }
}
} // namespace canopy
