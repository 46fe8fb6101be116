/// \file canopy_main.cpp
/// \brief The `canopy` command line: maps errors to exit codes (2 = bad input, 3 = runtime failure,
/// 4 = the work needs a GPU this host lacks).
#include "canopy_Commands.hpp"
#include "canopy_Error.hpp"
#include "canopy_Runtime.hpp"

#include <iostream>

int main(int argc, char **argv)
{
  CLI::App app{"Canopy: tree-verify attention for speculative decoding (absorbed MLA)"};
  app.require_subcommand(1);
  canopy::cli::Action action;
  auto const plugins = canopy::cli::addLoadOption(app);
  canopy::cli::addCheckCommand(app, action);
  canopy::cli::addRunCommand(app, action);
  canopy::cli::addMergeCommand(app, action);
  canopy::cli::addDesignsCommand(app, action);
#ifdef CANOPY_HAVE_TRACE
  canopy::cli::addTraceCommands(app, action);
#endif
#ifdef CANOPY_HAVE_GPU_LAB
  canopy::cli::addPeaksCommand(app, action);
#endif
  canopy::cli::checkIntegersAsGiven(app);
  // CLI11 alone says "A subcommand is required" for a command it does not know, without its name.
  if (argc > 1 && argv[1][0] != '-')
  {
    std::string known;
    bool found = false;
    for (CLI::App const *sub : app.get_subcommands({}))
    {
      found = found || sub->check_name(argv[1]);
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found)
    {
      std::cerr << "canopy: error: unknown command '" << argv[1] << "' (commands: " << known << "; see canopy --help)\n";
      return canopy::EXIT_BAD_INPUT;
    }
  }
  try
  {
    app.parse(argc, argv);
  }
  catch (CLI::CallForHelp const &e)
  {
    return app.exit(e);
  }
  catch (CLI::CallForAllHelp const &e)
  {
    return app.exit(e);
  }
  catch (CLI::ParseError const &e)
  {
    app.exit(e);
    return canopy::EXIT_BAD_INPUT;
  }
  canopy::RuntimeGuard guard;
  try
  {
    canopy::cli::loadPlugins(*plugins);
    return action ? action() : 0;
  }
  catch (canopy::InputError const &e)
  {
    std::cerr << "canopy: error: " << e.what() << "\n";
    return canopy::EXIT_BAD_INPUT;
  }
  catch (canopy::GpuUnavailable const &e)
  {
    std::cerr << "canopy: no GPU: " << e.what() << "\n";
    return canopy::EXIT_NO_GPU;
  }
  catch (std::exception const &e)
  {
    std::cerr << "canopy: failure: " << e.what() << "\n";
    return canopy::EXIT_RUNTIME_FAILURE;
  }
}
