#include "canopy_ExperimentConfig.hpp"

#include "canopy_Error.hpp"
#include "canopy_Registry.hpp"

#include "canopy_TomlTable.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace canopy
{
int paddedBucket(std::vector<int> const &buckets, int batch)
{
  for (int b : buckets)
    if (b >= batch)
      return b;
  throw InputError("batch of " + std::to_string(batch) + " requests exceeds the largest graph bucket (" +
                   std::to_string(buckets.empty() ? 0 : buckets.back()) + "): add a larger bucket to options.buckets");
}

namespace
{
template <class T>
void requireAtLeast(std::vector<T> const &v, T lo, std::string const &where)
{
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < lo)
      throw InputError(where + "[" + std::to_string(i) + "]: must be >= " + std::to_string(lo) + ", got " +
                       std::to_string(v[i]));
}

std::string hashText(std::string const &s)
{
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across platforms, unlike std::hash
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  std::ostringstream o;
  o << std::hex << h;
  return o.str();
}
} // namespace

ExperimentConfig parseExperimentConfig(std::string const &text, std::string const &source, std::string const &base_dir)
{
  toml::table const root = parseTomlText(text, source);
  ExperimentConfig c;
  c.hash = hashText(text);
  c.source_path = source;
  TomlTable top(&root, "");

  {
    TomlTable r = top.sub("experiment");
    r.get("name", c.name);
    r.get("description", c.description);
    r.get("seed", c.seed);
    r.get("warmup", c.warmup);
    r.get("repetitions", c.repetitions);
    r.get("baseline", c.baseline);
    r.get("check_rate", c.check_rate);
    double gflop = 0;
    r.get("max_check_gflop", gflop);
    c.max_check_flops = static_cast<int64_t>(gflop * 1e9);
    r.finish();
    if (c.warmup < 0)
      throw InputError("experiment.warmup: must be >= 0");
    if (c.repetitions < 1)
      throw InputError("experiment.repetitions: must be >= 1");
    if (c.check_rate < 0 || c.check_rate > 1)
      throw InputError("experiment.check_rate: must be in [0, 1]");
  }

  {
    TomlTable r = top.sub("inputs");
    r.getList("traces", c.traces);
    r.get("max_steps", c.max_steps);
    r.get("group_by", c.group_by);
    if (c.group_by != "trace" && c.group_by != "batch")
      throw InputError("inputs.group_by: expected \"trace\" or \"batch\", got \"" + c.group_by + "\"");
    for (size_t i = 0; i < c.traces.size(); ++i)
    {
      namespace fs = std::filesystem;
      if (!fs::exists(c.traces[i]) && fs::exists(fs::path(base_dir) / c.traces[i]))
        c.traces[i] = (fs::path(base_dir) / c.traces[i]).string();
      if (!fs::exists(c.traces[i]))
        throw InputError("inputs.traces[" + std::to_string(i) + "]: no such file '" + c.traces[i] + "'");
    }
    for (TomlTable &s : r.subArray("sweep"))
    {
      ShapeSweep sw;
      s.getList("batch", sw.batch);
      s.getList("heads", sw.heads);
      s.getList("tree", sw.tree);
      s.getList("prefix", sw.prefix);
      s.get("ragged", sw.ragged);
      s.get("steps", sw.steps);
      s.get("pool_slack", sw.pool_slack);
      s.get("mean_run", sw.mean_run);
      bool compacted = false;
      s.get("compacted", compacted);
      std::string values = toString(sw.values);
      s.get("values", values);
      sw.values = parseValueMode(values, s.path("values"));
      s.finish();
      if (compacted)
      {
        // A defragmented pool: every request's slots in one run, no holes.
        sw.pool_slack = 1.0;
        sw.mean_run = 1e18;
      }
      requireAtLeast(sw.batch, 1, s.path("batch"));
      requireAtLeast(sw.heads, 1, s.path("heads"));
      requireAtLeast(sw.tree, 1, s.path("tree"));
      requireAtLeast<int64_t>(sw.prefix, 0, s.path("prefix"));
      if (sw.steps < 1)
        throw InputError(s.path("steps") + ": must be >= 1");
      if (sw.pool_slack < 1)
        throw InputError(s.path("pool_slack") + ": must be >= 1");
      if (sw.mean_run < 1)
        throw InputError(s.path("mean_run") + ": must be >= 1");
      c.sweeps.push_back(sw);
    }
    r.finish();
  }
  if (c.traces.empty() && c.sweeps.empty())
    throw InputError("inputs: give traces = [...] and/or at least one [[inputs.sweep]]");

  {
    TomlTable r = top.sub("designs");
    r.getList("names", c.designs);
    r.finish();
    for (size_t i = 0; i < c.designs.size(); ++i)
    {
      try
      {
        makeDesign(c.designs[i]);
      }
      catch (InputError const &e)
      {
        throw InputError("designs.names[" + std::to_string(i) + "]: " + e.what());
      }
    }
  }
  if (c.designs.empty())
    throw InputError("designs.names: at least one design is needed");
  if (c.baseline.empty())
    c.baseline = c.designs.front();
  if (std::find(c.designs.begin(), c.designs.end(), c.baseline) == c.designs.end())
    throw InputError("experiment.baseline: '" + c.baseline + "' is not one of designs.names");

  {
    TomlTable r = top.sub("options");
    std::vector<std::string> masks, ws, modes;
    r.getList("mask", masks);
    if (!masks.empty())
      c.masks.clear();
    for (size_t i = 0; i < masks.size(); ++i)
      c.masks.push_back(parseMaskLayout(masks[i], "options.mask[" + std::to_string(i) + "]"));
    r.getList("nsplit", c.nsplit);
    requireAtLeast(c.nsplit, 0, "options.nsplit");  // 0 = auto (the design chooses from the bounds)
    r.getList("workspace", ws);
    if (!ws.empty())
      c.workspace.clear();
    for (size_t i = 0; i < ws.size(); ++i)
      c.workspace.push_back(parseWorkspaceStrategy(ws[i], "options.workspace[" + std::to_string(i) + "]"));
    r.getList("mode", modes);
    if (!modes.empty())
      c.modes.clear();
    for (size_t i = 0; i < modes.size(); ++i)
      c.modes.push_back(parseEnum<ExecMode>(modes[i], "options.mode[" + std::to_string(i) + "]"));
    r.getList("l2_flush", c.l2_flush);
    r.getList("buckets", c.buckets);
    requireAtLeast(c.buckets, 1, "options.buckets");
    for (size_t i = 1; i < c.buckets.size(); ++i)
      if (c.buckets[i] <= c.buckets[i - 1])
        throw InputError("options.buckets[" + std::to_string(i) + "]: buckets must increase");
    r.get("strict", c.strict);
    r.finish();
  }

  {
    TomlTable r = top.sub("peaks");
    double gf = 0, gb = 0;
    r.get("gflops", gf);
    r.get("gbytes_per_s", gb);
    r.finish();
    if (gf < 0 || gb < 0)
      throw InputError("peaks: values must be >= 0");
    c.peak_flops = gf * 1e9;
    c.peak_bytes_per_s = gb * 1e9;
  }

  {
    TomlTable r = top.sub("output");
    r.get("dir", c.out_dir);
    r.get("progress", c.progress);
    r.finish();
  }
  top.finish();
  return c;
}

ExperimentConfig loadExperimentConfig(std::string const &path)
{
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError("config: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseExperimentConfig(ss.str(), path, std::filesystem::path(path).parent_path().string());
}
} // namespace canopy
