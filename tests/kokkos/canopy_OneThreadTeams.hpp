/// \file canopy_OneThreadTeams.hpp
/// \brief The GPU tile shapes of the Kokkos kernels with one thread per team and one lane, so that
/// host spaces run them: the device configurations are checked even without a device backend.
#pragma once

#include "canopy_VerifyAttention_spec.hpp"

namespace canopy::test
{
template <class Base>
struct OneThreadTeams : Base
{
  static constexpr int TEAM_SIZE = 1;
  static constexpr int VECTOR_LENGTH = 1;
  static constexpr int COMBINE_TEAM_SIZE = 1;
};
using StreamedOnHost = OneThreadTeams<Impl::StreamedTiles>;
using SgemmOnHost = OneThreadTeams<Impl::SgemmTiles>;
using ResidentDeviceOnHost = OneThreadTeams<Impl::ResidentDeviceTiles>;
} // namespace canopy::test
