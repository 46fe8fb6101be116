#include "canopy_StepCheck.hpp"

#include "canopy_Bf16.hpp"

#include <algorithm>

namespace canopy
{
std::vector<double> const &ReferenceCache::get(StepSource const &src, int64_t step, HostProblem const &problem,
                                               Numerics numerics)
{
  auto key = std::make_tuple(src.label(), step, numerics);  // the label names the pool's dtype and scale
  auto it = _cache.find(key);
  if (it == _cache.end())
  {
    BatchRef ref = hostRef(problem);
    if (std::vector<uint16_t> const *pool = src.sharedPool(); pool && problem.kv_pool.empty())
    {
      ref.kv_pool = pool->data();
      ref.num_slots = static_cast<int64_t>(pool->size() / D_QK);
    }
    if (std::vector<uint8_t> const *pool = src.sharedFp8Pool(); pool && problem.kv_pool_fp8.empty())
    {
      ref.kv_pool_fp8 = pool->data();
      ref.num_slots = static_cast<int64_t>(pool->size() / kvRowBytes(ref.kv_dtype));
    }
    it = _cache.emplace(key, referenceAttention(ref, numerics)).first;
  }
  return it->second;
}

std::vector<double> expectedOutput(StepSource const &src, int64_t step, HostProblem const &problem, ReferenceCache &refs,
                                   Numerics numerics)
{
  std::vector<uint16_t> const recorded = src.expectedOutput(step);
  if (recorded.empty() || numerics != Numerics::kDequant)
    return refs.get(src, step, problem, numerics);
  // Recorded outputs are bf16 themselves, so the tolerance covers two roundings.
  std::vector<double> ref(recorded.size());
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] = bf16ToFloat(recorded[i]);
  return ref;
}

ErrorStats checkStepOutput(StepSource const &src, int64_t step, HostProblem const &problem,
                           std::vector<uint16_t> const &out, ReferenceCache &refs, Numerics numerics)
{
  size_t const count = std::min(out.size(), problem.outElements());
  return compareToReference(expectedOutput(src, step, problem, refs, numerics), out.data(), count,
                            errorBounds(src.axes().kv_dtype, numerics));
}
} // namespace canopy
