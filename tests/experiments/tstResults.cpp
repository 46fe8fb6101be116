/// \file tstResults.cpp
/// \brief Statistics, speedups and the table/JSON/CSV writers.
#include "canopy_Results.hpp"
#include "canopy_Statistics.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

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
  a.mask = "full";
  a.nsplit = 4;
  a.workspace = "persistent";
  a.mode = "eager";
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
  c.mask = "tree";  // no baseline row with this mask: no speedup
  ResultRow d = a;
  d.design = "broken";
  d.status = "FAILED";
  d.note = "step 3: rel L2 0.5";
  rs.rows = {a, b, c, d};
  return rs;
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
  EXPECT_NE(md.find("2000.0"), std::string::npos) << "times in µs below 20 ms";
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
  EXPECT_NE(toCsv(rs).find("roofline_fraction,mma_roofline_fraction,fma_roofline_fraction,speedup"), std::string::npos);
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
} // namespace
