/// \file example_HostDesign.cpp
/// \brief example-host: a Kokkos design on the host, one (node, head) row per parallel iteration.
#include "example_Designs.hpp"

#include "example_Attention.hpp"

#include "canopy_Design.hpp"
#include "canopy_Error.hpp"

#include <Kokkos_Core.hpp>

#include <memory>
#include <string>

namespace example
{
namespace
{
class HostDesign final : public canopy::Design
{
public:
  std::string name() const override { return "example-host"; }
  /// Host memory: the batch's buffers arrive as host pointers whatever Kokkos' default space is.
  canopy::MemoryKind memory() const override { return canopy::MemoryKind::kHost; }

  /// Nothing to size (no workspace); a real design would pick its tiles and allocate here.
  void plan(canopy::PlanBounds const &bounds, canopy::DesignOptions const &) override
  {
    if (bounds.num_heads <= 0)
      throw canopy::InputError(name() + ": heads must be positive");
  }

  void run(canopy::BatchRef const &batch, canopy::ExecContext const &) override
  {
    using Space = Kokkos::DefaultHostExecutionSpace;
    Kokkos::parallel_for(
        "example-host", Kokkos::RangePolicy<Space>(0, batch.num_nodes * batch.num_heads), [batch](int64_t row) {
          attendRow(batch, requestOf(batch, row / batch.num_heads), row);
        });
    Space().fence();
  }
};
} // namespace

canopy::DesignPtr makeHostDesign() { return std::make_unique<HostDesign>(); }
} // namespace example
