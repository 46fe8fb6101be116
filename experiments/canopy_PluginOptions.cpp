/// \file canopy_PluginOptions.cpp
/// \brief `canopy --load LIB` and CANOPY_PLUGINS: design plugins (backends/canopy_Plugin.hpp) loaded
/// before any subcommand runs, so check, run, trace and designs see their designs like built-in ones.
#include "canopy_Commands.hpp"
#include "canopy_PluginLoader.hpp"

#include <cstdlib>
#include <memory>

namespace canopy::cli
{
std::shared_ptr<std::vector<std::string>> addLoadOption(CLI::App &app)
{
  auto libs = std::make_shared<std::vector<std::string>>();
  app.add_option("--load", *libs,
                 "load the designs of a plugin library (repeatable; before the subcommand); CANOPY_PLUGINS "
                 "holds more, separated by ':'")
      ->type_name("LIB")
      ->allow_extra_args(false);
  return libs;
}

void loadPlugins(std::vector<std::string> const &libs)
{
  if (char const *env = std::getenv("CANOPY_PLUGINS"))
    for (std::string const &lib : splitPluginList(env))
      loadPlugin(lib);
  for (std::string const &lib : libs)
    loadPlugin(lib);
}
} // namespace canopy::cli
