#include "canopy_ExperimentConfig.hpp"

#include "canopy_BoundedRead.hpp"

#include "canopy_Error.hpp"
#include "canopy_InputLimits.hpp"
#include "canopy_Registry.hpp"

#include "canopy_TomlTable.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
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
/// A `kv_dtype` key: a dtype name or a list of them, each known and none twice.
std::vector<KvDtype> parseKvDtypes(TomlTable &t, std::string const &key)
{
  std::vector<std::string> names;
  t.getList(key, names);
  requireUnique(names, t.path(key));
  std::vector<KvDtype> out;
  for (size_t i = 0; i < names.size(); ++i)
    out.push_back(parseKvDtype(names[i], t.path(key) + "[" + std::to_string(i) + "]"));
  return out;
}

/// A `kv_scale` key: finite and > 0 once it is an fp32, as SGLang's k_scale is.
float parseKvScale(TomlTable &t, std::string const &key, float fallback)
{
  double s = fallback;
  t.get(key, s);
  if (!(std::isfinite(s) && s > 0 && s <= std::numeric_limits<float>::max() && static_cast<float>(s) > 0))
    throw InputError(t.path(key) + ": must be a finite number > 0 that an fp32 holds (the per-tensor scale of "
                     "fp8-e4m3 / fp8-e5m2), got " + std::to_string(s));
  return static_cast<float>(s);
}

/// A KV dtype some input of the config is replayed in, and the key that asked for it.
struct DtypeInUse
{
  KvDtype dtype;
  std::string key;
};
} // namespace

namespace
{
constexpr uint64_t FNV_OFFSET = 1469598103934665603ull;  // FNV-1a: stable across platforms, unlike std::hash

uint64_t fnv1a(uint64_t h, char const *data, size_t n)
{
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

std::string hexOf(uint64_t h)
{
  std::ostringstream o;
  o << std::hex << h;
  return o.str();
}
} // namespace

void refuseNumericsUndefinedForAll(std::vector<Numerics> const &numerics, std::vector<KvDtype> const &dtypes,
                                   std::vector<std::string> const &where)
{
  for (size_t i = 0; i < numerics.size(); ++i)
    if (numericsUndefinedForAll(dtypes, numerics[i]))
      throw InputError("options.numerics[" + std::to_string(i) + "]: " + numericsUndefinedFor(dtypes[0], numerics[i]) +
                       " (" + where[0] + ")");
}

std::string contentHash(std::string const &bytes) { return hexOf(fnv1a(FNV_OFFSET, bytes.data(), bytes.size())); }

std::string fileContentHash(std::string const &path)
{
  requireRegularFile(path, "trace");  // a device or FIFO never ends
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(path + ": cannot be read to hash its contents");
  uint64_t h = FNV_OFFSET;
  std::vector<char> buf(1 << 20);
  while (in)
  {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv1a(h, buf.data(), static_cast<size_t>(in.gcount()));
  }
  return hexOf(h);
}

ExperimentConfig parseExperimentConfig(std::string const &text, std::string const &source, std::string const &base_dir)
{
  toml::table const root = parseTomlText(text, source);
  ExperimentConfig c;
  std::vector<DtypeInUse> in_use;           // for the numerics check below
  c.hash = contentHash(text);
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
    r.finish();
    requireWithin(limits::WARMUP, c.warmup, r.path("warmup"));
    requireWithin(limits::REPETITIONS, c.repetitions, r.path("repetitions"));
    requireFinite(c.check_rate, 0, 1, r.path("check_rate"));
    requireFinite(gflop, 0, 1e9, r.path("max_check_gflop"));  // 0 = no limit
    c.max_check_flops = static_cast<int64_t>(gflop * 1e9);
  }

  {
    TomlTable r = top.sub("inputs");
    r.getList("traces", c.traces);
    r.get("max_steps", c.max_steps);
    requireWithin(limits::MAX_STEPS, c.max_steps, r.path("max_steps"));
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
    std::vector<std::string> resolved;
    for (std::string const &t : c.traces)
      resolved.push_back(std::filesystem::weakly_canonical(t).string());
    requireUnique(resolved, r.path("traces"));
    c.kv_dtypes = parseKvDtypes(r, "kv_dtype");
    c.kv_scale = parseKvScale(r, "kv_scale", 1.0f);
    for (size_t j = 0; j < c.kv_dtypes.size(); ++j)
      in_use.push_back({c.kv_dtypes[j], r.path("kv_dtype") + "[" + std::to_string(j) + "]"});
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
      sw.kv_dtypes = c.kv_dtypes.empty() ? std::vector<KvDtype>{KvDtype::kBf16} : c.kv_dtypes;
      if (s.has("kv_dtype"))
      {
        sw.kv_dtypes = parseKvDtypes(s, "kv_dtype");
        for (size_t j = 0; j < sw.kv_dtypes.size(); ++j)
          in_use.push_back({sw.kv_dtypes[j], s.path("kv_dtype") + "[" + std::to_string(j) + "]"});
      }
      else if (c.kv_dtypes.empty())
        in_use.push_back({KvDtype::kBf16, s.path("kv_dtype") + " (not set: bf16)"});
      sw.kv_scale = parseKvScale(s, "kv_scale", c.kv_scale);
      s.finish();
      if (compacted)
      {
        // A defragmented pool: every request's slots in one run, no holes.
        sw.pool_slack = 1.0;
        sw.mean_run = 1e18;
      }
      requireWithin(limits::BATCH, sw.batch, s.path("batch"));
      requireWithin(limits::HEADS, sw.heads, s.path("heads"));
      requireWithin(limits::TREE, sw.tree, s.path("tree"));
      requireWithin(limits::PREFIX, sw.prefix, s.path("prefix"));
      requireWithin(limits::STEPS, sw.steps, s.path("steps"));
      requireUnique(sw.batch, s.path("batch"));
      requireUnique(sw.heads, s.path("heads"));
      requireUnique(sw.tree, s.path("tree"));
      requireUnique(sw.prefix, s.path("prefix"));
      requireFinite(sw.pool_slack, 1, 1e6, s.path("pool_slack"));
      requireFinite(sw.mean_run, 1, 1e18, s.path("mean_run"));
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
    requireUnique(c.designs, r.path("names"));
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
    requireUnique(masks, r.path("mask"));
    if (!masks.empty())
      c.masks.clear();
    for (size_t i = 0; i < masks.size(); ++i)
      c.masks.push_back(parseMaskLayout(masks[i], "options.mask[" + std::to_string(i) + "]"));
    r.getList("nsplit", c.nsplit);
    requireWithin(limits::NSPLIT, c.nsplit, r.path("nsplit"));  // 0 = auto (the design chooses from the bounds)
    requireUnique(c.nsplit, r.path("nsplit"));
    r.getList("workspace", ws);
    requireUnique(ws, r.path("workspace"));
    if (!ws.empty())
      c.workspace.clear();
    for (size_t i = 0; i < ws.size(); ++i)
      c.workspace.push_back(parseWorkspaceStrategy(ws[i], "options.workspace[" + std::to_string(i) + "]"));
    r.getList("mode", modes);
    requireUnique(modes, r.path("mode"));
    if (!modes.empty())
      c.modes.clear();
    for (size_t i = 0; i < modes.size(); ++i)
      c.modes.push_back(parseEnum<ExecMode>(modes[i], "options.mode[" + std::to_string(i) + "]"));
    r.getList("l2_flush", c.l2_flush);
    requireUnique(c.l2_flush, r.path("l2_flush"));
    r.getList("buckets", c.buckets);
    requireWithin(limits::BUCKET, c.buckets, r.path("buckets"));
    for (size_t i = 1; i < c.buckets.size(); ++i)
      if (c.buckets[i] <= c.buckets[i - 1])
        throw InputError("options.buckets[" + std::to_string(i) + "]: buckets must increase");
    r.get("strict", c.strict);
    std::vector<std::string> numerics;
    r.getList("numerics", numerics);
    requireUnique(numerics, r.path("numerics"));
    if (!numerics.empty())
      c.numerics.clear();
    for (size_t i = 0; i < numerics.size(); ++i)
      c.numerics.push_back(parseNumerics(numerics[i], "options.numerics[" + std::to_string(i) + "]"));
    r.finish();
    // A numerics with no meaning for a dtype (fp8-mma on a bf16 or block-scaled pool) gives that
    // input's rows as skipped, saying so, so that one run can put bf16, dequant and fp8-mma side
    // by side; a numerics with no meaning for any input is a mistake, refused before any work. A
    // trace replayed as stored has its dtype in the file: makeSources checks once it is opened.
    bool const stored_traces = !c.traces.empty() && c.kv_dtypes.empty();
    std::vector<KvDtype> dtypes;
    std::vector<std::string> keys;
    for (DtypeInUse const &u : in_use)
    {
      dtypes.push_back(u.dtype);
      keys.push_back(u.key);
    }
    if (!stored_traces)
      refuseNumericsUndefinedForAll(c.numerics, dtypes, keys);
  }

  {
    TomlTable r = top.sub("peaks");
    double gf = 0, gb = 0;
    r.get("gflops", gf);
    r.get("gbytes_per_s", gb);
    r.finish();
    requireFinite(gf, 0, 1e12, r.path("gflops"));
    requireFinite(gb, 0, 1e12, r.path("gbytes_per_s"));
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
  return parseExperimentConfig(readConfigText(path), path, std::filesystem::path(path).parent_path().string());
}
} // namespace canopy
