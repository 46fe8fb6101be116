/// \file canopy_Merge.hpp
/// \brief Joins the results of the shards of one run (`canopy run --shard K/N`) into the results a
/// single run writes, after checking that they belong together.
#pragma once

#include "canopy_Results.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief Parses "K/N" (0 <= K < N): the --shard flag and the `shard` entry of a shard's environment.
bool parseShardSpec(std::string const &text, int &index, int &count);

/// \brief The shape of a run's work, from its config: the rows of an unsharded run are numbered
/// source x combination (`order`), and a unit is one source with one option combination (all designs).
struct RunLayout
{
  int64_t sources = 0;       ///< traces + sweep shapes
  int64_t combinations = 0;  ///< designs x option combinations
  int64_t designs = 0;
};
/// \brief "sources=S combinations=C designs=D", the `layout` entry of a run's environment.
std::string runLayoutText(RunLayout const &layout);
/// \brief Whether row order \p order belongs to shard \p index of \p count (the engine's rule).
bool orderInShard(RunLayout const &layout, int64_t order, int index, int count);

/// \brief A shard's results and where they came from (named in error messages).
struct ShardResults
{
  std::string source;
  ResultSet results;
};

struct MergeOptions
{
  bool allow_mixed_devices = false;  ///< otherwise shards measured on different devices are refused
};

/// \brief Rows of every shard in the order of the unsharded run, one environment block. Throws
/// InputError, naming the shard, when the shards come from different experiments, configs, traces
/// (by content), binaries or seeds, when a shard is missing or given twice, when a shard's rows are
/// not the ones its config gives it (a row removed, duplicated or moved by hand), or when devices
/// differ (unless allowed).
ResultSet mergeShards(std::vector<ShardResults> const &shards, MergeOptions const &options = {});
} // namespace canopy
