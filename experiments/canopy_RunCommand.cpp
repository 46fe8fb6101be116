/// \file canopy_RunCommand.cpp
/// \brief `canopy run CONFIG.toml [--out DIR]`: an experiment from a config to results and tables.
#include "canopy_BatchStorage.hpp"
#include "canopy_Commands.hpp"
#include "canopy_Error.hpp"
#include "canopy_InputLimits.hpp"
#include "canopy_StepSource.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_Merge.hpp"
#include "canopy_Registry.hpp"
#include "canopy_ReplayEngine.hpp"
#include "canopy_Results.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <tuple>
#include <unistd.h>

namespace canopy::cli
{
namespace
{
struct RunFlags
{
  std::string config;
  std::string out;
  std::string shard;  ///< "K/N": this process runs share K of N (0-based), see docs/experiments.md
  bool quiet = false;
  bool overwrite = false;
  bool out_given = false;  ///< --out was on the command line (an empty one is an error, not "use the config's")
  bool no_memory_check = false;
};

/// "K/N" with 0 <= K < N; InputError naming the flag otherwise.
std::pair<int, int> parseShard(std::string const &s)
{
  int k = 0, n = 0;
  if (!parseShardSpec(s, k, n))
    throw InputError("--shard: expected K/N with 0 <= K < N (e.g. 0/3, as $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), got \"" +
                     s + "\"");
  return {k, n};
}

/// Progress on stderr only when it is a terminal: logs and CI stay clean.
class ProgressLine
{
public:
  explicit ProgressLine(bool enabled) : _enabled(enabled && ::isatty(2)), _t0(std::chrono::steady_clock::now()) {}
  void operator()(int64_t done, int64_t total)
  {
    if (!_enabled || total <= 0)
      return;
    double const el = std::chrono::duration<double>(std::chrono::steady_clock::now() - _t0).count();
    double const eta = done > 0 ? el * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    std::fprintf(stderr, "\r[%lld/%lld steps] %.0f%%  elapsed %.0fs  ETA %.0fs   ", static_cast<long long>(done),
                 static_cast<long long>(total), 100.0 * static_cast<double>(done) / static_cast<double>(total), el, eta);
    if (done >= total)
      std::fprintf(stderr, "\n");
  }

private:
  bool _enabled;
  std::chrono::steady_clock::time_point _t0;
};

/// Each trace's largest step (\p sources: makeSources' order, the traces first) and the largest shape
/// of each sweep against this machine's memory, before any work.
void requireInputsFitInMemory(ExperimentConfig const &cfg, std::vector<std::unique_ptr<StepSource>> const &sources)
{
  size_t const per_trace = std::max<size_t>(1, cfg.kv_dtypes.size());  // one source per trace and KV dtype
  for (size_t i = 0; i < cfg.traces.size() * per_trace; ++i)
    requireFitsInMemory(sources[i]->hostBytes(), "inputs.traces[" + std::to_string(i / per_trace) + "]",
                        cfg.traces[i / per_trace], "--no-memory-check");
  for (size_t i = 0; i < cfg.sweeps.size(); ++i)
  {
    ShapeSweep const &sw = cfg.sweeps[i];
    int const b = *std::max_element(sw.batch.begin(), sw.batch.end());
    int const h = *std::max_element(sw.heads.begin(), sw.heads.end());
    int const t = *std::max_element(sw.tree.begin(), sw.tree.end());
    int64_t const p = *std::max_element(sw.prefix.begin(), sw.prefix.end());
    int fp8_row = 0;  // an FP8 pool is held beside the bf16 one it is quantised from
    for (KvDtype d : sw.kv_dtypes)
      fp8_row = std::max(fp8_row, d == KvDtype::kBf16 ? 0 : kvRowBytes(d));
    double const slots = static_cast<double>(b) * (static_cast<double>(p) + t) * sw.pool_slack;
    requireFitsInMemory(problemHostBytes(b, h, t, static_cast<double>(p), sw.pool_slack) + slots * fp8_row,
                        "inputs.sweep[" + std::to_string(i) + "]",
                        "B=" + std::to_string(b) + " H=" + std::to_string(h) + " T=" + std::to_string(t) +
                            " P=" + std::to_string(p),
                        "--no-memory-check");
  }
}

/// When no row ran and at least one was skipped because its design needs a GPU this host lacks: that
/// design's name and why; else "". Rows of host designs in graph mode are skipped on any host: those
/// alone are not a missing GPU.
std::string nothingRanForWantOfAGpu(ResultSet const &rs)
{
  std::string first;
  for (ResultRow const &r : rs.rows)
  {
    if (r.status != RowStatus::kSkipped)
      return "";
    if (first.empty())
    {
      std::string const why = gpuMissingFor(r.design);
      if (!why.empty())
        first = r.design + " " + why;
    }
  }
  return first;
}

int runRun(RunFlags const &f)
{
  ExperimentConfig cfg = loadExperimentConfig(f.config);
  if (f.out_given)
    cfg.out_dir = f.out;
  if (!f.shard.empty())
    std::tie(cfg.shard_index, cfg.shard_count) = parseShard(f.shard);
  auto const sources = makeSources(cfg);  // traces opened (and validated) once, before any work
  if (!f.no_memory_check)
    requireInputsFitInMemory(cfg, sources);
  OutputDir out(cfg.out_dir, f.overwrite, f.out_given ? "--out" : "output.dir");  // before any work
  auto progress = std::make_shared<ProgressLine>(cfg.progress && !f.quiet);
  ResultSet const rs = runExperiment(cfg, sources, [progress](int64_t d, int64_t t) { (*progress)(d, t); });
  int const code = writeAndReport(rs, out, "wrote");
  // A config may name GPU designs beside host ones and run on either kind of host: rows that cannot
  // run here are skipped, saying why, and the rest count. But a run that measured nothing because
  // this host lacks the GPU must not look like a success to a script or a batch job. The rows are
  // written first: they say, per design and mode, what was skipped and why.
  if (std::string const missing = nothingRanForWantOfAGpu(rs); !missing.empty())
    throw GpuUnavailable("every row was skipped: " + missing + "; the skipped rows, each with its reason, are in " +
                         out.path() + "/results.json");
  return code;
}
} // namespace

CLI::Option *addOverwriteFlag(CLI::App *cmd, bool &overwrite, std::string const &what)
{
  return cmd->add_flag("--overwrite", overwrite, "replace " + what + " (refused otherwise)");
}

std::string gpuMissingFor(std::string const &name)
{
  std::string why;
  if (memoryAvailable(makeDesign(name)->memory(), &why))
    return "";
  return "needs a GPU this host lacks (" + why + ")";
}

int writeAndReport(ResultSet const &results, OutputDir &out, std::string const &what)
{
  std::vector<std::string> const kept = out.commit(resultFiles(results));
  std::cout << toMarkdownTable(results) << "\n";
  std::cout << what << " " << out.path() << "/{results.json,results.csv,table.md,table.tex}\n";
  for (std::string const &name : kept)
    std::cerr << "kept " << out.path() << "/" << name << ": it was written into the folder during the run, not by it\n";
  for (auto const &r : results.rows)
    if (r.status == RowStatus::kFailed)
      return 1;
  return 0;
}

void addRunCommand(CLI::App &app, Action &action)
{
  auto flags = std::make_shared<RunFlags>();
  CLI::App *cmd = app.add_subcommand("run", "Run an experiment config: replay, time, check, write results and tables");
  cmd->add_option("config", flags->config, "experiment config (TOML), see docs/experiments.md")->required();
  CLI::Option *out = cmd->add_option("--out", flags->out, "output folder (overrides output.dir); it must be new or empty");
  addOverwriteFlag(cmd, flags->overwrite, "the results of a previous run in the output folder");
  cmd->add_option("--shard", flags->shard,
                  "K/N: run only share K (0-based) of N of the inputs and option combinations (all designs of each); "
                  "join the shards with canopy merge");
  cmd->add_flag("--quiet", flags->quiet, "no progress line");
  cmd->add_flag("--no-memory-check", flags->no_memory_check,
                "run a sweep shape even when its estimated host memory exceeds this machine's");
  cmd->callback([flags, out, &action] {
    flags->out_given = out->count() > 0;
    action = [flags] { return runRun(*flags); };
  });
}
} // namespace canopy::cli
