/// \file canopy_Results.hpp
/// \brief Result rows of an experiment and their writers: results.json/.csv, table.md, table.tex.
#pragma once

#include "canopy_Design.hpp"
#include "canopy_EnumNames.hpp"
#include "canopy_ExperimentConfig.hpp"
#include "canopy_OutputDir.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Types.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace canopy
{
/// The results.json schema this build writes and reads (see docs/experiments.md).
constexpr int RESULTS_SCHEMA = 2;

enum class RowStatus
{
  kOk,          ///< checked (where asked) and timed
  kFailed,      ///< the output did not match the reference (the note says where)
  kSkipped,     ///< the executor cannot run the design in this mode (the note says why)
  kUnsupported  ///< the design cannot serve a bucket's shape (the note says why)
};
template <>
struct EnumNames<RowStatus>
{
  static constexpr char const *kind = "status";
  static constexpr std::array<std::pair<RowStatus, char const *>, 4> table{{{RowStatus::kOk, "ok"},
                                                                            {RowStatus::kFailed, "FAILED"},
                                                                            {RowStatus::kSkipped, "skipped"},
                                                                            {RowStatus::kUnsupported, "unsupported"}}};
};

/// \brief What a row was measured on, as fields: a synthetic shape's sweep axes, or for a trace its
/// file and the largest batch, tree and prefix over its steps.
struct InputAxes
{
  std::string trace;  ///< trace file; empty for a synthetic shape
  int batch = 0;
  int heads = 0;
  int tree = 0;
  int64_t prefix = 0;
  bool ragged = false;     ///< per-request P and T vary
  bool compacted = false;  ///< synthetic KV slots without fragmentation
  ValueMode values = ValueMode::kRandom;
  bool recorded_values = false;  ///< a trace's own q, pool and expected output
  KvDtype kv_dtype = KvDtype::kBf16;  ///< the pool's storage as replayed (docs/design.md §8)
  double kv_scale = 1.0;              ///< fp8-e4m3 / fp8-e5m2: the per-tensor scale (1 otherwise)
};

/// \brief One row: (design, options, input group). Times in seconds per verify step.
struct ResultRow
{
  std::string input;  ///< display label of the input, for tables; scripts read the axes
  std::string group;  ///< "all" or the padded bucket
  InputAxes axes;
  std::string design;
  std::string path;   ///< the kernel path that ran (Design::path)
  int splits = 0;     ///< prefix splits the design ran with (Design::splits; 0: no split-K)
  MaskLayout mask = MaskLayout::kFull;
  int nsplit = 0;     ///< the requested split count (0: the design chooses)
  WorkspaceStrategy workspace = WorkspaceStrategy::kPersistent;
  ExecMode mode = ExecMode::kEager;
  bool l2_flush = false;
  Numerics numerics = Numerics::kDequant;  ///< what the products multiply (docs/design.md §8)
  RowStatus status = RowStatus::kOk;
  std::string note;
  std::string device;  ///< the one device the row ran on (Executor::rowDevice): a GPU by index and UUID
  int64_t steps = 0;
  int64_t samples = 0;
  double median = 0, p10 = 0, p90 = 0;    ///< per-step time over all samples
  double total_median = 0;                ///< sum over steps of each step's median time
  double flops = 0, bytes = 0;            ///< summed over steps
  double kv_bytes = 0;                    ///< KV pool bytes read, summed over steps (Cost::kv_bytes)
  double tflops = 0, gbps = 0;            ///< flops / total_median, bytes / total_median
  double roofline_s = 0;                  ///< summed per-step bound (0 when peaks unknown)
  double roofline_fraction = 0;           ///< roofline_s / total_median
  double mma_roofline_s = 0;              ///< the same bound with the mma.sync rate as FLOP peak (0: unknown)
  double mma_roofline_fraction = 0;       ///< mma_roofline_s / total_median
  double fma_roofline_s = 0;              ///< the same bound with the fp32 FMA rate (no tensor cores; 0: unknown)
  double fma_roofline_fraction = 0;       ///< fma_roofline_s / total_median
  /// The 64-row tile designs' bound: FLOPs at the GEMM peak or their gathered KV bytes at the copy
  /// ceiling (Cost::tile_copy_bytes; 0: not measured)
  double copy_roofline_s = 0;
  double copy_roofline_fraction = 0;      ///< copy_roofline_s / total_median
  double speedup = 0;                     ///< baseline total_median / this total_median (0: no baseline row)
  int64_t checked_steps = 0;
  double max_abs = 0, rel_l2 = 0;         ///< worst over checked steps
  double workspace_bytes = 0;
  int64_t order = 0;  ///< position in the unsharded run (input, then option combination, then design)
};

/// \brief Columns added to schema 2 after files were written without them, which read as the
/// default of their field where a file lacks them: bounds and kv_bytes as 0 (unknown), the KV
/// dtype, its scale and the numerics as the only ones such a file could hold (bf16, 1, dequant).
inline bool columnAddedLater(std::string_view key)
{
  return key == "copy_roofline_s" || key == "copy_roofline_fraction" || key == "kv_dtype" || key == "kv_scale" ||
         key == "numerics" || key == "kv_bytes";
}

/// \brief The one mapping between a ResultRow and its named columns (results.json keys, results.csv
/// header): calls f(key, field) for every field, in column order. \p Row is ResultRow, const or not.
template <class Row, class F>
void forEachField(Row &r, F &&f)
{
  f("input", r.input);
  f("group", r.group);
  f("trace", r.axes.trace);
  f("batch", r.axes.batch);
  f("heads", r.axes.heads);
  f("tree", r.axes.tree);
  f("prefix", r.axes.prefix);
  f("ragged", r.axes.ragged);
  f("compacted", r.axes.compacted);
  f("values", r.axes.values);
  f("recorded_values", r.axes.recorded_values);
  f("kv_dtype", r.axes.kv_dtype);
  f("kv_scale", r.axes.kv_scale);
  f("design", r.design);
  f("path", r.path);
  f("splits", r.splits);
  f("mask", r.mask);
  f("nsplit", r.nsplit);
  f("workspace", r.workspace);
  f("mode", r.mode);
  f("l2_flush", r.l2_flush);
  f("numerics", r.numerics);
  f("status", r.status);
  f("note", r.note);
  f("device", r.device);
  f("steps", r.steps);
  f("samples", r.samples);
  f("median_s", r.median);
  f("p10_s", r.p10);
  f("p90_s", r.p90);
  f("total_median_s", r.total_median);
  f("flops", r.flops);
  f("bytes_min", r.bytes);
  f("kv_bytes", r.kv_bytes);
  f("tflops", r.tflops);
  f("gbps", r.gbps);
  f("roofline_s", r.roofline_s);
  f("roofline_fraction", r.roofline_fraction);
  f("mma_roofline_s", r.mma_roofline_s);
  f("mma_roofline_fraction", r.mma_roofline_fraction);
  f("fma_roofline_s", r.fma_roofline_s);
  f("fma_roofline_fraction", r.fma_roofline_fraction);
  f("copy_roofline_s", r.copy_roofline_s);
  f("copy_roofline_fraction", r.copy_roofline_fraction);
  f("speedup", r.speedup);
  f("checked_steps", r.checked_steps);
  f("max_abs_error", r.max_abs);
  f("rel_l2_error", r.rel_l2);
  f("workspace_bytes", r.workspace_bytes);
  f("order", r.order);
}

struct ResultSet
{
  std::string experiment, description, baseline;
  int repetitions = 0;
  std::map<std::string, std::string> environment;
  std::vector<ResultRow> rows;
};

/// \brief Reads what toJson wrote; throws InputError naming \p source and the bad field, and one
/// saying how to regenerate or convert the file when its schema is not RESULTS_SCHEMA.
ResultSet resultSetFromJson(std::string const &text, std::string const &source);

/// \brief A digest of what each row is, in row order: its input (trace, shape, values), group, design,
/// options and order, not its measurements. `canopy run` writes it to environment.rows_identity and
/// `canopy merge` recomputes it, so a shard whose rows were edited (a design, mask, split count or
/// trace changed by hand) is refused instead of merged as a row that never ran.
std::string rowsIdentityDigest(std::vector<ResultRow> const &rows);

/// \brief Fills ResultRow::speedup against \p baseline, matching input, group and options.
void computeSpeedups(ResultSet &results);

std::string toJson(ResultSet const &results);
/// \brief One CSV row per result row, the columns of forEachField; a cell with a comma, quote,
/// line break or edge space is quoted (RFC 4180).
std::string toCsv(ResultSet const &results);
std::string csvCell(std::string const &text);
std::string toMarkdownTable(ResultSet const &results);
std::string toLatexTable(ResultSet const &results);

/// \brief The four outputs of a run: results.json, results.csv, table.md, table.tex.
std::vector<OutputFile> resultFiles(ResultSet const &results);
/// \brief Writes the four outputs as the contents of \p dir, as one set (OutputDir, overwriting).
void writeResults(ResultSet const &results, std::string const &dir);
} // namespace canopy
