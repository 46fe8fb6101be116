/// \file canopy_Results.hpp
/// \brief Result rows of an experiment and their writers: results.json/.csv, table.md, table.tex.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace canopy
{
/// \brief One row: (design, options, input group). Times in seconds per verify step.
struct ResultRow
{
  std::string input;     ///< trace file or synthetic shape label
  std::string group;     ///< "all" or the padded bucket
  std::string design, path;
  std::string mask, workspace, mode;
  int nsplit = 0;
  bool l2_flush = false;
  std::string status = "ok";  ///< ok | FAILED (vs reference) | skipped (with note)
  std::string note;
  int64_t steps = 0;
  int64_t samples = 0;
  double median = 0, p10 = 0, p90 = 0;    ///< per-step time over all samples
  double total_median = 0;                ///< sum over steps of each step's median time
  double flops = 0, bytes = 0;            ///< summed over steps
  double tflops = 0, gbps = 0;            ///< flops / total_median, bytes / total_median
  double roofline_s = 0;                  ///< summed per-step bound (0 when peaks unknown)
  double roofline_fraction = 0;           ///< roofline_s / total_median
  double mma_roofline_s = 0;              ///< the same bound with the mma.sync rate as FLOP peak (0: unknown)
  double mma_roofline_fraction = 0;       ///< mma_roofline_s / total_median
  double fma_roofline_s = 0;              ///< the same bound with the fp32 FMA rate (no tensor cores; 0: unknown)
  double fma_roofline_fraction = 0;       ///< fma_roofline_s / total_median
  double speedup = 0;                     ///< baseline total_median / this total_median (0: no baseline row)
  int64_t checked_steps = 0;
  double max_abs = 0, rel_l2 = 0;         ///< worst over checked steps
  double workspace_bytes = 0;
  int64_t order = 0;  ///< position in the unsharded run (input, then option combination, then design)
};

struct ResultSet
{
  std::string experiment, description, baseline;
  int repetitions = 0;
  std::map<std::string, std::string> environment;
  std::vector<ResultRow> rows;
};

/// \brief Reads what toJson wrote; throws InputError naming \p source and the bad field.
ResultSet resultSetFromJson(std::string const &text, std::string const &source);

/// \brief Fills ResultRow::speedup against \p baseline, matching input, group and options.
void computeSpeedups(ResultSet &results);

std::string toJson(ResultSet const &results);
std::string toCsv(ResultSet const &results);
std::string toMarkdownTable(ResultSet const &results);
std::string toLatexTable(ResultSet const &results);

/// \brief Writes the four outputs into \p dir, each atomically (temporary file + rename).
void writeResults(ResultSet const &results, std::string const &dir);

/// \brief Writes \p text to \p path atomically; throws RuntimeFailure on I/O errors.
void writeFileAtomically(std::string const &path, std::string const &text);
} // namespace canopy
