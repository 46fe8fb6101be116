/// \file canopy_DesignsCommand.cpp
/// \brief `canopy designs`: every design of this build and of the loaded plugins (with the library it
/// came from), its kernel paths, and whether it can run on this machine (and why not).
#include "canopy_BatchStorage.hpp"
#include "canopy_Commands.hpp"
#include "canopy_Registry.hpp"

#include <cstdio>
#include <memory>
#include <string>

namespace canopy::cli
{
namespace
{
char const *memoryName(MemoryKind k)
{
  switch (k)
  {
  case MemoryKind::kHost: return "host";
  case MemoryKind::kKokkos: return "Kokkos default space";
  case MemoryKind::kCudaDevice: return "CUDA device";
  }
  return "?";
}

int runDesigns(bool summaries)
{
  std::printf("| design | memory | runs here | kernel paths | from |\n|---|---|---|---|---|\n");
  for (std::string const &name : designNames(/*include_experimental=*/true))
  {
    DesignPtr const d = makeDesign(name);
    std::string why;
    bool const here = memoryAvailable(d->memory(), &why);
    std::string const label = name + (designIsExperimental(name) ? " (experimental)" : "");
    std::string const origin = designOrigin(name);
    std::printf("| %s | %s | %s | %s | %s |\n", label.c_str(), memoryName(d->memory()),
                here ? "yes" : ("no: " + why).c_str(), d->kernelPaths().c_str(),
                origin.empty() ? "built in" : origin.c_str());
  }
  if (summaries)
  {
    std::printf("\n");
    for (std::string const &name : designNames(true))
      std::printf("- %s: %s\n", name.c_str(), designSummary(name).c_str());
  }
  std::printf("\nExperimental designs are left out of \"all\" and the default lists; name them to run them.\n");
  return 0;
}
} // namespace

void addDesignsCommand(CLI::App &app, Action &action)
{
  auto summaries = std::make_shared<bool>(false);
  CLI::App *cmd = app.add_subcommand("designs", "List the designs of this build, their kernel paths and where they run");
  cmd->add_flag("--summaries", *summaries, "also print each design's one-paragraph summary");
  cmd->callback([summaries, &action] { action = [summaries] { return runDesigns(*summaries); }; });
}
} // namespace canopy::cli
