/// \file canopy_Rules.hpp
/// \brief The invariants of a verify batch as phrases, shared by every validator: the library's
/// validateMetadata (BatchStorage::setMetadata, so every design's run), the trace reader (format v1)
/// and therefore the command line. Each returns "" when the value is fine, else the reason; callers
/// prefix where the value sits (a buffer and index, or a dataset and index), so the same malformed
/// value reads the same whichever way it came in.
#pragma once

#include <cstdint>
#include <string>

namespace canopy::rules
{
/// Parent \p p of tree node \p i: node 0 is the root (-1), every other node has 0 <= parent < i.
inline std::string parentProblem(int64_t i, int64_t p)
{
  if (i == 0)
    return p == -1 ? "" : "node 0 has parent " + std::to_string(p) + ": node 0 is the root and must have parent -1";
  if (p == -1)
    return "node " + std::to_string(i) + " has parent -1: a second root; only node 0 may be a root";
  if (p < 0 || p >= i)
    return "node " + std::to_string(i) + " has parent " + std::to_string(p) + ", must satisfy 0 <= parent < " +
           std::to_string(i);
  return "";
}

/// A KV slot against a pool of \p num_slots rows.
inline std::string slotProblem(int64_t slot, int64_t num_slots)
{
  if (slot >= 0 && slot < num_slots)
    return "";
  return "holds slot " + std::to_string(slot) + ", outside the pool [0, " + std::to_string(num_slots) + ")";
}

/// Offsets: entry \p i (\p value) after entry i - 1 (\p previous) must not decrease.
inline std::string offsetProblem(int64_t i, int64_t value, int64_t previous)
{
  if (i == 0)
    return value == 0 ? "" : "index 0 holds " + std::to_string(value) + ", must be 0";
  if (value >= previous)
    return "";
  return "index " + std::to_string(i) + " holds " + std::to_string(value) + ", less than index " +
         std::to_string(i - 1) + " (" + std::to_string(previous) + "): offsets must be monotone";
}
} // namespace canopy::rules
