/// \file canopy_Commands.hpp
/// \brief Subcommands of the `canopy` command line; each lives in its own file and registers itself here.
#pragma once

#include "canopy_Results.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace canopy::cli
{
/// A subcommand's action; returns the process exit code (0 ok, 1 check failed, 2 bad input, 4 the
/// work needs a GPU this host lacks; see canopy_Error.hpp).
using Action = std::function<int()>;

/// \brief Writes \p results into \p out (claimed before the work, see OutputDir), prints the
/// Markdown table and "<what> <dir>/{...}", and returns the exit code: 1 when a row FAILED its
/// check, else 0.
int writeAndReport(ResultSet const &results, OutputDir &out, std::string const &what);

/// \brief "" when design \p name can run on this host, else why not: its memory is a GPU's and this
/// host has no usable GPU. A name this build lacks is bad input (makeDesign throws InputError).
std::string gpuMissingFor(std::string const &name);

/// \brief A seed or count given as digits only: a negative number would wrap around in an unsigned
/// option ("-1" became 2^64-1).
inline CLI::Validator const DIGITS_ONLY(
    [](std::string &text) {
      bool const digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      return digits ? std::string() : "must be a non-negative integer, got '" + text + "'";
    },
    "UINT");

/// \brief Adds to every integer option of \p app and its subcommands a check of the text as given:
/// empty, non-decimal, zero-led, or past 64 bits is refused naming the option (CLI11 alone reads ""
/// as 0 and saturates a value past 64 bits). Call once every command is added.
void checkIntegersAsGiven(CLI::App &app);

/// \brief The folder a file named by \p flag is written into at the end, checked before the work
/// that produces it: InputError when \p path is empty, a folder, or in a folder that does not exist.
void requireFolderOf(std::string const &path, char const *flag);

/// \brief Adds `--overwrite` to \p cmd: the one spelling of "replace what the output holds".
CLI::Option *addOverwriteFlag(CLI::App *cmd, bool &overwrite, std::string const &what);

/// \brief Adds the top-level `--load LIB` option (repeatable); returns the libraries it collects.
std::shared_ptr<std::vector<std::string>> addLoadOption(CLI::App &app);
/// \brief Loads the plugins of CANOPY_PLUGINS, then \p libs (InputError naming the first refused one).
void loadPlugins(std::vector<std::string> const &libs);

/// \brief Adds `canopy check` (designs vs the fp64 reference on a generated problem or a trace).
void addCheckCommand(CLI::App &app, Action &action);
/// \brief Adds `canopy run` (experiment configs -> results and tables).
void addRunCommand(CLI::App &app, Action &action);
/// \brief Adds `canopy designs` (the designs of this build, their paths, whether they run here).
void addDesignsCommand(CLI::App &app, Action &action);
/// \brief Adds `canopy merge` (shard results of one config -> the results of one run).
void addMergeCommand(CLI::App &app, Action &action);
/// \brief Adds `canopy trace synth | info | validate` (verify traces, HDF5 formats v1 and v2).
void addTraceCommands(CLI::App &app, Action &action);
/// \brief Adds `canopy peaks` (the GPU's measured ceilings; builds with the GPU lab only).
void addPeaksCommand(CLI::App &app, Action &action);
} // namespace canopy::cli
