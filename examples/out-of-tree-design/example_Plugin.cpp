/// \file example_Plugin.cpp
/// \brief The plugin's entry points: what `canopy --load`, CANOPY_PLUGINS and `canopy.load()` call.
#include "example_Designs.hpp"

#include "canopy_Plugin.hpp"

CANOPY_PLUGIN(registrar)
{
  registrar.add("example-host", "out-of-tree example: Kokkos on the host, one (node, head) row per iteration",
                example::makeHostDesign);
#ifdef EXAMPLE_WITH_CUDA
  registrar.add("example-cuda", "out-of-tree example: one CUDA thread per (node, head) row", example::makeCudaDesign);
#endif
}
