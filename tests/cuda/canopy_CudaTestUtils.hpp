/// \file canopy_CudaTestUtils.hpp
/// \brief Shared helpers of the CUDA tests: the skip guard, whether cuda-sm90 runs here, and
/// fp64-reference checks of a design.
#pragma once

#include "canopy_BatchStorage.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Reference.hpp"

#include <gtest/gtest.h>

#include <string>

/// Skips the test, saying why, on a machine where CUDA cannot be used (e.g. CI without a GPU).
#define CANOPY_REQUIRE_GPU()                                                                   \
  do                                                                                           \
  {                                                                                            \
    std::string why_;                                                                          \
    if (!canopy::cuda::cudaAvailable(&why_))                                                   \
      GTEST_SKIP() << "no usable CUDA device, GPU test skipped: " << why_;                     \
  } while (0)

namespace canopy::test
{
/// \brief Whether the current GPU runs cuda-sm90 (an sm_90 device: its cubin is sm_90a only).
inline bool sm90Here()
{
  std::string why;
  if (!cuda::cudaAvailable(&why))
    return false;
  cuda::DeviceInfo const d = cuda::deviceInfo(cuda::currentDevice());
  return d.cc_major == 9 && d.cc_minor == 0;
}

/// \brief Asserts that \p out (bf16 bits, every element) matches the fp64 reference: no NaN or
/// poison left, rel-L2 within tolerance. \p what names the case in the failure message.
inline void expectMatches(std::vector<double> const &reference, std::vector<uint16_t> const &out,
                          std::string const &what)
{
  ErrorStats const e = compareToReference(reference, out.data(), out.size());
  EXPECT_EQ(e.num_bad, 0) << what << ": " << e.num_bad << " NaN/unwritten elements, first at " << e.first_bad;
  EXPECT_LE(e.rel_l2, REL_L2_TOLERANCE) << what << ": rel-L2 " << e.rel_l2 << ", max abs " << e.max_abs;
  EXPECT_TRUE(e.pass) << what;
}
} // namespace canopy::test
