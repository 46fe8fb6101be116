/// \file canopy_MergeCommand.cpp
/// \brief `canopy merge DIR... --out DIR`: the shards of one `canopy run --shard K/N` sweep -> the
/// results.json / csv / md / tex that one unsharded run writes.
#include "canopy_BoundedRead.hpp"
#include "canopy_Commands.hpp"
#include "canopy_Error.hpp"
#include "canopy_Merge.hpp"
#include "canopy_Results.hpp"

#include <filesystem>
#include <iostream>
#include <memory>

namespace canopy::cli
{
namespace
{
struct MergeFlags
{
  std::vector<std::string> dirs;
  std::string out;
  bool allow_mixed_devices = false;
  bool overwrite = false;
};

int runMerge(MergeFlags const &f)
{
  std::error_code ec;
  for (size_t i = 0; i < f.dirs.size(); ++i)
    if (std::filesystem::equivalent(f.dirs[i], f.out, ec))
      throw InputError("--out: '" + f.out + "' is also input " + std::to_string(i + 1) + " ('" + f.dirs[i] +
                       "'): the merge would replace a shard it reads; choose another folder");
  OutputDir out(f.out, f.overwrite);
  std::vector<ShardResults> shards;
  for (std::string const &dir : f.dirs)
  {
    std::string const path = (std::filesystem::path(dir) / "results.json").string();
    std::error_code missing;
    if (!std::filesystem::exists(path, missing))
      throw InputError(path + ": cannot read (expected the output folder of canopy run --shard K/N)");
    shards.push_back({dir, resultSetFromJson(readRegularFile(path, "shard results", file_caps::RESULTS), path)});
  }
  MergeOptions opt;
  opt.allow_mixed_devices = f.allow_mixed_devices;
  ResultSet const merged = mergeShards(shards, opt);  // every check before anything is written
  return writeAndReport(merged, out, "merged " + std::to_string(shards.size()) + " shards into");
}
} // namespace

void addMergeCommand(CLI::App &app, Action &action)
{
  auto flags = std::make_shared<MergeFlags>();
  CLI::App *cmd = app.add_subcommand("merge", "Join the shard results of one sharded run into one run's results");
  cmd->add_option("dirs", flags->dirs, "output folders of canopy run --shard K/N, one per shard")->required();
  cmd->add_option("--out", flags->out, "output folder of the merged results")->required();
  addOverwriteFlag(cmd, flags->overwrite, "the results already in the output folder");
  cmd->add_flag("--allow-mixed-devices", flags->allow_mixed_devices,
                "merge shards measured on different devices (their rows keep their own device's times)");
  cmd->callback([flags, &action] { action = [flags] { return runMerge(*flags); }; });
}
} // namespace canopy::cli
