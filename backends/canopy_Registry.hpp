/// \file canopy_Registry.hpp
/// \brief Name -> factory for every design compiled into this build.
#pragma once

#include "canopy_Design.hpp"

#include <functional>
#include <string>
#include <vector>

namespace canopy
{
using DesignFactory = std::function<DesignPtr()>;

/// \brief Registers a design; called once per design from its own translation unit via
/// registerBuiltinDesigns() (no static-initialisation tricks: static libraries drop those).
void registerDesign(std::string const &name, std::string const &summary, DesignFactory factory);

/// \brief Creates a design by name. Throws InputError listing the compiled designs when unknown.
DesignPtr makeDesign(std::string const &name);

/// \brief Names of the compiled designs, in registration order.
std::vector<std::string> designNames();
std::string designSummary(std::string const &name);

/// \brief Registers every design this build has (idempotent).
void registerBuiltinDesigns();

/// \brief Splits "a,b,c" and checks each name; throws InputError on the first unknown.
std::vector<std::string> parseDesignList(std::string const &list);
} // namespace canopy
