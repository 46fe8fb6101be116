/// \file canopy_Environment.hpp
/// \brief The environment block of a results file: host, devices, Kokkos, git, config hash.
#pragma once

#include "canopy_Design.hpp"
#include "canopy_ExperimentConfig.hpp"

#include <map>
#include <set>
#include <string>

namespace canopy
{
std::map<std::string, std::string> collectEnvironment(ExperimentConfig const &config, std::set<MemoryKind> const &kinds);
/// \brief Short commit hash of the source tree (+ "-dirty"), plus the commit the binary was built at
/// when that differs; the built commit alone where no checkout is at run time.
std::string gitDescribe();
} // namespace canopy
