/// \file canopy_TraceStats.hpp
/// \brief What `canopy trace info` reports: batch sizes, P and T distributions, acceptance
/// histogram, tree depth, fan-out and branching, and KV fragmentation (mean run of consecutive slots).
#pragma once

#include "canopy_Trace.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief Summary of a sample of integers (nearest-rank percentiles).
struct Distribution
{
  int64_t count = 0;
  double mean = 0;
  int64_t min = 0, max = 0;
  double p10 = 0, p50 = 0, p90 = 0;  ///< canopy_Statistics.hpp's quantiles (linear between ranks)
};
Distribution summarize(std::vector<int64_t> values);

struct TraceStats
{
  int64_t steps = 0, rows = 0, distinct_requests = 0, nodes = 0, prefix_tokens = 0;
  Distribution batch;        ///< requests per step
  Distribution prefix;       ///< P per request row
  Distribution tree;         ///< T per request row
  Distribution depth;        ///< max node depth per tree
  Distribution root_children;  ///< children of the root per tree (the tree's width at depth 1)
  Distribution widest;       ///< most nodes at one depth, per tree
  double mean_branching = 0; ///< children per internal (non-leaf) node, over all trees
  Distribution step_tokens;  ///< sum P per step (kv_indices per step)
  std::vector<int64_t> accepted_histogram;  ///< [a] = rows with accepted length a; empty when not recorded
  double mean_accepted = 0;
  int64_t prefix_runs = 0;     ///< maximal runs of consecutive slots over all prefixes
  double mean_run_length = 0;  ///< prefix_tokens / prefix_runs: 1 = fully scattered, P = contiguous
  int64_t max_slot = -1;       ///< largest slot referenced
};

TraceStats computeTraceStats(TraceColumns const &columns);

/// \brief Human-readable report (Markdown tables), as `canopy trace info` prints it.
std::string formatTraceStats(TraceInfo const &info, TraceStats const &stats);
} // namespace canopy
