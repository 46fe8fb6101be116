#include "canopy_Merge.hpp"

#include "canopy_Error.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace canopy
{
bool parseShardSpec(std::string const &text, int &index, int &count)
{
  size_t const slash = text.find('/');
  if (slash == std::string::npos || slash == 0)
    return false;
  try
  {
    size_t a = 0, b = 0;
    int const k = std::stoi(text.substr(0, slash), &a);
    int const n = std::stoi(text.substr(slash + 1), &b);
    if (a != slash || b != text.size() - slash - 1 || n < 1 || k < 0 || k >= n)
      return false;
    index = k;
    count = n;
    return true;
  }
  catch (std::exception const &)
  {
    return false;
  }
}

std::string runLayoutText(RunLayout const &l)
{
  return "sources=" + std::to_string(l.sources) + " combinations=" + std::to_string(l.combinations) +
         " designs=" + std::to_string(l.designs);
}

bool orderInShard(RunLayout const &l, int64_t order, int index, int count)
{
  int64_t const designs = std::max<int64_t>(1, l.designs);
  int64_t const combos = std::max<int64_t>(1, l.combinations);
  int64_t const unit = (order / combos) * (combos / designs) + (order % combos) / designs;
  return unit % count == index;
}

namespace
{
std::string envOf(ShardResults const &s, std::string const &key)
{
  auto it = s.results.environment.find(key);
  return it == s.results.environment.end() ? std::string() : it->second;
}

/// "K/N" -> (K, N); InputError naming the shard otherwise.
std::pair<int, int> shardId(ShardResults const &s)
{
  std::string const v = envOf(s, "shard");
  int k = 0, n = 0;
  if (!parseShardSpec(v, k, n))
    throw InputError(s.source + ": environment.shard is \"" + v + "\", expected K/N (results of canopy run --shard K/N)");
  return {k, n};
}

/// What one shard's environment says about the card and the moment it ran on. A merge keeps these
/// per shard (environment.shard_K), since the rows of different shards ran on different GPUs.
char const *const kShardDeviceKeys[] = {"host", "device", "gpu_index", "gpu_uuid", "gpu_pci_bus_id",
                                        "cuda_visible_devices", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz",
                                        "cuda_driver", "peaks", "date"};
/// Of those, the ones that name a single card: the merged block drops them rather than let shard 0's
/// GPU stand for every row.
char const *const kOneCardKeys[] = {"gpu_index", "gpu_uuid", "gpu_pci_bus_id", "cuda_visible_devices"};

/// "host=...; device=...; gpu_index=...": the entries of kShardDeviceKeys that the shard recorded.
std::string shardDeviceRecord(ShardResults const &s)
{
  std::string record;
  for (char const *key : kShardDeviceKeys)
    if (s.results.environment.count(key))
      record += (record.empty() ? "" : "; ") + std::string(key) + "=" + envOf(s, key);
  return record;
}

RunLayout layoutOf(ShardResults const &s)
{
  RunLayout l;
  long long a = 0, b = 0, c = 0;
  std::string const v = envOf(s, "layout");
  if (std::sscanf(v.c_str(), "sources=%lld combinations=%lld designs=%lld", &a, &b, &c) != 3 || a < 0 || b < 1 || c < 1)
    throw InputError(s.source + ": environment.layout is \"" + v +
                     "\", expected \"sources=S combinations=C designs=D\" (results of canopy run)");
  l.sources = a;
  l.combinations = b;
  l.designs = c;
  return l;
}

/// A shard holds exactly the rows its config gives it: every order of its units, none of another
/// shard's, no (order, group) twice, and as many rows as it wrote.
void checkShardRows(ShardResults const &s, int k, int n)
{
  RunLayout const l = layoutOf(s);
  std::set<int64_t> orders;
  std::set<std::pair<int64_t, std::string>> keys;
  for (size_t i = 0; i < s.results.rows.size(); ++i)
  {
    ResultRow const &r = s.results.rows[i];
    std::string const where = s.source + ": rows[" + std::to_string(i) + "] (order " + std::to_string(r.order) + ", " +
                              r.design + ", " + r.group + ")";
    if (r.order < 0 || r.order >= l.sources * l.combinations || !orderInShard(l, r.order, k, n))
      throw InputError(where + ": is not a row of shard " + std::to_string(k) + "/" + std::to_string(n) +
                       " of this config");
    if (!keys.emplace(r.order, r.group).second)
      throw InputError(where + ": appears twice in the shard");
    orders.insert(r.order);
  }
  for (int64_t o = 0; o < l.sources * l.combinations; ++o)
    if (orderInShard(l, o, k, n) && !orders.count(o))
      throw InputError(s.source + ": row order " + std::to_string(o) + " of shard " + std::to_string(k) + "/" +
                       std::to_string(n) + " is missing (its config gives it " + runLayoutText(l) + ")");
  std::string const wrote = envOf(s, "rows");
  if (wrote != std::to_string(s.results.rows.size()))
    throw InputError(s.source + ": holds " + std::to_string(s.results.rows.size()) + " rows, but the run wrote " +
                     (wrote.empty() ? std::string("an unknown number") : wrote) + " (rows removed or added by hand?)");
  if (envOf(s, "rows_identity") != rowsIdentityDigest(s.results.rows))
    throw InputError(s.source + ": its rows are not the ones the run wrote (environment.rows_identity differs from "
                     "their design, input, group, options and order: a row edited by hand?); rerun the shard");
}
} // namespace

ResultSet mergeShards(std::vector<ShardResults> const &shards, MergeOptions const &options)
{
  if (shards.empty())
    throw InputError("merge: no shard results given");
  ShardResults const &first = shards.front();
  int const count = shardId(first).second;
  // What must be equal for the rows to be one run's: the experiment, the config text, the traces'
  // contents (a trace regenerated at the same path between shards is another input), the work
  // layout, the binary, the seed (inputs and checked steps derive from it), and the statistics settings.
  char const *const same[] = {"config_hash", "trace_hashes", "layout", "canopy_build", "seed"};
  std::map<int, std::string> seen;
  std::set<std::string> hosts;
  for (ShardResults const &s : shards)
  {
    auto const [k, n] = shardId(s);
    if (n != count)
      throw InputError(s.source + ": shard " + std::to_string(k) + "/" + std::to_string(n) + " is from a split into " +
                       std::to_string(n) + " shards, " + first.source + " from one into " + std::to_string(count));
    if (seen.count(k))
      throw InputError(s.source + ": shard " + std::to_string(k) + "/" + std::to_string(n) + " is given twice (also " +
                       seen[k] + ")");
    seen[k] = s.source;
    if (s.results.experiment != first.results.experiment)
      throw InputError(s.source + ": experiment \"" + s.results.experiment + "\" differs from \"" +
                       first.results.experiment + "\" of " + first.source);
    for (char const *key : same)
      if (envOf(s, key) != envOf(first, key))
        throw InputError(s.source + ": " + key + " \"" + envOf(s, key) + "\" differs from \"" + envOf(first, key) +
                         "\" of " + first.source + " (shards of one run share the config, binary and seed)");
    if (s.results.repetitions != first.results.repetitions || s.results.baseline != first.results.baseline)
      throw InputError(s.source + ": repetitions or baseline differ from " + first.source);
    if (!options.allow_mixed_devices && envOf(s, "device") != envOf(first, "device"))
      throw InputError(s.source + ": device \"" + envOf(s, "device") + "\" differs from \"" + envOf(first, "device") +
                       "\" of " + first.source + " (pass --allow-mixed-devices to merge anyway)");
    hosts.insert(envOf(s, "host"));
  }
  std::string missing;
  for (int k = 0; k < count; ++k)
    if (!seen.count(k))
      missing += (missing.empty() ? "" : ", ") + std::to_string(k);
  if (!missing.empty())
    throw InputError("merge: shard(s) " + missing + " of " + std::to_string(count) + " missing (given: " +
                     std::to_string(seen.size()) + ")");

  ResultSet merged = first.results;
  merged.rows.clear();
  std::map<int64_t, std::string> row_owner;
  for (ShardResults const &s : shards)
  {
    std::set<int64_t> orders;
    for (ResultRow const &r : s.results.rows)
      orders.insert(r.order);
    for (int64_t o : orders)
      if (!row_owner.emplace(o, s.source).second)
        throw InputError(s.source + ": row " + std::to_string(o) + " of the run is also in " + row_owner[o] +
                         " (overlapping shards)");
    merged.rows.insert(merged.rows.end(), s.results.rows.begin(), s.results.rows.end());
  }
  for (ShardResults const &s : shards)
  {
    auto const [k, n] = shardId(s);
    checkShardRows(s, k, n);
  }
  std::stable_sort(merged.rows.begin(), merged.rows.end(),
                   [](ResultRow const &a, ResultRow const &b) { return a.order < b.order; });
  std::string devices, host_list;
  for (ShardResults const &s : shards)
    if (devices.find(envOf(s, "device")) == std::string::npos)
      devices += (devices.empty() ? "" : "; ") + envOf(s, "device");
  for (std::string const &h : hosts)
    host_list += (host_list.empty() ? "" : ", ") + h;
  for (char const *key : kOneCardKeys)
    merged.environment.erase(key);
  for (ShardResults const &s : shards)
    merged.environment["shard_" + std::to_string(shardId(s).first)] = shardDeviceRecord(s);
  merged.environment["shard"] = "merged " + std::to_string(count) + " shards";
  merged.environment["host"] = host_list;
  merged.environment["device"] = devices;
  merged.environment["rows"] = std::to_string(merged.rows.size());
  merged.environment["rows_identity"] = rowsIdentityDigest(merged.rows);
  computeSpeedups(merged);
  return merged;
}
} // namespace canopy
