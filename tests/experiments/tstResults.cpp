/// \file tstResults.cpp
/// \brief Statistics, speedups and the table/JSON/CSV writers.
#include "canopy_Results.hpp"
#include "canopy_Error.hpp"
#include "canopy_Statistics.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

namespace
{
using namespace canopy;

TEST(Statistics, medianAndPercentilesInterpolate)
{
  Summary const s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.p10, 1.4);  // numpy.percentile([1..5], 10)
  EXPECT_DOUBLE_EQ(s.p90, 4.6);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(summarize({1, 2, 3, 4}).median, 2.5);
  EXPECT_DOUBLE_EQ(summarize({7}).p90, 7);
  EXPECT_TRUE(std::isnan(summarize({}).median));
}

ResultSet sample()
{
  ResultSet rs;
  rs.experiment = "t";
  rs.baseline = "slow";
  rs.repetitions = 5;
  rs.environment = {{"device", "test device"}, {"git", "abc"}};
  ResultRow a;
  a.input = "trace_1.h5";
  a.group = "all";
  a.design = "slow";
  a.path = "slow";
  a.mask = MaskLayout::kFull;
  a.nsplit = 4;
  a.workspace = WorkspaceStrategy::kPersistent;
  a.mode = ExecMode::kEager;
  a.samples = 5;
  a.median = 2e-3;
  a.p10 = 1.9e-3;
  a.p90 = 2.2e-3;
  a.total_median = 4e-3;
  a.checked_steps = 1;
  a.rel_l2 = 3e-3;
  ResultRow b = a;
  b.design = b.path = "fast";
  b.median = 5e-4;
  b.total_median = 1e-3;
  ResultRow c = b;
  c.mask = MaskLayout::kTree;  // no baseline row with this mask: no speedup
  ResultRow d = a;
  d.design = "broken";
  d.status = RowStatus::kFailed;
  d.note = "step 3: rel L2 0.5";
  rs.rows = {a, b, c, d};
  return rs;
}

// Two rows 51 µs and 95 µs apart must read apart in a run whose slowest row is 39 ms (one
// decimal in ms printed both as 0.1); a run below 1 ms is in µs.
TEST(Results, tableTimesKeepThreeSignificantDigits)
{
  ResultSet rs = sample();
  rs.rows.resize(2);
  rs.rows[0].median = rs.rows[0].p90 = 39.3e-3;
  rs.rows[0].p10 = 39.1e-3;
  rs.rows[1].median = 51.2e-6;
  rs.rows[1].p10 = 50.1e-6;
  rs.rows[1].p90 = 95.4e-6;
  std::string md = toMarkdownTable(rs);
  EXPECT_NE(md.find("| 39.3 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.0512 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.0501-0.0954 |"), std::string::npos) << md;
  rs.rows[0].median = rs.rows[0].p90 = 812.5e-6;
  rs.rows[0].p10 = 800e-6;
  md = toMarkdownTable(rs);
  EXPECT_NE(md.find("median (µs)"), std::string::npos) << md;
  EXPECT_NE(md.find("| 812 |"), std::string::npos) << md;  // three digits and no more: not 812.5
  EXPECT_NE(md.find("| 51.2 |"), std::string::npos) << md;
  EXPECT_NE(toLatexTable(rs).find("median (\\textmu s)"), std::string::npos);
}

TEST(Results, speedupsMatchOptionsAndSkipFailures)
{
  ResultSet rs = sample();
  computeSpeedups(rs);
  EXPECT_DOUBLE_EQ(rs.rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(rs.rows[1].speedup, 4.0);
  EXPECT_EQ(rs.rows[2].speedup, 0.0);
  EXPECT_EQ(rs.rows[3].speedup, 0.0);
}

TEST(Results, markdownAndLatexTables)
{
  ResultSet rs = sample();
  computeSpeedups(rs);
  std::string const md = toMarkdownTable(rs);
  EXPECT_NE(md.find("| input | mask | design |"), std::string::npos) << md;  // varying option column shown
  EXPECT_EQ(md.find("| NSPLIT |"), std::string::npos) << "constant options go to the caption";
  EXPECT_NE(md.find("NSPLIT = 4"), std::string::npos);
  EXPECT_NE(md.find("4.00x"), std::string::npos);
  // Medians up to 2 ms: the column is in ms, every value with three significant digits, so the
  // 0.5 ms rows do not round to a digit or two.
  EXPECT_NE(md.find("median (ms)"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1.90-2.20 |"), std::string::npos) << md;
  EXPECT_NE(md.find("FAILED"), std::string::npos);
  EXPECT_NE(md.find("step 3: rel L2 0.5"), std::string::npos);
  std::string const tex = toLatexTable(rs);
  EXPECT_NE(tex.find("\\toprule"), std::string::npos);
  EXPECT_NE(tex.find("\\bottomrule"), std::string::npos);
  EXPECT_NE(tex.find("trace\\_1.h5"), std::string::npos) << "underscores escaped";
  EXPECT_NE(tex.find("roofline \\%"), std::string::npos);
  EXPECT_EQ(md.find("workspace (MB)"), std::string::npos) << "no workspace column when no design holds one";
  rs.rows[1].workspace_bytes = 2.5e6;
  EXPECT_NE(toMarkdownTable(rs).find("| 2.50 |"), std::string::npos);
}

TEST(Results, mmaSyncRooflineColumnOnlyWhereMeasured)
{
  ResultSet rs = sample();
  EXPECT_EQ(toMarkdownTable(rs).find("mma.sync roofline"), std::string::npos) << "hosts measure no mma.sync rate";
  rs.rows[1].roofline_s = 2.5e-4;
  rs.rows[1].roofline_fraction = 0.25;
  rs.rows[1].mma_roofline_s = 3.1e-4;
  rs.rows[1].mma_roofline_fraction = 0.31;
  std::string const md = toMarkdownTable(rs);
  EXPECT_NE(md.find("| mma.sync roofline % |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 25.0 | 31.0 |"), std::string::npos) << md;
  EXPECT_NE(toLatexTable(rs).find("mma.sync roofline \\%"), std::string::npos);
  EXPECT_NE(toCsv(rs).find("mma_roofline_s,mma_roofline_fraction,fma_roofline_s,fma_roofline_fraction,copy_roofline_s,"
                           "copy_roofline_fraction,speedup"),
            std::string::npos);
  EXPECT_NE(toJson(rs).find("\"mma_roofline_fraction\": 0.31"), std::string::npos);
}

TEST(Results, jsonCsvAndAtomicFiles)
{
  ResultSet rs = sample();
  auto const j = nlohmann::json::parse(toJson(rs));
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][1]["design"], "fast");
  EXPECT_DOUBLE_EQ(j["rows"][1]["median_s"].get<double>(), 5e-4);
  EXPECT_EQ(j["environment"]["git"], "abc");
  std::string const csv = toCsv(rs);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  auto const dir = std::filesystem::temp_directory_path() / ("canopy_results_" + std::to_string(::getpid()));
  writeResults(rs, dir.string());
  for (char const *f : {"results.json", "results.csv", "table.md", "table.tex"})
    EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
  for (auto const &e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary left behind";
  std::filesystem::remove_all(dir);
}
/// Every field set by name to a value no other field has (bools and enums away from their defaults).
ResultRow distinctRow()
{
  ResultRow r;
  r.input = "B=1 H=2, \"quoted\"";
  r.group = "bucket 8";
  r.axes.trace = "data/t,1.h5";
  r.axes.batch = 3;
  r.axes.heads = 5;
  r.axes.tree = 7;
  r.axes.prefix = 11;
  r.axes.ragged = true;
  r.axes.compacted = true;
  r.axes.values = ValueMode::kTreeDominant;
  r.axes.recorded_values = true;
  r.axes.kv_dtype = KvDtype::kFp8E5m2;
  r.axes.kv_scale = 0.046875;
  r.design = "cuda-x";
  r.path = "cuda-x/mma-split13-f32/tree";
  r.splits = 13;
  r.mask = MaskLayout::kParents;
  r.nsplit = 17;
  r.workspace = WorkspaceStrategy::kGrow;
  r.mode = ExecMode::kGraph;
  r.l2_flush = true;
  r.numerics = Numerics::kFp8Mma;
  r.status = RowStatus::kUnsupported;
  r.note = "line one\nline two";
  r.steps = 19;
  r.samples = 23;
  r.median = 1.25e-5;
  r.p10 = 1.5e-5;
  r.p90 = 1.75e-5;
  r.total_median = 2.25e-4;
  r.flops = 3.5e12;
  r.bytes = 4.5e9;
  r.kv_bytes = 4.25e9;
  r.tflops = 5.5;
  r.gbps = 6.5;
  r.roofline_s = 7.5e-6;
  r.roofline_fraction = 0.125;
  r.mma_roofline_s = 8.5e-6;
  r.mma_roofline_fraction = 0.375;
  r.fma_roofline_s = 9.5e-6;
  r.fma_roofline_fraction = 0.625;
  r.copy_roofline_s = 1.05e-5;
  r.copy_roofline_fraction = 0.6875;
  r.speedup = 1.875;
  r.checked_steps = 29;
  r.max_abs = 0.0078125;
  r.rel_l2 = 0.00390625;
  r.workspace_bytes = 31.0;
  r.order = 37;
  return r;
}

auto fields(ResultRow const &r)
{
  return std::tie(r.input, r.group, r.axes.trace, r.axes.batch, r.axes.heads, r.axes.tree, r.axes.prefix, r.axes.ragged,
                  r.axes.compacted, r.axes.values, r.axes.recorded_values, r.axes.kv_dtype, r.axes.kv_scale, r.design,
                  r.path, r.splits, r.mask, r.nsplit, r.workspace, r.mode, r.l2_flush, r.numerics, r.status, r.note,
                  r.steps, r.samples, r.median, r.p10, r.p90, r.total_median, r.flops, r.bytes, r.kv_bytes, r.tflops, r.gbps, r.roofline_s, r.roofline_fraction, r.mma_roofline_s,
                  r.mma_roofline_fraction, r.fma_roofline_s, r.fma_roofline_fraction, r.copy_roofline_s, r.copy_roofline_fraction, r.speedup, r.checked_steps, r.max_abs,
                  r.rel_l2, r.workspace_bytes, r.order);
}

/// RFC 4180 records of \p csv (quoted cells may hold commas, quotes and line breaks).
std::vector<std::vector<std::string>> parseCsv(std::string const &csv, std::vector<bool> *quoted = nullptr)
{
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool in_quotes = false, was_quoted = false;
  auto endCell = [&] {
    rows.back().push_back(cell);
    if (quoted)
      quoted->push_back(was_quoted);
    cell.clear();
    was_quoted = false;
  };
  for (size_t i = 0; i < csv.size(); ++i)
  {
    char const c = csv[i];
    if (in_quotes && c == '"' && i + 1 < csv.size() && csv[i + 1] == '"')
      cell += csv[++i];
    else if (c == '"')
      in_quotes = !in_quotes, was_quoted = true;
    else if (!in_quotes && c == ',')
      endCell();
    else if (!in_quotes && c == '\n')
    {
      endCell();
      rows.emplace_back();
    }
    else
      cell += c;
  }
  rows.pop_back();  // after the last line break
  return rows;
}

TEST(Results, everyFieldRoundTripsThroughJsonAndCsv)
{
  ResultSet rs = sample();
  rs.rows = {distinctRow()};
  ResultSet const back = resultSetFromJson(toJson(rs), "round trip");
  ASSERT_EQ(back.rows.size(), 1u);
  EXPECT_TRUE(fields(back.rows[0]) == fields(rs.rows[0])) << toJson(back);

  auto const row_json = nlohmann::ordered_json::parse(toJson(rs))["rows"][0];
  std::vector<bool> quoted;
  auto const csv = parseCsv(toCsv(rs), &quoted);
  ASSERT_EQ(csv.size(), 2u) << "header and one row (the note's line break stays inside its quotes)";
  ASSERT_EQ(csv[0].size(), row_json.size());
  ASSERT_EQ(csv[1].size(), row_json.size());
  size_t i = 0;
  for (auto const &[key, value] : row_json.items())
  {
    EXPECT_EQ(csv[0][i], key) << "column " << i;
    std::string const cell = csv[1][i];
    if (value.is_string())
      EXPECT_EQ(cell, value.get<std::string>()) << key;
    else if (value.is_boolean())
      EXPECT_EQ(cell, value.get<bool>() ? "true" : "false") << key;
    else if (value.is_number_float())
      EXPECT_EQ(std::stod(cell), value.get<double>()) << key;
    else
      EXPECT_EQ(std::stoll(cell), value.get<int64_t>()) << key;
    bool const needs_quotes = cell.find_first_of(",\"\n") != std::string::npos;
    EXPECT_EQ(quoted[csv[0].size() + i], needs_quotes) << key << " quoted exactly when needed";
    ++i;
  }
}

TEST(Results, readerRefusesAnotherSchemaAndSaysHowToRegenerate)
{
  auto j = nlohmann::json::parse(toJson(sample()));
  for (int schema : {RESULTS_SCHEMA - 1, RESULTS_SCHEMA + 1})
  {
    j["schema"] = schema;
    try
    {
      resultSetFromJson(j.dump(), "old/results.json");
      ADD_FAILURE() << "schema " << schema << " accepted";
    }
    catch (InputError const &e)
    {
      std::string const m = e.what();
      EXPECT_NE(m.find("old/results.json"), std::string::npos) << m;
      EXPECT_NE(m.find("schema " + std::to_string(schema)), std::string::npos) << m;
      EXPECT_NE(m.find("canopy run"), std::string::npos) << m;
    }
  }
  j.erase("schema");
  EXPECT_THROW(resultSetFromJson(j.dump(), "unversioned"), InputError);
  j["schema"] = RESULTS_SCHEMA;
  j["rows"][2]["mask"] = "diagonal";
  try
  {
    resultSetFromJson(j.dump(), "r.json");
    ADD_FAILURE() << "unknown mask accepted";
  }
  catch (InputError const &e)
  {
    EXPECT_NE(std::string(e.what()).find("rows[2].mask"), std::string::npos) << e.what();
  }
}
} // namespace

namespace
{
TEST(Results, filesWrittenBeforeTheFp8ColumnsReadAsBf16AndKeepTheirDigest)
{
  // A run's results committed before kv_dtype, kv_scale, numerics and kv_bytes were columns: they
  // read as the only values such a file could hold, and the identity digest its run wrote still
  // matches, so its shards still merge.
  std::string const path = std::string(CANOPY_CONFIG_DIR) + "/../../docs/results/h100-sm90-cluster/run16-pairs/results.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string const text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.find("\"kv_dtype\""), std::string::npos) << "the file must predate the column";
  // It predates the device column too (not an identity field): given one, it reads.
  auto j = nlohmann::json::parse(text);
  for (auto &row : j["rows"])
    row["device"] = "GPU 0";
  ResultSet const rs = resultSetFromJson(j.dump(), path);
  ASSERT_FALSE(rs.rows.empty());
  for (ResultRow const &r : rs.rows)
  {
    EXPECT_EQ(r.axes.kv_dtype, KvDtype::kBf16);
    EXPECT_EQ(r.axes.kv_scale, 1.0);
    EXPECT_EQ(r.numerics, Numerics::kDequant);
    EXPECT_EQ(r.kv_bytes, 0.0);
  }
  EXPECT_EQ(rowsIdentityDigest(rs.rows), rs.environment.at("rows_identity"));

  // Two rows that differ only in the pool's dtype, its scale or the numerics are different rows.
  std::vector<ResultRow> rows{rs.rows.front()};
  std::string const base = rowsIdentityDigest(rows);
  rows[0].axes.kv_dtype = KvDtype::kFp8E4m3;
  std::string const e4m3 = rowsIdentityDigest(rows);
  EXPECT_NE(e4m3, base);
  rows[0].axes.kv_scale = 0.5;
  EXPECT_NE(rowsIdentityDigest(rows), e4m3);
  rows[0].axes.kv_scale = 1.0;
  rows[0].numerics = Numerics::kFp8Mma;
  EXPECT_NE(rowsIdentityDigest(rows), e4m3);
}
} // namespace
