/// \file canopy_BuiltinDesigns.cpp
/// \brief The one place that lists which design families this build registers.
#include "canopy_Config.hpp"
#include "canopy_Registry.hpp"

namespace canopy
{
void registerReferenceDesign();
#ifdef CANOPY_HAVE_KOKKOS_DESIGNS
void registerKokkosDesigns();
#endif
#ifdef CANOPY_HAVE_CUDA_DESIGNS
void registerCudaDesigns();
#endif

void registerBuiltinDesigns()
{
  static bool const done = [] {
    registerReferenceDesign();
#ifdef CANOPY_HAVE_KOKKOS_DESIGNS
    registerKokkosDesigns();
#endif
#ifdef CANOPY_HAVE_CUDA_DESIGNS
    registerCudaDesigns();
#endif
    return true;
  }();
  (void)done;
}
} // namespace canopy
