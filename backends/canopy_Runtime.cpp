#include "canopy_Runtime.hpp"

#include "canopy_KokkosCompat.hpp"

#include <Kokkos_Core.hpp>

namespace canopy
{
RuntimeGuard::RuntimeGuard(int &argc, char **argv)
{
  if (!Kokkos::is_initialized())
  {
    Kokkos::initialize(argc, argv);
    _owns = true;
  }
}

RuntimeGuard::RuntimeGuard()
{
  if (!Kokkos::is_initialized())
  {
    Kokkos::initialize();
    _owns = true;
  }
}

RuntimeGuard::~RuntimeGuard()
{
  if (_owns)
    Kokkos::finalize();
}

void fenceAll(std::string const &label) { Compat::fence(label); }

KokkosInfo kokkosInfo()
{
  KokkosInfo info;
  info.version = Compat::kokkosVersion();
  info.default_space = Kokkos::DefaultExecutionSpace::name();
  std::string spaces;
  auto add = [&](char const *name) { spaces += (spaces.empty() ? "" : ",") + std::string(name); };
#ifdef KOKKOS_ENABLE_SERIAL
  add("Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  add("OpenMP");
#endif
#ifdef KOKKOS_ENABLE_THREADS
  add("Threads");
#endif
#ifdef KOKKOS_ENABLE_CUDA
  add("Cuda");
#endif
  info.spaces = spaces;
  return info;
}

bool kokkosMemoryIsHost()
{
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, Kokkos::DefaultExecutionSpace::memory_space>::accessible;
}
} // namespace canopy
