/// \file canopy_TestMain.cpp
/// \brief Shared main of the GoogleTest suites: Kokkos is initialised once around all tests, except
/// when the tests are only listed (ctest's discovery at build time): listing needs no device, so a
/// CUDA Kokkos build discovers its tests on a machine without a GPU. Every test must leave the design
/// registry as it found it (canopy_TestDesigns.hpp).
#include "canopy_Runtime.hpp"
#include "canopy_TestDesigns.hpp"
#include "canopy_TestSeed.hpp"

#include <gtest/gtest.h>

#include <memory>

int main(int argc, char **argv)
{
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new canopy::test::SeedReporter);
  ::testing::UnitTest::GetInstance()->listeners().Append(new canopy::test::RegistryLeakCheck);
  std::unique_ptr<canopy::RuntimeGuard> guard;
  if (!::testing::GTEST_FLAG(list_tests))
    guard = std::make_unique<canopy::RuntimeGuard>(argc, argv);
  return RUN_ALL_TESTS();
}
