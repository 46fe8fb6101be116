/// \file canopy_TestSeed.hpp
/// \brief Seeds of the random tests: fixed by default (a failure reproduces), shifted by the
/// environment variable CANOPY_TEST_SEED when set (to explore other inputs), and printed with every
/// failing test (the shared main installs the reporter).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace canopy::test
{
inline uint64_t seedOffset()
{
  static uint64_t const offset = [] {
    char const *e = std::getenv("CANOPY_TEST_SEED");
    return e ? std::strtoull(e, nullptr, 10) : uint64_t{0};
  }();
  return offset;
}

/// Seeds handed out during the running test.
inline std::vector<uint64_t> &seedsOfThisTest()
{
  static std::vector<uint64_t> seeds;
  return seeds;
}

/// \brief The seed a test uses for its fixed seed \p fixed: \p fixed + CANOPY_TEST_SEED (0 when unset).
inline uint64_t testSeed(uint64_t fixed)
{
  uint64_t const s = fixed + seedOffset();
  seedsOfThisTest().push_back(s);
  return s;
}

/// \brief Prints the seeds a failing test drew, and how to draw others.
class SeedReporter : public ::testing::EmptyTestEventListener
{
  bool _reported = false;
  void OnTestStart(::testing::TestInfo const &) override
  {
    seedsOfThisTest().clear();
    _reported = false;
  }
  void OnTestPartResult(::testing::TestPartResult const &r) override
  {
    if (!r.failed() || _reported || seedsOfThisTest().empty())
      return;
    _reported = true;
    std::string list;
    for (uint64_t s : seedsOfThisTest())
      list += (list.empty() ? "" : ", ") + std::to_string(s);
    std::printf("[  SEEDS   ] this test drew seeds %s (CANOPY_TEST_SEED=%llu shifts every fixed seed)\n", list.c_str(),
                static_cast<unsigned long long>(seedOffset()));
  }
};
} // namespace canopy::test
