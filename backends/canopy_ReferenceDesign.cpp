/// \file canopy_ReferenceDesign.cpp
/// \brief The fp64 host reference as a design (for checks; never a performance baseline).
#include "canopy_Bf16.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"

namespace canopy
{
namespace
{
class ReferenceDesign final : public Design
{
public:
  std::string name() const override { return "reference"; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  /// Every KV dtype in both numerics: the reference defines them.
  std::string whyNotServed(KvDtype, Numerics) const override { return ""; }
  void plan(PlanBounds const &bounds, DesignOptions const &options) override
  {
    requireServed(*this, bounds, options);
    _numerics = options.numerics;
  }
  void run(BatchRef const &batch, ExecContext const &) override
  {
    std::vector<double> const out = referenceAttention(batch, _numerics);
    for (size_t i = 0; i < out.size(); ++i)
      batch.out[i] = floatToBf16(static_cast<float>(out[i]));
  }

private:
  Numerics _numerics = Numerics::kDequant;
};
} // namespace

void registerReferenceDesign()
{
  registerDesign("reference", "fp64 host reference of the exact semantics (checks only)",
                 [] { return std::make_unique<ReferenceDesign>(); });
}
} // namespace canopy
