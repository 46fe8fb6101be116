/// \file canopy_Registry.hpp
/// \brief Name -> factory for every design of this process: compiled into this build or loaded from a
/// plugin library (canopy_PluginLoader.hpp).
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
/// \p experimental: selectable by name, but left out of designNames() and so of "all" and the default
/// lists: designs kept for a measurement, not the ones a user should compare. \p origin: the plugin
/// library a design came from (canopy_PluginLoader.hpp), empty for one compiled into this build.
void registerDesign(std::string const &name, std::string const &summary, DesignFactory factory,
                    bool experimental = false, std::string const &origin = {});

/// \brief Removes a design (tests that register their own); no-op when absent.
void unregisterDesign(std::string const &name);

/// \brief Creates a design by name. Throws InputError listing the compiled designs when unknown.
DesignPtr makeDesign(std::string const &name);

/// \brief Names of the compiled designs, in registration order (experimental ones on request).
std::vector<std::string> designNames(bool include_experimental = false);
std::string designSummary(std::string const &name);
bool designIsExperimental(std::string const &name);
/// \brief The plugin library design \p name came from; "" for a design compiled into this build.
std::string designOrigin(std::string const &name);
/// \brief Whether a design of that name is registered (built in or loaded).
bool designExists(std::string const &name);

/// \brief Registers every design this build has (idempotent).
void registerBuiltinDesigns();

/// \brief Splits "a,b,c" and checks each name: InputError "<key>[i]: ..." on the first unknown, empty,
/// repeated name, or an "all" among names.
std::vector<std::string> parseDesignList(std::string const &list, std::string const &key = "--designs");
} // namespace canopy
