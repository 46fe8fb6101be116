/// \file canopy_StepCheck.hpp
/// \brief Checking one replayed step's output: against the trace's recorded output when it has
/// one, else against the fp64 reference (cached per step: every design is checked on the same one).
#pragma once

#include "canopy_Reference.hpp"
#include "canopy_StepSource.hpp"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace canopy
{
class ReferenceCache
{
public:
  /// \param numerics the references' Q and P casts (referenceAttention)
  explicit ReferenceCache(Numerics numerics = Numerics::kDequant) : _numerics(numerics) {}
  /// \param problem the step; its pool is \p src.sharedPool() when that is set
  std::vector<double> const &get(StepSource const &src, int64_t step, HostProblem const &problem);

private:
  Numerics _numerics;
  std::map<std::pair<std::string, int64_t>, std::vector<double>> _cache;
};

/// \brief What step \p step must produce: the recorded output (bf16, as doubles) when the source has
/// one, else the fp64 reference.
std::vector<double> expectedOutput(StepSource const &src, int64_t step, HostProblem const &problem, ReferenceCache &refs);

/// \brief Error of \p out (bf16 bits, at least the step's rows) for step \p step of \p src.
ErrorStats checkStepOutput(StepSource const &src, int64_t step, HostProblem const &problem,
                           std::vector<uint16_t> const &out, ReferenceCache &refs);
} // namespace canopy
