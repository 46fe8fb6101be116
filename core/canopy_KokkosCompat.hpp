/// \file canopy_KokkosCompat.hpp
/// \brief The few API differences between Debian's Kokkos 3.4 and Kokkos 4.x.
#pragma once

#include <Kokkos_Core.hpp>

namespace canopy::Compat
{
#if KOKKOS_VERSION >= 40000
KOKKOS_INLINE_FUNCTION float exp(float x) { return Kokkos::exp(x); }
KOKKOS_INLINE_FUNCTION float log(float x) { return Kokkos::log(x); }
template <class View> using HostMirror = typename View::host_mirror_type;
#else
KOKKOS_INLINE_FUNCTION float exp(float x) { return Kokkos::Experimental::exp(x); }
KOKKOS_INLINE_FUNCTION float log(float x) { return Kokkos::Experimental::log(x); }
template <class View> using HostMirror = typename View::HostMirror;
#endif

/// \brief A labelled fence where Kokkos has them (labels show in Kokkos tools), a plain one on 3.4.
inline void fence([[maybe_unused]] std::string const &label)
{
#if KOKKOS_VERSION >= 30600
  Kokkos::fence(label);
#else
  Kokkos::fence();
#endif
}

/// \brief Version string "major.minor.patch" of the Kokkos we compiled against.
inline std::string kokkosVersion()
{
  int v = KOKKOS_VERSION;
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}
} // namespace canopy::Compat
