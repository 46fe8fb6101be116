/// \file canopy_Runtime.hpp
/// \brief The Kokkos runtime for code that does not include Kokkos (the command line, the replay
/// engine, benchmark drivers, test mains): only the backends' translation units compile Kokkos, so
/// with a CUDA Kokkos only they go through nvcc_wrapper.
#pragma once

#include <string>

namespace canopy
{
/// \brief Kokkos initialised for the guard's lifetime (Kokkos::ScopeGuard behind a plain type).
class RuntimeGuard
{
public:
  RuntimeGuard(int &argc, char **argv);
  RuntimeGuard();
  ~RuntimeGuard();
  RuntimeGuard(RuntimeGuard const &) = delete;
  RuntimeGuard &operator=(RuntimeGuard const &) = delete;

private:
  bool _owns = false;
};

/// \brief Waits for all work on every Kokkos execution space (labelled where Kokkos has labels).
void fenceAll(std::string const &label);

/// \brief The Kokkos this build uses: version, default execution space, and the enabled spaces.
struct KokkosInfo
{
  std::string version;
  std::string default_space;
  std::string spaces;  ///< e.g. "Serial,OpenMP,Cuda"
};
KokkosInfo kokkosInfo();

/// \brief Whether the host can read Kokkos' default memory space (where MemoryKind::kKokkos designs
/// want their buffers): true for host backends, false for a CUDA Kokkos.
bool kokkosMemoryIsHost();
} // namespace canopy
