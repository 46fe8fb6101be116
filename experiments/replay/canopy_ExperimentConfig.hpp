/// \file canopy_ExperimentConfig.hpp
/// \brief An experiment as a plain struct, one field per knob, parsed once from TOML (docs/experiments.md).
#pragma once

#include "canopy_Design.hpp"
#include "canopy_KvDtype.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Types.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace canopy
{
/// \brief A synthetic shape grid: every combination becomes one input group.
struct ShapeSweep
{
  std::vector<int> batch{1};
  std::vector<int> heads{8};
  std::vector<int> tree{33};
  std::vector<int64_t> prefix{4096};
  bool ragged = false;
  int steps = 1;            ///< independent problems drawn per shape (different seeds)
  double pool_slack = 1.5;  ///< pool rows / rows needed: > 1 leaves holes between runs of slots
  double mean_run = 16.0;   ///< mean run of consecutive slots; "compacted" = pool_slack 1 and a huge run
  ValueMode values = ValueMode::kRandom;  ///< tree-dominant: the visible tree keys carry the attention
  /// The pool's storage, each one more input of every shape: generated in bf16, then quantised as
  /// the serving stacks write it (quantisePool). [inputs].kv_dtype unless the sweep sets its own.
  std::vector<KvDtype> kv_dtypes{KvDtype::kBf16};
  float kv_scale = 1.0f;  ///< fp8-e4m3 / fp8-e5m2: the per-tensor scale (SGLang's k_scale)
};

enum class ExecMode
{
  kEager,
  kGraph
};
template <>
struct EnumNames<ExecMode>
{
  static constexpr char const *kind = "mode";
  static constexpr std::array<std::pair<ExecMode, char const *>, 2> table{{{ExecMode::kEager, "eager"}, {ExecMode::kGraph, "graph"}}};
};

struct ExperimentConfig
{
  // [experiment]
  std::string name = "experiment";
  std::string description;
  uint64_t seed = 1;
  int warmup = 2;
  int repetitions = 10;
  std::string baseline;      ///< design that speedups are against (empty: first design)
  double check_rate = 1.0;   ///< fraction of steps checked against the fp64 reference
  int64_t max_check_flops = 0;  ///< skip the reference for steps above this many FLOPs (0: no limit)
  // [inputs]
  std::vector<std::string> traces;
  int64_t max_steps = 0;     ///< per trace, 0 = all
  std::string group_by = "trace";  ///< "trace" (one row per trace) or "batch" (one row per padded bucket)
  /// The KV dtypes every input is replayed in (docs/design.md §8). Empty: as stored (a trace in its
  /// own dtype, a sweep in bf16). A bf16 trace asked for an FP8 dtype is quantised on load.
  std::vector<KvDtype> kv_dtypes;
  float kv_scale = 1.0f;  ///< the scale of the one-scale FP8 dtypes (finite, > 0)
  std::vector<ShapeSweep> sweeps;
  // [designs]
  std::vector<std::string> designs;
  // [options]: every combination is run
  std::vector<MaskLayout> masks{MaskLayout::kFull};
  std::vector<int> nsplit{16};
  std::vector<WorkspaceStrategy> workspace{WorkspaceStrategy::kPersistent};
  std::vector<ExecMode> modes{ExecMode::kEager};
  std::vector<bool> l2_flush{false};
  std::vector<Numerics> numerics{Numerics::kDequant};  ///< what the products multiply (docs/design.md §8)
  std::vector<int> buckets{1, 2, 4, 8, 16, 32, 64, 128, 256};
  bool strict = false;
  // [peaks]: the roofline on hosts (a GPU measures its own in the run)
  double peak_flops = 0;
  double peak_bytes_per_s = 0;
  // [output]
  std::string out_dir = "out";
  bool progress = true;

  // Set from the command line, not the config: this run's share of the work (--shard K/N).
  int shard_index = 0;  ///< K, in [0, N)
  int shard_count = 1;  ///< N

  std::string hash;  ///< of the config text, for the results' environment block
  std::string source_path;
};

/// \brief Parses a TOML config. Unknown keys, wrong types and bad values throw InputError naming the
/// key (e.g. "options.nsplit[1]: must be >= 1"). Relative trace paths resolve against \p base_dir
/// when they do not exist relative to the working directory.
ExperimentConfig parseExperimentConfig(std::string const &toml_text, std::string const &source_name,
                                       std::string const &base_dir = ".");
ExperimentConfig loadExperimentConfig(std::string const &path);

/// \brief A run's numerics against its inputs' dtypes: a numerics with no meaning for any input
/// (numericsUndefinedForAll) throws InputError naming options.numerics[i], why, and how the first
/// input's dtype was chosen (\p where[0]); one with a meaning for some inputs passes
/// (the others' rows say skipped). The config's parse calls it, and makeSources once traces' stored
/// dtypes are known.
void refuseNumericsUndefinedForAll(std::vector<Numerics> const &numerics, std::vector<KvDtype> const &dtypes,
                                   std::vector<std::string> const &where);

/// \brief A stable 64-bit content hash (FNV-1a, hex) of \p bytes: configs and traces are compared
/// by contents, not by path (a trace regenerated at the same path is another input).
std::string contentHash(std::string const &bytes);
/// \brief contentHash of a file's bytes, read in blocks; InputError when it cannot be read.
std::string fileContentHash(std::string const &path);

/// \brief The smallest bucket >= batch; throws InputError when batch exceeds the largest bucket.
int paddedBucket(std::vector<int> const &buckets, int batch);
} // namespace canopy
