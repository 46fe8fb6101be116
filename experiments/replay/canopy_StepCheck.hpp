/// \file canopy_StepCheck.hpp
/// \brief Checking one replayed step's output: against the trace's recorded output when it has
/// one, else against the fp64 reference of the run's numerics (cached per step and numerics: every
/// design is checked on the same one), within the bounds of the pool's dtype and the numerics.
#pragma once

#include "canopy_Reference.hpp"
#include "canopy_StepSource.hpp"

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace canopy
{
class ReferenceCache
{
public:
  /// \param problem the step; its pool is \p src.sharedPool() or sharedFp8Pool() when that is set
  std::vector<double> const &get(StepSource const &src, int64_t step, HostProblem const &problem,
                                 Numerics numerics = Numerics::kDequant);

private:
  std::map<std::tuple<std::string, int64_t, Numerics>, std::vector<double>> _cache;
};

/// \brief What step \p step must produce: the recorded output (bf16, as doubles) when the source has
/// one, else the fp64 reference.
std::vector<double> expectedOutput(StepSource const &src, int64_t step, HostProblem const &problem, ReferenceCache &refs,
                                   Numerics numerics = Numerics::kDequant);

/// \brief Error of \p out (bf16 bits, at least the step's rows) for step \p step of \p src computed
/// in \p numerics, within errorBounds(the source's KV dtype, \p numerics).
ErrorStats checkStepOutput(StepSource const &src, int64_t step, HostProblem const &problem,
                           std::vector<uint16_t> const &out, ReferenceCache &refs,
                           Numerics numerics = Numerics::kDequant);
} // namespace canopy
