/// \file canopy_TraceCommand.cpp
/// \brief `canopy trace synth | info | validate`: make synthetic DDTree verify traces from a TOML
/// config and/or flags, summarize a trace, and validate one (exit 2 naming the dataset and index).
#include "canopy_Commands.hpp"
#include "canopy_Error.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Results.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceSimulator.hpp"
#include "canopy_TraceStats.hpp"
#include "canopy_TraceWriter.hpp"

#include "canopy_TomlTable.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace canopy::cli
{
namespace
{
using Table = TomlTable;

void readLength(Table t, LengthDistribution &d)
{
  std::string kind = toString(d.kind);
  t.get("dist", kind);
  d.kind = parseLengthKind(kind, t.path("dist"));
  t.get("value", d.value);
  t.get("min", d.min);
  t.get("max", d.max);
  t.get("median", d.median);
  t.get("sigma", d.sigma);
  t.finish();
}

SimulatorConfig readSimulatorToml(std::string const &file)
{
  toml::table const doc = parseTomlText(readConfigText(file), file);
  SimulatorConfig c;
  Table root(&doc, "");
  root.get("seed", c.seed);
  root.get("steps", c.steps);
  root.get("warmup_steps", c.warmup_steps);
  root.get("source", c.source);
  {
    Table t = root.sub("model");
    t.get("num_heads", c.shape.num_heads);
    t.get("sm_scale", c.shape.sm_scale);
    std::string kv_dtype = toString(c.kv_dtype);
    t.get("kv_dtype", kv_dtype);
    c.kv_dtype = parseKvDtype(kv_dtype, t.path("kv_dtype"));
    t.get("kv_scale", c.kv_dtype_scale);
    t.finish();
  }
  {
    Table t = root.sub("arrivals");
    std::string mode = toString(c.arrivals);
    t.get("mode", mode);
    c.arrivals = parseEnum<SimulatorConfig::Arrivals>(mode, "arrivals.mode");
    t.get("concurrency", c.concurrency);
    t.get("rate", c.rate);
    t.get("max_running", c.max_running);
    t.finish();
  }
  readLength(root.sub("prompt"), c.prompt);
  readLength(root.sub("output"), c.output);
  {
    Table t = root.sub("pool");
    t.get("num_slots", c.num_slots);
    t.get("sort_free", c.sort_free);
    t.get("compact_every", c.compact_every);
    t.get("initial_run", c.initial_run);
    t.finish();
  }
  {
    Table t = root.sub("draft");
    std::string profile;
    t.get("profile", profile);
    if (!profile.empty())  // first, so that the keys below refine the profile
      applyDrafterProfile(c, profile, t.path("profile"));
    t.get("budget", c.budget);
    t.get("max_depth", c.max_depth);
    t.get("top_k", c.top_k);
    t.get("alpha_top", c.alpha_top);
    t.get("alpha_rest", c.alpha_rest);
    t.get("alpha_tail", c.alpha_tail);
    t.get("depth_decay", c.depth_decay);
    t.finish();
  }
  {
    Table t = root.sub("target");
    t.get("agreement", c.agreement);
    t.get("sharpness", c.sharpness);
    t.finish();
  }
  {
    Table t = root.sub("values");
    t.get("enabled", c.values);
    t.get("seed", c.values_seed);
    t.get("q_scale", c.q_scale);
    t.get("kv_scale", c.kv_scale);
    t.finish();
  }
  root.finish();
  return c;
}

struct SynthFlags
{
  std::string config, out, summary, drafter, kv_dtype;
  uint64_t seed = 0;
  int64_t steps = 0, warmup = 0, num_slots = 0, compact_every = 0, initial_run = 0, prompt = 0, output = 0;
  int concurrency = 0, budget = 0, heads = 0, deflate = 4, max_depth = 0, top_k = 0;
  float kv_scale = 1.0f;
  double rate = 0, alpha_top = 0, alpha_rest = 0, alpha_tail = 0, depth_decay = 0, agreement = 0, sharpness = 0;
  bool values = false, sort_free = false, quiet = false, overwrite = false;
  std::map<std::string, CLI::Option *> given;
  bool has(char const *flag) const
  {
    auto it = given.find(flag);
    return it != given.end() && it->second->count() > 0;
  }
};

/// The synthesis in numbers, for scripts (the budget study reads the acceptance curve from it).
void writeSynthSummary(std::string const &path, std::string const &trace, SimulatorConfig const &c,
                       SimulatorSummary const &s, TraceStats const &t)
{
  auto dist = [](Distribution const &d) {
    return nlohmann::json{{"mean", d.mean}, {"min", d.min}, {"p10", d.p10}, {"p50", d.p50}, {"p90", d.p90}, {"max", d.max}};
  };
  nlohmann::json j{
      {"trace", trace},
      {"seed", c.seed},
      {"budget", c.budget},
      {"tree_nodes", c.budget + 1},
      {"draft", {{"max_depth", c.max_depth}, {"top_k", c.top_k}, {"alpha_top", c.alpha_top}, {"alpha_rest", c.alpha_rest},
                 {"alpha_tail", c.alpha_tail}, {"depth_decay", c.depth_decay}, {"agreement", c.agreement},
                 {"sharpness", c.sharpness}}},
      {"steps", s.steps},
      {"rows", s.rows},
      {"mean_batch", s.mean_batch},
      {"mean_accepted", s.mean_accepted},
      {"accepted_histogram", t.accepted_histogram},
      {"rank1_at_first_mismatch", s.rank1_at_first_mismatch},
      {"mean_run_length", s.mean_run_length},
      {"prefix", dist(t.prefix)},
      {"tree", dist(t.tree)},
      {"depth", dist(t.depth)},
      {"root_children", dist(t.root_children)},
      {"widest", dist(t.widest)},
      {"mean_branching", t.mean_branching},
  };
  try
  {
    writeFileAtomically(path, j.dump(2) + "\n");
  }
  catch (RuntimeFailure const &e)
  {
    throw RuntimeFailure(std::string("--summary: ") + e.what());
  }
}


int runSynth(SynthFlags const &f)
{
  SimulatorConfig c = f.config.empty() ? SimulatorConfig{} : readSimulatorToml(f.config);
  // A flag given on the command line overrides the config file, in this order (the drafter profile
  // first, so that the tree-shape flags after it override the profile's values).
  auto over = [&f](char const *flag, auto &field, auto const &value) {
    if (f.has(flag))
      field = value;
  };
  if (f.has("--concurrency") && f.has("--rate"))
    throw InputError("--concurrency and --rate: give one (fixed concurrency or Poisson arrivals), not both");
  // Refused before the simulation runs, not after.
  if (f.out.empty())
    throw InputError("--out: empty; give the trace file to write");
  if (!f.overwrite && std::filesystem::exists(f.out))
    throw InputError("--out: '" + f.out + "' exists; pass --overwrite to replace it");
  requireFolderOf(f.out, "--out");
  if (!f.summary.empty())
    requireFolderOf(f.summary, "--summary");
  over("--seed", c.seed, f.seed);
  over("--steps", c.steps, f.steps);
  over("--warmup", c.warmup_steps, f.warmup);
  if (f.has("--concurrency"))
  {
    c.arrivals = SimulatorConfig::Arrivals::kFixed;
    c.concurrency = f.concurrency;
  }
  if (f.has("--rate"))
  {
    c.arrivals = SimulatorConfig::Arrivals::kPoisson;
    c.rate = f.rate;
  }
  if (f.has("--drafter"))
    applyDrafterProfile(c, f.drafter, "--drafter");
  over("--budget", c.budget, f.budget);
  over("--max-depth", c.max_depth, f.max_depth);
  over("--top-k", c.top_k, f.top_k);
  over("--alpha-top", c.alpha_top, f.alpha_top);
  over("--alpha-rest", c.alpha_rest, f.alpha_rest);
  over("--alpha-tail", c.alpha_tail, f.alpha_tail);
  over("--depth-decay", c.depth_decay, f.depth_decay);
  over("--agreement", c.agreement, f.agreement);
  over("--sharpness", c.sharpness, f.sharpness);
  over("--prompt", c.prompt, LengthDistribution{LengthDistribution::Kind::kFixed, f.prompt, 1, 1, 1, 0});
  over("--output", c.output, LengthDistribution{LengthDistribution::Kind::kFixed, f.output, 1, 1, 1, 0});
  over("--initial-run", c.initial_run, f.initial_run);
  over("--heads", c.shape.num_heads, f.heads);
  over("--num-slots", c.num_slots, f.num_slots);
  over("--compact-every", c.compact_every, f.compact_every);
  if (f.has("--kv-dtype"))
    c.kv_dtype = parseKvDtype(f.kv_dtype, "--kv-dtype");
  if (f.has("--kv-scale"))
  {
    if (!kvDtypeHasScale(c.kv_dtype))
      throw InputError("--kv-scale: applies to kv dtype fp8-e4m3 and fp8-e5m2 only, not " + toString(c.kv_dtype) +
                       (c.kv_dtype == KvDtype::kFp8E4m3BlockScaled ? " (its rows carry their own block scales)" : ""));
    if (!(std::isfinite(f.kv_scale) && f.kv_scale > 0))
      throw InputError("--kv-scale: must be finite and > 0, got " + std::to_string(f.kv_scale));
    c.kv_dtype_scale = f.kv_scale;
  }
  if (f.sort_free)
    c.sort_free = true;
  if (f.values)
    c.values = true;

  auto const t0 = std::chrono::steady_clock::now();
  SimulatorSummary s;
  TraceColumns const columns = simulateTrace(c, &s);
  TraceStats const stats = computeTraceStats(columns);
  auto const t1 = std::chrono::steady_clock::now();
  TraceWriteOptions w;
  w.deflate_level = f.deflate;
  writeTraceColumns(f.out, columns, w);
  auto const t2 = std::chrono::steady_clock::now();
  if (!f.quiet)
  {
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("wrote %s: %lld steps, %lld request rows (%lld admitted, %lld finished, %lld retracted), "
                "%lld tree nodes, %lld prefix tokens, %.1f MB%s\n",
                f.out.c_str(), static_cast<long long>(s.steps), static_cast<long long>(s.rows),
                static_cast<long long>(s.admitted), static_cast<long long>(s.finished),
                static_cast<long long>(s.retracted), static_cast<long long>(s.nodes),
                static_cast<long long>(s.prefix_tokens), static_cast<double>(std::filesystem::file_size(f.out)) * 1e-6,
                c.values ? " (with /values)" : "");
    if (c.kv_dtype != KvDtype::kBf16)
      std::printf("kv dtype %s%s (format v%lld)\n", toString(c.kv_dtype).c_str(),
                  kvDtypeHasScale(c.kv_dtype) ? (", kv scale " + std::to_string(c.kv_dtype_scale)).c_str() : "",
                  static_cast<long long>(traceFormatVersionFor(c.kv_dtype)));
    std::printf("mean batch %.2f, mean accepted length %.3f, target took the rank-1 sibling at %.1f%% of first "
                "mismatches, mean slot run %.2f, peak slots used %lld of %lld, %lld compactions\n",
                s.mean_batch, s.mean_accepted, 100.0 * s.rank1_at_first_mismatch, s.mean_run_length,
                static_cast<long long>(s.peak_used_slots), static_cast<long long>(c.num_slots),
                static_cast<long long>(s.compactions));
    std::printf("trees: depth %.2f (max %lld), root fan-out %.2f, widest level %.1f, %.2f children per internal node\n",
                stats.depth.mean, static_cast<long long>(stats.depth.max), stats.root_children.mean, stats.widest.mean,
                stats.mean_branching);
    std::printf("simulate %.2f s, write %.2f s\n", secs(t0, t1), secs(t1, t2));
  }
  if (!f.summary.empty())
    writeSynthSummary(f.summary, f.out, c, s, stats);
  return 0;
}

int runInfo(std::string const &file)
{
  TraceReader const reader(file);
  std::printf("%s (format %s v%lld)\n", file.c_str(), TRACE_FORMAT_NAME,
              static_cast<long long>(reader.info().format_version));
  std::fputs(formatTraceStats(reader.info(), computeTraceStats(reader.columns())).c_str(), stdout);
  return 0;
}

int runValidate(std::string const &file, bool check_values)
{
  TraceReader const reader(file);
  TraceInfo const &i = reader.info();
  std::printf("%s: valid format v%lld trace: %lld steps, %lld request rows, %lld tree nodes, %lld prefix tokens, "
              "kv %s%s%s\n",
              file.c_str(), static_cast<long long>(i.format_version), static_cast<long long>(i.num_steps),
              static_cast<long long>(i.num_requests), static_cast<long long>(i.num_nodes),
              static_cast<long long>(i.num_prefix_tokens), toString(i.kv_dtype).c_str(), i.has_values ? ", /values" : "",
              i.has_accepted ? ", accepted" : "");
  if (!check_values)
    return 0;
  if (!i.has_expected_out)
    throw InputError(file + ": --check-values needs /values/out, which this trace does not record");
  // Recorded expected outputs against the fp64 reference on the recorded inputs (an FP8 pool
  // dequantised exactly: the bounds of dequant numerics, which are bf16's).
  ErrorBounds const bounds = errorBounds(i.kv_dtype, Numerics::kDequant);
  double worst = 0;
  int64_t worst_step = 0;
  for (int64_t s = 0; s < reader.numSteps(); ++s)
  {
    HostProblem const p = reader.stepProblem(s, MaskLayout::kParents, 0);
    std::vector<uint16_t> const out = reader.expectedOutput(s);
    ErrorStats const e = compareToReference(referenceAttention(p), out.data(), out.size(), bounds);
    if (e.rel_l2 > worst || !e.pass)
    {
      worst = e.rel_l2;
      worst_step = s;
    }
    if (!e.pass)
    {
      std::printf("%s: /values/out of step %lld differs from the fp64 reference: rel L2 %.3e, %lld bad elements\n",
                  file.c_str(), static_cast<long long>(s), e.rel_l2, static_cast<long long>(e.num_bad));
      return 1;
    }
  }
  std::printf("%s: /values/out matches the fp64 reference on every step (worst rel L2 %.3e at step %lld)\n",
              file.c_str(), worst, static_cast<long long>(worst_step));
  return 0;
}
} // namespace

void addTraceCommands(CLI::App &app, Action &action)
{
  CLI::App *trace = app.add_subcommand("trace", "Verify traces (HDF5 formats v1 and v2): synthesize, summarize, validate");
  trace->require_subcommand(1);

  auto f = std::make_shared<SynthFlags>();
  CLI::App *synth = trace->add_subcommand("synth", "Simulate a serving run and write its DDTree verify trace");
  synth->add_option("--config,-c", f->config, "TOML config (see data/*.toml); flags override it")->check(CLI::ExistingFile);
  synth->add_option("--out,-o", f->out, "output trace file (.h5), written atomically")->required();
  f->given["--seed"] = synth->add_option("--seed", f->seed, "simulation seed")->check(DIGITS_ONLY);
  f->given["--steps"] = synth->add_option("--steps", f->steps, "verify steps to record");
  f->given["--warmup"] = synth->add_option("--warmup", f->warmup, "steps simulated before recording");
  f->given["--concurrency"] = synth->add_option("--concurrency", f->concurrency, "fixed concurrency (arrivals = fixed)");
  f->given["--rate"] = synth->add_option("--rate", f->rate, "Poisson arrivals per step (arrivals = poisson)");
  f->given["--budget"] = synth->add_option("--budget", f->budget, "DDTree node budget (tree = budget + root)");
  f->given["--drafter"] = synth->add_option("--drafter", f->drafter, "drafter profile: chat (default) or math500; the flags below refine it");
  f->given["--max-depth"] = synth->add_option("--max-depth", f->max_depth, "draft positions L (tree depth limit)");
  f->given["--top-k"] = synth->add_option("--top-k", f->top_k, "ranks per position in the drafter's marginals");
  f->given["--alpha-top"] = synth->add_option("--alpha-top", f->alpha_top, "Dirichlet weight of the top-1 token at depth 1");
  f->given["--alpha-rest"] = synth->add_option("--alpha-rest", f->alpha_rest, "Dirichlet weight of each rank 2..top_k");
  f->given["--alpha-tail"] = synth->add_option("--alpha-tail", f->alpha_tail, "Dirichlet weight of the mass off the list");
  f->given["--depth-decay"] = synth->add_option("--depth-decay", f->depth_decay, "alpha_top shrinks by this factor per depth");
  f->given["--agreement"] = synth->add_option("--agreement", f->agreement, "probability that the target draws from the drafter's marginal");
  f->given["--sharpness"] = synth->add_option("--sharpness", f->sharpness, "target's rank weights = drafter's ^ sharpness (1 = calibrated drafter)");
  f->given["--prompt"] = synth->add_option("--prompt", f->prompt, "fixed prompt length (P of a request's first step)");
  f->given["--output"] = synth->add_option("--output", f->output, "fixed output length per request");
  f->given["--initial-run"] = synth->add_option("--initial-run", f->initial_run, "start with a fragmented pool: shuffled runs of N slots (0 = in order)");
  synth->add_option("--summary", f->summary, "also write the synthesis statistics (acceptance, tree shape) as JSON");
  f->given["--heads"] = synth->add_option("--heads", f->heads, "query heads per GPU");
  f->given["--num-slots"] = synth->add_option("--num-slots", f->num_slots, "KV pool slots");
  f->given["--compact-every"] = synth->add_option("--compact-every", f->compact_every, "defragment every N steps (0 = never)");
  f->given["--kv-dtype"] = synth->add_option("--kv-dtype", f->kv_dtype,
                                             "KV pool storage: bf16 (default, format v1), fp8-e4m3 or fp8-e5m2 (SGLang, one "
                                             "scale) or fp8-e4m3-blockscaled (DeepSeek V3.2's 656-byte rows); FP8 writes v2")
                               ->check(CLI::IsMember({"bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled"}));
  f->given["--kv-scale"] = synth->add_option("--kv-scale", f->kv_scale,
                                             "fp8-e4m3 / fp8-e5m2: the per-tensor scale (SGLang's k_scale), finite and > 0; "
                                             "bytes = (x / scale).to(fp8)");
  synth->add_flag("--sort-free", f->sort_free, "sort released slots when merging them into the free list");
  synth->add_flag("--values", f->values, "record /values (random q and pool, expected out from the reference)");
  synth->add_option("--deflate", f->deflate, "zlib level 0-9")->check(CLI::Range(0, 9));
  synth->add_flag("--quiet,-q", f->quiet, "print nothing");
  addOverwriteFlag(synth, f->overwrite, "an existing trace file at --out");
  synth->callback([f, &action] { action = [f] { return runSynth(*f); }; });

  auto info_file = std::make_shared<std::string>();
  CLI::App *info = trace->add_subcommand("info", "Steps, batch sizes, P and T distributions, acceptance, fragmentation");
  info->add_option("file", *info_file, "trace file")->required();
  info->callback([info_file, &action] { action = [info_file] { return runInfo(*info_file); }; });

  auto validate_file = std::make_shared<std::string>();
  auto check_values = std::make_shared<bool>(false);
  CLI::App *validate = trace->add_subcommand("validate", "Check every invariant of the format (exit 2 on a bad file)");
  validate->add_option("file", *validate_file, "trace file")->required();
  validate->add_flag("--check-values", *check_values, "also compare /values/out with the fp64 reference (exit 1 if off)");
  validate->callback([validate_file, check_values, &action] {
    action = [validate_file, check_values] { return runValidate(*validate_file, *check_values); };
  });
}

void requireFolderOf(std::string const &path, char const *flag)
{
  if (path.empty())
    throw InputError(std::string(flag) + ": empty; give a file to write");
  std::filesystem::path const p(path);
  std::filesystem::path const dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw InputError(std::string(flag) + ": folder '" + dir.string() + "' of '" + path + "' does not exist");
  if (std::filesystem::is_directory(p, ec))
    throw InputError(std::string(flag) + ": '" + path + "' is a folder; give a file to write");
}

} // namespace canopy::cli
