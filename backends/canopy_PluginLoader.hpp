/// \file canopy_PluginLoader.hpp
/// \brief Loads design plugins (canopy_Plugin.hpp) into this process's registry. Every refusal is an
/// InputError naming the library: a file that does not load, a library without the entry points, one
/// built against another CANOPY_PLUGIN_ABI_VERSION, a registration that throws, registers nothing,
/// or names a design that exists already. A refused library registers none of its designs.
#pragma once

#include <string>
#include <vector>

namespace canopy
{
/// \brief Loads the plugin at \p path and registers its designs (origin: the library's absolute
/// path); returns their names. Loading a library that is loaded already returns its names again.
/// A loaded design's exceptions from construction, plan and run, other than Canopy's own error
/// types, become InputError naming the design and its library.
std::vector<std::string> loadPlugin(std::string const &path);

/// \brief The libraries of a path list ("a.so:b.so", as CANOPY_PLUGINS holds it; empty entries
/// skipped), in order.
std::vector<std::string> splitPluginList(std::string const &list);
} // namespace canopy
