#include "canopy_ExperimentConfig.hpp"

#include "canopy_Error.hpp"
#include "canopy_Registry.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace canopy
{
std::string toString(ExecMode m) { return m == ExecMode::kGraph ? "graph" : "eager"; }

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
/// Walks a TOML table, rejecting keys it does not know, and reads typed values with key paths in errors.
class Reader
{
public:
  Reader(toml::table const &t, std::string prefix) : _t(t), _prefix(std::move(prefix)) {}

  void allow(std::set<std::string> const &keys) const
  {
    for (auto const &[k, v] : _t)
      if (!keys.count(std::string(k.str())))
      {
        std::string known;
        for (auto const &x : keys)
          known += (known.empty() ? "" : ", ") + x;
        throw InputError(path(std::string(k.str())) + ": unknown key (known here: " + known + ")");
      }
  }
  std::string path(std::string const &key) const { return _prefix.empty() ? key : _prefix + "." + key; }
  bool has(std::string const &key) const { return _t.contains(key); }

  template <class T>
  void get(std::string const &key, T &out) const
  {
    if (auto const *node = _t.get(key))
      out = convert<T>(*node, path(key));
  }
  /// A scalar or an array of scalars; a scalar becomes a one-element list.
  template <class T>
  void getList(std::string const &key, std::vector<T> &out) const
  {
    auto const *node = _t.get(key);
    if (!node)
      return;
    out.clear();
    if (auto const *arr = node->as_array())
    {
      for (size_t i = 0; i < arr->size(); ++i)
        out.push_back(convert<T>(*arr->get(i), path(key) + "[" + std::to_string(i) + "]"));
      if (out.empty())
        throw InputError(path(key) + ": empty list");
    }
    else
      out.push_back(convert<T>(*node, path(key)));
  }
  toml::table const *table(std::string const &key) const
  {
    auto const *node = _t.get(key);
    if (!node)
      return nullptr;
    if (!node->is_table())
      throw InputError(path(key) + ": expected a table");
    return node->as_table();
  }

  template <class T>
  static T convert(toml::node const &n, std::string const &where)
  {
    if constexpr (std::is_same_v<T, bool>)
    {
      if (auto v = n.value_exact<bool>())
        return *v;
      throw InputError(where + ": expected true or false");
    }
    else if constexpr (std::is_integral_v<T>)
    {
      if (auto v = n.value_exact<int64_t>())
      {
        if (*v < static_cast<int64_t>(std::numeric_limits<T>::min()) || *v > static_cast<int64_t>(std::numeric_limits<T>::max()))
          throw InputError(where + ": " + std::to_string(*v) + " is out of range");
        return static_cast<T>(*v);
      }
      throw InputError(where + ": expected an integer");
    }
    else if constexpr (std::is_floating_point_v<T>)
    {
      if (auto v = n.value<double>())
        return static_cast<T>(*v);
      throw InputError(where + ": expected a number");
    }
    else
    {
      if (auto v = n.value_exact<std::string>())
        return *v;
      throw InputError(where + ": expected a string");
    }
  }

private:
  toml::table const &_t;
  std::string _prefix;
};

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
  toml::table root;
  try
  {
    root = toml::parse(text, source);
  }
  catch (toml::parse_error const &e)
  {
    std::ostringstream o;
    o << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": TOML syntax error: "
      << e.description();
    throw InputError(o.str());
  }
  ExperimentConfig c;
  c.hash = hashText(text);
  c.source_path = source;
  Reader top(root, "");
  top.allow({"experiment", "inputs", "designs", "options", "peaks", "output"});

  if (auto const *t = top.table("experiment"))
  {
    Reader r(*t, "experiment");
    r.allow({"name", "description", "seed", "warmup", "repetitions", "baseline", "check_rate", "max_check_gflop"});
    r.get("name", c.name);
    r.get("description", c.description);
    int64_t seed = static_cast<int64_t>(c.seed);
    r.get("seed", seed);
    c.seed = static_cast<uint64_t>(seed);
    r.get("warmup", c.warmup);
    r.get("repetitions", c.repetitions);
    r.get("baseline", c.baseline);
    r.get("check_rate", c.check_rate);
    double gflop = 0;
    r.get("max_check_gflop", gflop);
    c.max_check_flops = static_cast<int64_t>(gflop * 1e9);
    if (c.warmup < 0)
      throw InputError("experiment.warmup: must be >= 0");
    if (c.repetitions < 1)
      throw InputError("experiment.repetitions: must be >= 1");
    if (c.check_rate < 0 || c.check_rate > 1)
      throw InputError("experiment.check_rate: must be in [0, 1]");
  }

  if (auto const *t = top.table("inputs"))
  {
    Reader r(*t, "inputs");
    r.allow({"traces", "max_steps", "group_by", "sweep"});
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
    if (auto const *node = t->get("sweep"))
    {
      auto const *arr = node->as_array();
      if (!arr)
        throw InputError("inputs.sweep: expected an array of tables ([[inputs.sweep]])");
      for (size_t i = 0; i < arr->size(); ++i)
      {
        auto const *st = arr->get(i)->as_table();
        std::string const where = "inputs.sweep[" + std::to_string(i) + "]";
        if (!st)
          throw InputError(where + ": expected a table");
        Reader s(*st, where);
        s.allow({"batch", "heads", "tree", "prefix", "ragged", "steps", "pool_slack", "mean_run", "compacted"});
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
        if (compacted)
        {
          // A defragmented pool: every request's slots in one run, no holes.
          sw.pool_slack = 1.0;
          sw.mean_run = 1e18;
        }
        if (sw.mean_run < 1)
          throw InputError(where + ".mean_run: must be >= 1");
        requireAtLeast(sw.batch, 1, where + ".batch");
        requireAtLeast(sw.heads, 1, where + ".heads");
        requireAtLeast(sw.tree, 1, where + ".tree");
        requireAtLeast<int64_t>(sw.prefix, 0, where + ".prefix");
        if (sw.steps < 1)
          throw InputError(where + ".steps: must be >= 1");
        if (sw.pool_slack < 1)
          throw InputError(where + ".pool_slack: must be >= 1");
        c.sweeps.push_back(sw);
      }
    }
  }
  if (c.traces.empty() && c.sweeps.empty())
    throw InputError("inputs: give traces = [...] and/or at least one [[inputs.sweep]]");

  if (auto const *t = top.table("designs"))
  {
    Reader r(*t, "designs");
    r.allow({"names"});
    r.getList("names", c.designs);
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

  if (auto const *t = top.table("options"))
  {
    Reader r(*t, "options");
    r.allow({"mask", "nsplit", "workspace", "mode", "l2_flush", "buckets", "strict"});
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
    {
      if (modes[i] == "eager")
        c.modes.push_back(ExecMode::kEager);
      else if (modes[i] == "graph")
        c.modes.push_back(ExecMode::kGraph);
      else
        throw InputError("options.mode[" + std::to_string(i) + "]: expected \"eager\" or \"graph\", got \"" + modes[i] + "\"");
    }
    r.getList("l2_flush", c.l2_flush);
    r.getList("buckets", c.buckets);
    requireAtLeast(c.buckets, 1, "options.buckets");
    for (size_t i = 1; i < c.buckets.size(); ++i)
      if (c.buckets[i] <= c.buckets[i - 1])
        throw InputError("options.buckets[" + std::to_string(i) + "]: buckets must increase");
    r.get("strict", c.strict);
  }

  if (auto const *t = top.table("peaks"))
  {
    Reader r(*t, "peaks");
    r.allow({"gflops", "gbytes_per_s"});
    double gf = 0, gb = 0;
    r.get("gflops", gf);
    r.get("gbytes_per_s", gb);
    if (gf < 0 || gb < 0)
      throw InputError("peaks: values must be >= 0");
    c.peak_flops = gf * 1e9;
    c.peak_bytes_per_s = gb * 1e9;
  }

  if (auto const *t = top.table("output"))
  {
    Reader r(*t, "output");
    r.allow({"dir", "progress"});
    r.get("dir", c.out_dir);
    r.get("progress", c.progress);
  }
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
