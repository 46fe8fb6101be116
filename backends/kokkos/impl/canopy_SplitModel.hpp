/// \file canopy_SplitModel.hpp
/// \brief The split count of the sgemm tiles from a model of how a GPU runs their league: teams
/// dispatched in league order to the processor (SM) with a free team slot, the teams of one
/// processor sharing its throughput, each team's work its number of 128-key tiles.
///
/// Why a model and not a rule of thumb: an sgemm team holds its slot for whole KV tiles (about
/// 0.24 ms each at B = 8 on an H200, 3 teams per SM), so the last wave decides the step. At B = 8,
/// T = 256, P = 16K, 4 splits are 1,024 prefix teams on 396 slots, 2.6 waves, and the third is 59%
/// full; measured on the H200, 16-64 splits were 5-9% faster at every B = 8 shape, and at B = 1 the
/// fastest count (128, one tile per team) fills one wave exactly (docs/results/kokkos4.md).
///
/// Model (fitted to those two sweeps, 36 timings of 16 shapes): a processor with k resident teams
/// does RATE[k] tile-units of work per time unit, shared equally by its teams: one team alone runs
/// at 0.65 of the processor's full rate (its warps do not hide their latency), two at 0.9, three at
/// 1; a team costs TEAM_COST tiles beside its tiles. Relative times between the split counts of a
/// shape: mean error 2.2%, largest 25% (32 splits at B = 1, T = 17, where the model is
/// pessimistic); the count it picks was within 2.5% of the fastest measured one at every shape.
/// Among the counts within SLACK of the predicted best it takes the fewest, since the workspace
/// grows with the count (each split holds every row's 512 outputs).
#pragma once

#include "canopy_Design.hpp"
#include "impl/canopy_VerifyKernelCommon.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <set>
#include <vector>

namespace canopy::Impl
{
/// \brief What the split model needs of a device: its processors (SMs) and how many teams of the
/// tiles one holds at once.
struct TeamSlots
{
  int processors = 1;
  int teams_per_processor = 1;
};

/// \brief What a space tells of its device beyond its concurrency (0: not known).
struct DeviceFacts
{
  int processors = 0;
  int64_t shared_bytes_per_processor = 0;
};

/// \brief Team slots of a device for teams of \p team_threads threads and \p team_shared bytes of
/// shared memory, at most \p max_teams per processor (the tiles' launch bound, which their
/// registers set). Without the facts: 2,048 threads per processor (V100, A100, H100 and H200; an
/// sm_120 card has 1,536) and no shared-memory limit.
inline TeamSlots teamSlots(int concurrency, DeviceFacts const &facts, int team_threads, int64_t team_shared,
                           int max_teams)
{
  TeamSlots s;
  s.processors = std::max(1, facts.processors > 0 ? facts.processors : concurrency / 2048);
  int64_t per = std::min<int64_t>(max_teams, std::max(1, concurrency / s.processors / std::max(1, team_threads)));
  if (facts.shared_bytes_per_processor > 0 && team_shared > 0)
    per = std::min<int64_t>(per, facts.shared_bytes_per_processor / team_shared);
  s.teams_per_processor = static_cast<int>(std::max<int64_t>(1, per));
  return s;
}

/// \brief The model's constants (see the file comment).
struct SplitModel
{
  static constexpr double RATE[4] = {0.0, 0.65, 0.9, 1.0};  ///< a processor's rate with k teams (3 or more: 1)
  static constexpr double TEAM_COST = 0.05;  ///< a team's fixed cost beside its tiles, in tiles
  static constexpr double SLACK = 0.02;      ///< the fewest splits within 2% of the predicted best
  static constexpr int MAX_SPLITS = 128;
  /// Candidates stop where the league exceeds this many waves of slots (the last wave is then at
  /// most 1/64 of the step; it bounds the model's cost at plan time for large batches).
  static constexpr int MAX_WAVES = 64;
};

/// \brief Predicted time (tile-units at one processor's full rate) of a league whose teams, in
/// launch order, have \p work tiles each (0: the team returns at once). Each team goes to the
/// processor with the fewest resident teams (the lowest index among equals) when one has a free
/// slot; teams that finish at the same moment free their slots together, so a wave of equal teams
/// is followed by a spread-out next one, as a GPU's block scheduler spreads blocks over its SMs.
inline double predictedLeagueTime(std::vector<int> const &work, TeamSlots const &slots)
{
  int const per = std::max(1, slots.teams_per_processor);
  int const procs = std::max(1, slots.processors);
  struct Proc
  {
    std::vector<double> left;  ///< remaining work of the resident teams
    double since = 0;          ///< when left was last brought up to date
    int version = 0;
  };
  std::vector<Proc> proc(static_cast<size_t>(procs));
  auto rate = [&](Proc const &p) {
    return SplitModel::RATE[std::min<size_t>(p.left.size(), 3)] / static_cast<double>(p.left.size());
  };
  auto advance = [&](Proc &p, double now) {
    if (!p.left.empty())
    {
      double const done = (now - p.since) * rate(p);
      for (double &w : p.left)
        w -= done;
    }
    p.since = now;
  };
  // Processors by resident count (below per), so the least loaded is the first of the lowest set.
  std::vector<std::set<int>> by_count(static_cast<size_t>(per));
  for (int i = 0; i < procs; ++i)
    by_count[0].insert(i);
  auto count = [&](int i) { return static_cast<int>(proc[static_cast<size_t>(i)].left.size()); };
  using Event = std::pair<double, std::pair<int, int>>;  // (time, (processor, version))
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  auto schedule = [&](int i) {
    Proc &p = proc[static_cast<size_t>(i)];
    ++p.version;
    if (!p.left.empty())
      events.push({p.since + *std::min_element(p.left.begin(), p.left.end()) / rate(p), {i, p.version}});
  };
  constexpr double EMPTY = 1e-3;  // a team with nothing to do still takes a slot for an instant
  size_t next = 0;
  std::vector<int> touched;
  auto dispatch = [&](double now) {
    while (next < work.size())
    {
      auto level = std::find_if(by_count.begin(), by_count.end(), [](std::set<int> const &l) { return !l.empty(); });
      if (level == by_count.end())
        return;
      int const i = *level->begin();
      level->erase(level->begin());
      Proc &p = proc[static_cast<size_t>(i)];
      advance(p, now);
      p.left.push_back(work[next] > 0 ? work[next] + SplitModel::TEAM_COST : EMPTY);
      ++next;
      if (count(i) < per)
        by_count[static_cast<size_t>(count(i))].insert(i);
      touched.push_back(i);
    }
  };
  dispatch(0);
  double now = 0;
  while (true)
  {
    for (int i : touched)
      schedule(i);
    touched.clear();
    while (!events.empty() && events.top().second.second != proc[static_cast<size_t>(events.top().second.first)].version)
      events.pop();
    if (events.empty())
      break;
    now = events.top().first;
    // Every processor with a team done by now (within rounding) frees its slots before any is refilled.
    while (!events.empty() && events.top().first <= now * (1 + 1e-12) + 1e-12)
    {
      int const i = events.top().second.first;
      bool const stale = events.top().second.second != proc[static_cast<size_t>(i)].version;
      events.pop();
      if (stale)
        continue;
      Proc &p = proc[static_cast<size_t>(i)];
      if (count(i) < per)
        by_count[static_cast<size_t>(count(i))].erase(i);
      advance(p, now);
      p.left.erase(std::remove_if(p.left.begin(), p.left.end(), [](double w) { return w <= 1e-9; }), p.left.end());
      by_count[static_cast<size_t>(count(i))].insert(i);
      touched.push_back(i);
    }
    dispatch(now);
  }
  return now;
}

/// \brief Tiles of work of every team of the sgemm league for \p bounds at \p nsplit, in league
/// order (decodeTeam's: (request, head group, partial, row tile), row tile fastest; the tree part
/// last), every request at the bounds, its prefix chunks those of the kernels (prefixChunk).
inline std::vector<int> sgemmLeagueWork(PlanBounds const &bounds, int num_head_groups, int row_tiles, int nodes_per_tile,
                                        int nsplit, int64_t kv_tile)
{
  std::vector<int> work;
  work.reserve(static_cast<size_t>(bounds.max_batch) * num_head_groups * (nsplit + 1) * row_tiles);
  for (int b = 0; b < bounds.max_batch; ++b)
    for (int g = 0; g < num_head_groups; ++g)
      for (int s = 0; s <= nsplit; ++s)
        for (int r = 0; r < row_tiles; ++r)
        {
          int64_t lo = 0, hi = std::min<int64_t>(bounds.max_tree, static_cast<int64_t>(r + 1) * nodes_per_tile);
          if (s < nsplit)
            prefixChunk(bounds.max_prefix, nsplit, s, kv_tile, lo, hi);
          work.push_back(lo < hi ? static_cast<int>(ceilDiv(hi - lo, kv_tile)) : 0);
        }
  return work;
}

/// \brief The split count the model picks for the sgemm tiles: over every count that gives each
/// split the same whole number of KV tiles (so none is empty), up to MAX_SPLITS and MAX_WAVES, the
/// fewest within SLACK of the predicted best.
inline int modelNsplit(PlanBounds const &bounds, int num_head_groups, int row_tiles, int nodes_per_tile, int64_t kv_tile,
                       TeamSlots const &slots)
{
  int64_t const tiles = std::max<int64_t>(1, ceilDiv(bounds.max_prefix, kv_tile));
  int64_t const slot_count =
      static_cast<int64_t>(std::max(1, slots.processors)) * std::max(1, slots.teams_per_processor);
  int64_t const teams_per_split =
      std::max<int64_t>(1, static_cast<int64_t>(bounds.max_batch) * num_head_groups * row_tiles);
  std::vector<std::pair<int, double>> predicted;
  int last = 0;
  for (int64_t per = tiles; per >= 1; --per)
  {
    int const n = static_cast<int>(ceilDiv(tiles, per));
    if (n == last)
      continue;
    if (n > SplitModel::MAX_SPLITS || (n > 1 && teams_per_split * (n + 1) > SplitModel::MAX_WAVES * slot_count))
      break;
    last = n;
    std::vector<int> const work = sgemmLeagueWork(bounds, num_head_groups, row_tiles, nodes_per_tile, n, kv_tile);
    predicted.push_back({n, predictedLeagueTime(work, slots)});
  }
  auto const by_time = [](auto const &a, auto const &b) { return a.second < b.second; };
  double const best = std::min_element(predicted.begin(), predicted.end(), by_time)->second;
  // predicted is in ascending n, and the best itself is within the slack.
  return std::find_if(predicted.begin(), predicted.end(),
                      [&](auto const &c) { return c.second <= best * (1 + SplitModel::SLACK); })
      ->first;
}
} // namespace canopy::Impl
