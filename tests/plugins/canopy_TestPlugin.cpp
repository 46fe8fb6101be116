/// \file canopy_TestPlugin.cpp
/// \brief Bad design plugins, one per refusal the loader owes (tests/plugins/plugin_refusals.sh):
/// built once per CANOPY_TEST_PLUGIN_FAULT value.
#include "canopy_Error.hpp"
#include "canopy_Plugin.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#define FAULT_NO_ENTRY_POINTS 1  // a shared library, but no Canopy plugin
#define FAULT_ABI 2              // built against another plugin ABI version
#define FAULT_DUPLICATE 3        // registers a name that is built in
#define FAULT_PLAN_THROWS 4      // loads; its design's plan throws a plain std::exception
#define FAULT_NOTHING 5          // registers no design

namespace
{
class PlanThrows final : public canopy::Design
{
public:
  std::string name() const override { return "test-plan-throws"; }
  canopy::MemoryKind memory() const override { return canopy::MemoryKind::kHost; }
  void plan(canopy::PlanBounds const &, canopy::DesignOptions const &) override
  {
    throw std::logic_error("this plan always throws");
  }
  void run(canopy::BatchRef const &, canopy::ExecContext const &) override {}
};
} // namespace

#if CANOPY_TEST_PLUGIN_FAULT == FAULT_NO_ENTRY_POINTS
extern "C" __attribute__((visibility("default"))) int not_a_canopy_plugin() { return 0; }
#elif CANOPY_TEST_PLUGIN_FAULT == FAULT_ABI
extern "C" __attribute__((visibility("default"))) int canopy_plugin_abi_version() { return CANOPY_PLUGIN_ABI_VERSION + 1; }
extern "C" __attribute__((visibility("default"))) void canopy_plugin_register(canopy::PluginRegistrar &)
{
  throw std::logic_error("a plugin of another ABI must not be called");
}
#else
CANOPY_PLUGIN(registrar)
{
#if CANOPY_TEST_PLUGIN_FAULT == FAULT_DUPLICATE
  registrar.add("test-not-registered", "registered before the duplicate, so refused with it",
                [] { return std::make_unique<PlanThrows>(); });
  registrar.add("reference", "a second 'reference'", [] { return std::make_unique<PlanThrows>(); });
#elif CANOPY_TEST_PLUGIN_FAULT == FAULT_PLAN_THROWS
  registrar.add("test-plan-throws", "its plan throws", [] { return std::make_unique<PlanThrows>(); },
                /*experimental=*/true);
#else
  (void)registrar;
#endif
}
#endif
