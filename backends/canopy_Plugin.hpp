/// \file canopy_Plugin.hpp
/// \brief How a design built outside the tree joins a Canopy process: a shared library (a
/// "plugin") that exports two C symbols, written by CANOPY_PLUGIN:
///
///     CANOPY_PLUGIN(registrar)
///     {
///       registrar.add("my-design", "what it does", [] { return std::make_unique<MyDesign>(); });
///     }
///
/// `canopy --load LIB`, `CANOPY_PLUGINS` and Python's `canopy.load(path)` open the library, compare
/// its CANOPY_PLUGIN_ABI_VERSION with their own, and hand it the loading process's registry as a
/// PluginRegistrar. The registrar (not canopy::registerDesign) is the way in: a plugin that links
/// Canopy's static libraries holds its own copy of the registry, which nobody reads.
#pragma once

#include "canopy_Design.hpp"

#include <functional>
#include <string>

/// Version of everything a plugin and the process that loads it share by layout: Design's virtual
/// functions, BatchRef, PlanBounds, DesignOptions, ExecContext, MemoryKind, the registrar below.
/// Any change to one of them bumps it; a library built against another value is refused.
#define CANOPY_PLUGIN_ABI_VERSION 2

namespace canopy
{
/// \brief What a plugin registers its designs with (the loading process's registry).
class PluginRegistrar
{
public:
  /// \brief Adds a design. \p name: 1-63 letters, digits, '-', '_' or '.', new to the process
  /// (a name that exists already refuses the whole library). \p experimental as in registerDesign.
  virtual void add(std::string const &name, std::string const &summary, std::function<DesignPtr()> factory,
                   bool experimental = false) = 0;

protected:
  ~PluginRegistrar() = default;
};
} // namespace canopy

/// The plugin's ABI version (what the loader checks before calling anything else).
#define CANOPY_PLUGIN_ABI_SYMBOL "canopy_plugin_abi_version"
/// The plugin's registration: void(canopy::PluginRegistrar &).
#define CANOPY_PLUGIN_REGISTER_SYMBOL "canopy_plugin_register"

/// Defines both entry points; the block that follows is the registration, with \p registrar in scope.
#define CANOPY_PLUGIN(registrar)                                                                       \
  extern "C" __attribute__((visibility("default"))) int canopy_plugin_abi_version()                   \
  {                                                                                                    \
    return CANOPY_PLUGIN_ABI_VERSION;                                                                  \
  }                                                                                                    \
  extern "C" __attribute__((visibility("default"))) void canopy_plugin_register(canopy::PluginRegistrar &registrar)
