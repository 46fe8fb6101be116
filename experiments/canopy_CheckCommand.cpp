/// \file canopy_CheckCommand.cpp
/// \brief `canopy check`: every requested design against the fp64 reference, as a table.
#include "canopy_BatchStorage.hpp"
#include "canopy_Commands.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_Error.hpp"
#include "canopy_Generator.hpp"
#include "canopy_InputLimits.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"
#include "canopy_StepCheck.hpp"
#include "canopy_StepSource.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

namespace canopy::cli
{
namespace
{
struct CheckFlags
{
  GeneratorOptions gen;
  std::string mask = "full";
  std::string designs = "all";
  int nsplit = 16;
  bool strict = false;
  bool no_memory_check = false;
  std::string trace;
  int64_t steps = 0;
  std::string values = "both";  ///< random, tree-dominant, or both (a design must pass each)
  std::string kv_dtype = "bf16";
  std::string numerics = "dequant";
  std::map<std::string, CLI::Option *> given;  ///< flags whose use is checked against --trace
};

/// The one validation of check's inputs (canopy_InputLimits.hpp, shared with run configs), and the
/// flags that would be silently ignored: --trace fixes the shapes, --steps needs a trace.
void validateCheckFlags(CheckFlags const &f)
{
  auto const given = [&](char const *flag) { return f.given.at(flag)->count() > 0; };
  if (!f.trace.empty())
  {
    for (char const *flag : {"--batch", "--heads", "--tree", "--prefix", "--ragged", "--padded"})
      if (given(flag))
        throw InputError(std::string(flag) + " and --trace: the trace fixes the shapes; give one or the other");
    for (char const *flag : {"--kv-dtype", "--kv-scale"})
      if (given(flag))
        throw InputError(std::string(flag) + " and --trace: the trace fixes the KV dtype and its scale (/model "
                         "kv_dtype, kv_scale); give one or the other");
  }
  else if (given("--steps"))
    throw InputError("--steps: applies to --trace only (give --trace FILE, or drop --steps)");
  requireWithin(limits::NSPLIT, f.nsplit, "--nsplit");
  if (!f.trace.empty())
    return;  // the trace's KV dtype is checked against --numerics once it is open
  if (std::string const why = numericsUndefinedFor(parseKvDtype(f.kv_dtype, "--kv-dtype"),
                                                   parseNumerics(f.numerics, "--numerics"));
      !why.empty())
    throw InputError("--numerics: " + why);
  if (!(std::isfinite(f.gen.kv_scale) && f.gen.kv_scale > 0))
    throw InputError("--kv-scale: must be finite and > 0, got " + std::to_string(f.gen.kv_scale));
  requireWithin(limits::BATCH, f.gen.batch, "--batch");
  requireWithin(limits::HEADS, f.gen.num_heads, "--heads");
  requireWithin(limits::TREE, f.gen.tree_size, "--tree");
  requireWithin(limits::PREFIX, f.gen.prefix_len, "--prefix");
  requireWithin(limits::PADDED, f.gen.padded_rows, "--padded");
  if (!f.no_memory_check)
    requireFitsInMemory(problemHostBytes(f.gen.batch, f.gen.num_heads, f.gen.tree_size,
                                         static_cast<double>(f.gen.prefix_len), f.gen.pool_slack),
                        "--batch --heads --tree --prefix",
                        "B=" + std::to_string(f.gen.batch) + " H=" + std::to_string(f.gen.num_heads) +
                            " T=" + std::to_string(f.gen.tree_size) + " P=" + std::to_string(f.gen.prefix_len),
                        "--no-memory-check");
}

/// The value modes a check runs: with "both", a design passes only if it passes under each.
std::vector<ValueMode> valueModes(std::string const &name)
{
  if (name == "both")
    return {ValueMode::kRandom, ValueMode::kTreeDominant};
  return {parseValueMode(name, "--values")};
}

void printHeader()
{
  std::printf("| %-12s | %-13s | %-24s | %-10s | %-10s | %-10s | %-8s | %-6s | %-6s |\n", "design", "values", "path",
              "max abs", "rel L2", "worst row", "ulps", "bad", "result");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(14, '-').c_str(), std::string(15, '-').c_str(),
              std::string(26, '-').c_str(), std::string(12, '-').c_str(), std::string(12, '-').c_str(),
              std::string(12, '-').c_str(), std::string(10, '-').c_str(), std::string(8, '-').c_str(),
              std::string(8, '-').c_str());
}

/// \p values: the value mode, or "recorded" for a trace's own values.
void printRow(std::string const &name, std::string const &values, std::string const &path, ErrorStats const &e)
{
  std::printf("| %-12s | %-13s | %-24s | %10.3e | %10.3e | %10.3e | %8.1f | %6lld | %-6s |\n", name.c_str(),
              values.c_str(), path.c_str(), e.max_abs, e.rel_l2, e.worst_row_rel_l2, e.max_ulps,
              static_cast<long long>(e.num_bad), e.pass ? "pass" : "FAIL");
}

/// A design that cannot serve the shape: its row says so and why; the check goes on with the others.
void printUnsupported(std::string const &name, std::string const &values, std::string const &why)
{
  std::printf("| %-12s | %-13s | unsupported: %s |\n", name.c_str(), values.c_str(), why.c_str());
}

void printTolerances(ErrorBounds const &bound = BF16_BOUNDS)
{
  std::printf("tolerance: rel-L2 <= %.1e over the output and <= %.1e per output row (worst row), no NaN or "
              "unwritten element; ulps: largest error in bf16 ulps of its row's largest value\n\n",
              bound.rel_l2, bound.row_rel_l2);
}

/// The designs of --designs. A design named there that needs a GPU this host lacks stops the check
/// before any work (exit 4): a table without the row asked for would read as a pass.
std::vector<std::string> resolveDesigns(std::string const &list)
{
  if (list != "all")
  {
    std::vector<std::string> const names = parseDesignList(list);
    for (std::string const &n : names)
      if (std::string const why = gpuMissingFor(n); !why.empty())
        throw GpuUnavailable("--designs: " + n + " " + why + "; --designs all leaves out what cannot run here");
    return names;
  }
  // "all" includes the reference itself (its row is the bf16 rounding floor of the table) and
  // leaves out designs whose memory this machine lacks (CUDA designs on a host without a GPU).
  std::vector<std::string> names;
  for (auto const &n : designNames())
  {
    std::string why;
    if (memoryAvailable(makeDesign(n)->memory(), &why))
      names.push_back(n);
    else
      std::printf("(skipping %s: %s)\n", n.c_str(), why.c_str());
  }
  return names;
}

int runCheck(CheckFlags f)
{
  f.gen.mask_layout = parseMaskLayout(f.mask, "--mask");
  f.gen.kv_dtype = parseKvDtype(f.kv_dtype, "--kv-dtype");
  Numerics const numerics = parseNumerics(f.numerics, "--numerics");
  std::vector<std::string> const designs = resolveDesigns(f.designs);
  std::vector<ValueMode> const modes = valueModes(f.values);
  GeneratorOptions shape_only = f.gen;
  shape_only.with_values = false;  // the cost needs the metadata only; each value mode draws its own values
  Cost const cost = costOf(generateProblem(shape_only).meta, f.gen.num_heads, f.gen.kv_dtype);

  std::printf("canopy check: B=%d (+%d padded) H=%d T=%d P=%lld mask=%s ragged=%s seed=%llu nsplit=%d\n", f.gen.batch,
              f.gen.padded_rows, f.gen.num_heads, f.gen.tree_size, static_cast<long long>(f.gen.prefix_len),
              f.mask.c_str(), f.gen.ragged ? "yes" : "no", static_cast<unsigned long long>(f.gen.seed), f.nsplit);
  std::printf("%.3f GFLOP, %.3f MB minimum traffic (%s KV)\n", cost.flops * 1e-9, cost.bytes_min * 1e-6,
              toString(f.gen.kv_dtype).c_str());
  if (f.gen.kv_dtype != KvDtype::kBf16)
    std::printf("kv dtype %s (kv scale %g), numerics %s\n", f.kv_dtype.c_str(), static_cast<double>(f.gen.kv_scale),
                f.numerics.c_str());
  printTolerances(errorBounds(f.gen.kv_dtype, numerics));
  printHeader();
  DesignOptions options;
  options.nsplit = f.nsplit;
  options.strict = f.strict;
  options.numerics = numerics;
  bool all_pass = true;
  for (ValueMode values : modes)
  {
    GeneratorOptions g = f.gen;
    g.values = values;
    HostProblem const problem = generateProblem(g);
    std::vector<double> const reference = referenceAttention(problem, numerics);
    for (auto const &name : designs)
    {
      DesignPtr design = makeDesign(name);
      try
      {
        CheckResult const r = checkDesign(*design, problem, options, reference);
        all_pass = all_pass && r.error.pass;
        printRow(name, toString(values), r.path, r.error);
      }
      catch (Unsupported const &e)
      {
        printUnsupported(name, toString(values), e.what());
      }
    }
  }
  return all_pass ? 0 : 1;
}

/// Every step of a trace through every design; the worst step's error per design is reported.
int runTraceCheck(CheckFlags f)
{
  MaskLayout const mask = parseMaskLayout(f.mask, "--mask");
  Numerics const numerics = parseNumerics(f.numerics, "--numerics");
  auto const src = makeTraceSource(f.trace, f.steps, f.gen.seed);  // bad input (exit 2) before a missing GPU (4)
  if (!f.no_memory_check)
    requireFitsInMemory(src->hostBytes(), "--trace", f.trace, "--no-memory-check");
  KvDtype const kv_dtype = src->axes().kv_dtype;
  if (std::string const why = numericsUndefinedFor(kv_dtype, numerics); !why.empty())
    throw InputError("--numerics: " + why + " (the trace's /model kv_dtype)");
  std::vector<std::string> const designs = resolveDesigns(f.designs);
  std::printf("canopy check: trace %s, %lld steps, mask=%s, %s values, checked against %s; nsplit=%d\n\n",
              src->label().c_str(), static_cast<long long>(src->numSteps()), f.mask.c_str(),
              src->recordedValues() ? "recorded" : "seeded",
              src->recordedValues() && !src->expectedOutput(0).empty() ? "the recorded output" : "the fp64 reference",
              f.nsplit);
  if (kv_dtype != KvDtype::kBf16)
    std::printf("kv dtype %s (the trace's; canopy trace info shows its scale), numerics %s\n",
                toString(kv_dtype).c_str(), f.numerics.c_str());
  printTolerances(errorBounds(kv_dtype, numerics));
  printHeader();
  DesignOptions options;
  options.nsplit = f.nsplit;
  options.strict = f.strict;
  options.numerics = numerics;
  // Recorded values are checked as recorded; tree-dominant values replace seeded ones only.
  std::vector<ValueMode> modes = valueModes(f.values);
  if (src->recordedValues())
    modes = {ValueMode::kRandom};
  bool all_pass = true;
  for (ValueMode values : modes)
  {
    std::string const label = src->recordedValues() ? "recorded" : toString(values);
    ReferenceCache refs;
    for (auto const &name : designs)
    {
      ErrorStats worst;
      worst.pass = true;
      std::string path;
      std::string unsupported;
      for (int64_t s = 0; s < src->numSteps() && unsupported.empty(); ++s)
      {
        HostProblem p = src->problem(s, mask);
        DesignPtr design = makeDesign(name);
        CheckResult r;
        if (values == ValueMode::kTreeDominant)
          makeTreeDominant(p, f.gen.seed + static_cast<uint64_t>(s));
        try
        {
          // One reference per step and value mode (refs is per mode), shared by every design.
          r = checkDesign(*design, p, options, expectedOutput(*src, s, p, refs, numerics));
        }
        catch (Unsupported const &e)
        {
          unsupported = "step " + std::to_string(s) + ": " + e.what();
          break;
        }
        path = r.path;
        if (worst.pass && (!r.error.pass || r.error.worst_row_rel_l2 >= worst.worst_row_rel_l2))
          worst = r.error;  // the first failure, else the largest per-row error
      }
      if (!unsupported.empty())
      {
        printUnsupported(name, label, unsupported);
        continue;
      }
      all_pass = all_pass && worst.pass;
      printRow(name, label, path, worst);
    }
  }
  return all_pass ? 0 : 1;
}
} // namespace

void addCheckCommand(CLI::App &app, Action &action)
{
  auto flags = std::make_shared<CheckFlags>();
  CLI::App *cmd = app.add_subcommand("check", "Run designs against the fp64 reference on a generated problem");
  auto &given = flags->given;
  given["--batch"] = cmd->add_option("--batch,-b", flags->gen.batch, "requests with work");
  given["--heads"] = cmd->add_option("--heads", flags->gen.num_heads, "query heads");
  given["--tree"] = cmd->add_option("--tree,-t", flags->gen.tree_size, "tree nodes per request (max when ragged)");
  given["--prefix"] = cmd->add_option("--prefix,-p", flags->gen.prefix_len, "prefix tokens per request (max when ragged)");
  given["--ragged"] = cmd->add_flag("--ragged", flags->gen.ragged, "draw T and P per request");
  given["--padded"] = cmd->add_option("--padded", flags->gen.padded_rows, "empty rows appended (graph bucket padding)");
  cmd->add_option("--mask", flags->mask, "mask layout: full, tree or parents")
      ->check(CLI::IsMember({"full", "tree", "parents"}));
  cmd->add_option("--seed", flags->gen.seed, "generator seed")->check(DIGITS_ONLY);
  cmd->add_option("--designs", flags->designs, "comma-separated designs, or 'all'");
  cmd->add_option("--nsplit", flags->nsplit, "prefix splits per request, 0 = auto (docs/experiments.md)");
  cmd->add_flag("--strict", flags->strict, "a fallback to another kernel path is an error");
  cmd->add_flag("--no-memory-check", flags->no_memory_check,
                "try a shape even when its estimated host memory exceeds this machine's");
  cmd->add_option("--trace", flags->trace, "check on every step of this trace (recorded values when present)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--values", flags->values,
                  "inputs: random (the prefix carries the attention), tree-dominant (the visible tree keys do), or "
                  "both (default: a design must pass each)")
      ->check(CLI::IsMember({"random", "tree-dominant", "both"}));
  given["--kv-dtype"] = cmd->add_option("--kv-dtype", flags->kv_dtype,
                                        "KV pool storage: bf16, fp8-e4m3, fp8-e5m2 (one scale, SGLang) or "
                                        "fp8-e4m3-blockscaled (DeepSeek V3.2's 656-byte rows)")
                            ->check(CLI::IsMember({"bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled"}));
  given["--kv-scale"] = cmd->add_option("--kv-scale", flags->gen.kv_scale,
                                        "fp8-e4m3 / fp8-e5m2: the per-tensor scale (SGLang's k_scale), > 0");
  cmd->add_option("--numerics", flags->numerics,
                  "dequant (KV dequantised, Q and P bf16; default) or fp8-mma (Q and P cast to the KV's FP8 type)")
      ->check(CLI::IsMember({"dequant", "fp8-mma"}));
  given["--steps"] = cmd->add_option("--steps", flags->steps, "with --trace: only the first N steps (0 = all)")
                         ->check(CLI::NonNegativeNumber);
  cmd->callback([flags, &action] {
    action = [flags] {
      validateCheckFlags(*flags);
      return flags->trace.empty() ? runCheck(*flags) : runTraceCheck(*flags);
    };
  });
}
} // namespace canopy::cli
