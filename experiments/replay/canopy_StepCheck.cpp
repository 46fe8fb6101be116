#include "canopy_StepCheck.hpp"

#include "canopy_Bf16.hpp"

#include <algorithm>

namespace canopy
{
std::vector<double> const &ReferenceCache::get(StepSource const &src, int64_t step, HostProblem const &problem)
{
  auto key = std::make_pair(src.label(), step);
  auto it = _cache.find(key);
  if (it == _cache.end())
  {
    BatchRef ref = hostRef(problem);
    if (std::vector<uint16_t> const *pool = src.sharedPool(); pool && problem.kv_pool.empty())
    {
      ref.kv_pool = pool->data();
      ref.num_slots = static_cast<int64_t>(pool->size() / D_QK);
    }
    it = _cache.emplace(key, referenceAttention(ref, _numerics)).first;
  }
  return it->second;
}

std::vector<double> expectedOutput(StepSource const &src, int64_t step, HostProblem const &problem, ReferenceCache &refs)
{
  std::vector<uint16_t> const recorded = src.expectedOutput(step);
  if (recorded.empty())
    return refs.get(src, step, problem);
  // Recorded outputs are bf16 themselves, so the tolerance covers two roundings.
  std::vector<double> ref(recorded.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] = bf16ToFloat(recorded[i]);
  return ref;
}

ErrorStats checkStepOutput(StepSource const &src, int64_t step, HostProblem const &problem,
                           std::vector<uint16_t> const &out, ReferenceCache &refs)
{
  size_t const count = std::min(out.size(), problem.outElements());
  return compareToReference(expectedOutput(src, step, problem, refs), out.data(), count);
}
} // namespace canopy
