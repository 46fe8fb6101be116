/// \file canopy_Merge.hpp
/// \brief Joins the results of the shards of one run (`canopy run --shard K/N`) into the results a
/// single run writes, after checking that they belong together.
#pragma once

#include "canopy_Results.hpp"

#include <string>
#include <vector>

namespace canopy
{
/// \brief Parses "K/N" (0 <= K < N): the --shard flag and the `shard` entry of a shard's environment.
bool parseShardSpec(std::string const &text, int &index, int &count);

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
/// InputError, naming the shard, when the shards come from different experiments, configs, binaries
/// or seeds, when a shard is missing or given twice, or when devices differ (unless allowed).
ResultSet mergeShards(std::vector<ShardResults> const &shards, MergeOptions const &options = {});
} // namespace canopy
