#include "canopy_Results.hpp"

#include "canopy_Error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <type_traits>
#include <sstream>
#include <unistd.h>

namespace canopy
{
namespace
{
std::string fmt(char const *f, double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string optionsKey(ResultRow const &r)
{
  return r.input + "|" + toString(r.axes.kv_dtype) + "|" + fmt("%.9g", r.axes.kv_scale) + "|" + r.group + "|" +
         toString(r.mask) + "|" + std::to_string(r.nsplit) + "|" + toString(r.workspace) + "|" + toString(r.mode) +
         "|" + (r.l2_flush ? "1" : "0") + "|" + toString(r.numerics);
}

/// A column's time unit: µs while its largest value is below 1 ms, then ms, then s.
struct TimeUnit
{
  double scale;
  std::string name;
};
TimeUnit timeUnit(double max_seconds, bool latex)
{
  if (max_seconds < 1e-3)
    return {1e6, latex ? "\\textmu s" : "µs"};
  return max_seconds < 1 ? TimeUnit{1e3, "ms"} : TimeUnit{1, "s"};
}

/// At least three significant digits and never an exponent: 51.2, 0.0512, 39279.
std::string threeDigits(double v)
{
  if (!(v > 0))
    return "0";
  int const decimals = v >= 100 ? 0 : 2 - static_cast<int>(std::floor(std::log10(v)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// Columns shown in the tables: an option column appears only when it varies across rows; the
/// constant ones go into the caption, as papers print them.
struct Column
{
  std::string title;
  std::function<std::string(ResultRow const &)> get;
};

struct TableLayout
{
  std::vector<Column> cols;
  std::string caption;
  bool ok = true;
};

TableLayout layoutOf(ResultSet const &rs, bool latex)
{
  TableLayout t;
  auto timed = [](ResultRow const &r) { return r.samples > 0; };
  double max_median = 0, max_p90 = 0;
  for (auto const &r : rs.rows)
    if (timed(r))
      max_median = std::max(max_median, r.median), max_p90 = std::max(max_p90, r.p90);
  TimeUnit const median_unit = timeUnit(max_median, latex), spread_unit = timeUnit(max_p90, latex);

  std::vector<Column> options{
      {"input", [](auto const &r) { return r.input; }},
      {"group", [](auto const &r) { return r.group; }},
      {"mask", [](auto const &r) { return toString(r.mask); }},
      {"NSPLIT", [](auto const &r) { return r.nsplit > 0 ? std::to_string(r.nsplit) : std::string("auto"); }},
      {"workspace", [](auto const &r) { return toString(r.workspace); }},
      {"mode", [](auto const &r) { return toString(r.mode); }},
      {"L2 flush", [](auto const &r) { return std::string(r.l2_flush ? "yes" : "no"); }},
      {"numerics", [](auto const &r) { return toString(r.numerics); }},
  };
  std::string constants;
  for (auto &c : options)
  {
    std::set<std::string> values;
    for (auto const &r : rs.rows)
      values.insert(c.get(r));
    if (values.size() > 1 || c.title == "input")
      t.cols.push_back(c);
    else if (!values.empty())
      constants += (constants.empty() ? "" : ", ") + c.title + " = " + *values.begin();
  }
  t.cols.push_back({"design", [](auto const &r) { return r.design; }});
  t.cols.push_back({"path", [](auto const &r) { return r.path; }});
  t.cols.push_back({"median (" + median_unit.name + ")",
                    [=](auto const &r) { return timed(r) ? threeDigits(r.median * median_unit.scale) : "-"; }});
  t.cols.push_back({"p10-p90 (" + spread_unit.name + ")", [=](auto const &r) {
                      double const k = spread_unit.scale;
                      return timed(r) ? threeDigits(r.p10 * k) + "-" + threeDigits(r.p90 * k) : "-";
                    }});
  t.cols.push_back({"TFLOP/s", [=](auto const &r) { return timed(r) ? fmt("%.3g", r.tflops) : "-"; }});
  t.cols.push_back({"GB/s", [=](auto const &r) { return timed(r) ? fmt("%.3g", r.gbps) : "-"; }});
  t.cols.push_back({latex ? "roofline \\%" : "roofline %",
                    [](auto const &r) { return r.roofline_s > 0 ? fmt("%.1f", 100 * r.roofline_fraction) : "-"; }});
  bool any_mma = false;
  for (auto const &r : rs.rows)
    any_mma = any_mma || r.mma_roofline_s > 0;
  if (any_mma)  // GPU runs: the bound an mma.sync-only (sm_120-style) design can approach here
    t.cols.push_back({latex ? "mma.sync roofline \\%" : "mma.sync roofline %", [](auto const &r) {
                        return r.mma_roofline_s > 0 ? fmt("%.1f", 100 * r.mma_roofline_fraction) : "-";
                      }});
  bool any_fma = false;
  for (auto const &r : rs.rows)
    any_fma = any_fma || r.fma_roofline_s > 0;
  if (any_fma)  // GPU runs: the bound of a design on CUDA cores only (the portable Kokkos kernels)
    t.cols.push_back({latex ? "fp32 FMA roofline \\%" : "fp32 FMA roofline %", [](auto const &r) {
                        return r.fma_roofline_s > 0 ? fmt("%.1f", 100 * r.fma_roofline_fraction) : "-";
                      }});
  bool any_copy = false;
  for (auto const &r : rs.rows)
    any_copy = any_copy || r.copy_roofline_s > 0;
  if (any_copy)  // sm_90 runs: the bound of the 64-row tile designs' gathered copies
    t.cols.push_back({latex ? "copy roofline \\%" : "copy roofline %", [](auto const &r) {
                        return r.copy_roofline_s > 0 ? fmt("%.1f", 100 * r.copy_roofline_fraction) : "-";
                      }});
  bool any_ws = false;
  for (auto const &r : rs.rows)
    any_ws = any_ws || r.workspace_bytes > 0;
  if (any_ws)  // the workspace experiment compares memory as well as latency
    t.cols.push_back({"workspace (MB)", [](auto const &r) { return fmt("%.2f", r.workspace_bytes * 1e-6); }});
  t.cols.push_back({"speedup", [](auto const &r) { return r.speedup > 0 ? fmt("%.2fx", r.speedup) : "-"; }});
  t.cols.push_back({"rel L2", [](auto const &r) { return r.checked_steps > 0 ? fmt("%.1e", r.rel_l2) : "-"; }});
  t.cols.push_back({"status", [](auto const &r) { return toString(r.status); }});
  t.caption = rs.experiment + ": time per verify step, median of " + std::to_string(rs.repetitions) +
              " repetitions per step (p10-p90 spread); speedup = " + rs.baseline + " time / design time, same run";
  if (!constants.empty())
    t.caption += "; " + constants;
  return t;
}

std::string latexEscape(std::string s)
{
  std::string o;
  for (char c : s)
  {
    if (c == '_' || c == '%' || c == '&' || c == '#' || c == '$')
      o += '\\';
    o += c;
  }
  return o;
}
} // namespace

void computeSpeedups(ResultSet &rs)
{
  std::map<std::string, double> base;
  for (auto const &r : rs.rows)
    if (r.design == rs.baseline && r.status == RowStatus::kOk && r.total_median > 0)
      base[optionsKey(r)] = r.total_median;
  for (auto &r : rs.rows)
  {
    auto it = base.find(optionsKey(r));
    r.speedup = (it != base.end() && r.status == RowStatus::kOk && r.total_median > 0) ? it->second / r.total_median : 0;
  }
}

namespace
{
/// One row as results.json holds it; only the fields \p keep accepts when given.
nlohmann::ordered_json rowJson(ResultRow const &r, std::function<bool(char const *)> const &keep = {})
{
  nlohmann::ordered_json o;
  forEachField(r, [&](char const *key, auto const &v) {
    if (keep && !keep(key))
      return;
    if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>)
      o[key] = toString(v);
    else
      o[key] = v;
  });
  return o;
}
} // namespace

std::string rowsIdentityDigest(std::vector<ResultRow> const &rows)
{
  static std::set<std::string> const identity{"input",     "group",           "trace",  "batch",  "heads", "tree",
                                              "prefix",    "ragged",          "compacted", "values", "recorded_values",
                                              "design",    "mask",            "nsplit", "workspace", "mode",
                                              "l2_flush",  "order", "kv_dtype", "kv_scale", "numerics"};
  std::string text;
  for (ResultRow const &r : rows)
  {
    nlohmann::ordered_json o = rowJson(r, [](char const *key) { return identity.count(key) > 0; });
    // The FP8 fields join the digest only where they differ from the one value files written
    // before them held, so those files' digests (and their shards' merge) stay as they were.
    if (r.axes.kv_dtype == KvDtype::kBf16)
      o.erase("kv_dtype");
    if (r.axes.kv_scale == 1.0)
      o.erase("kv_scale");
    if (r.numerics == Numerics::kDequant)
      o.erase("numerics");
    text += o.dump() + "\n";
  }
  return contentHash(text);
}

std::string toJson(ResultSet const &rs)
{
  nlohmann::ordered_json j;
  j["schema"] = RESULTS_SCHEMA;
  j["experiment"] = rs.experiment;
  j["description"] = rs.description;
  j["baseline"] = rs.baseline;
  j["repetitions"] = rs.repetitions;
  j["environment"] = rs.environment;
  j["rows"] = nlohmann::ordered_json::array();
  for (auto const &r : rs.rows)
    j["rows"].push_back(rowJson(r));
  return j.dump(2) + "\n";
}

ResultSet resultSetFromJson(std::string const &text, std::string const &source)
{
  nlohmann::json j;
  try
  {
    j = nlohmann::json::parse(text);
  }
  catch (nlohmann::json::exception const &e)
  {
    throw InputError(source + ": not valid JSON (" + e.what() + ")");
  }
  std::string where = source;
  auto field = [&](nlohmann::json const &obj, char const *key) -> nlohmann::json const & {
    if (!obj.is_object() || !obj.contains(key))
      throw InputError(where + ": missing field \"" + key + "\"");
    return obj.at(key);
  };
  int const schema = j.is_object() && j.contains("schema") && j["schema"].is_number_integer() ? j["schema"].get<int>() : 1;
  if (schema != RESULTS_SCHEMA)
    throw InputError(source + ": results schema " + std::to_string(schema) + " is not the schema " +
                     std::to_string(RESULTS_SCHEMA) + " this build reads; regenerate it with `canopy run CONFIG --out DIR`" +
                     (schema < RESULTS_SCHEMA ? " or convert it with `scripts/convert-results FILE`" : ""));
  try
  {
    ResultSet rs;
    rs.experiment = field(j, "experiment").get<std::string>();
    rs.description = field(j, "description").get<std::string>();
    rs.baseline = field(j, "baseline").get<std::string>();
    rs.repetitions = field(j, "repetitions").get<int>();
    rs.environment = field(j, "environment").get<std::map<std::string, std::string>>();
    auto const &rows = field(j, "rows");
    if (!rows.is_array())
      throw InputError(source + ": \"rows\" is not an array");
    for (size_t i = 0; i < rows.size(); ++i)
    {
      ResultRow r;
      forEachField(r, [&](char const *key, auto &v) {
        where = source + ": rows[" + std::to_string(i) + "]";
        if (columnAddedLater(key) && rows[i].is_object() && !rows[i].contains(key))
          return;  // the field's default: what a file written before the column held
        auto const &value = field(rows[i], key);
        where += std::string(".") + key;
        if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>)
          v = parseEnum<std::decay_t<decltype(v)>>(value.get<std::string>(), where);
        else
          value.get_to(v);
      });
      rs.rows.push_back(std::move(r));
    }
    return rs;
  }
  catch (nlohmann::json::exception const &e)
  {
    throw InputError(where + ": wrong type (" + e.what() + ")");
  }
}

std::string csvCell(std::string const &s)
{
  if (s.find_first_of(",\"\n\r") == std::string::npos && (s.empty() || (s.front() != ' ' && s.back() != ' ')))
    return s;
  std::string o = "\"";
  for (char c : s)
    o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string toCsv(ResultSet const &rs)
{
  std::string header;
  ResultRow const columns;
  forEachField(columns, [&](char const *key, auto const &) { header += (header.empty() ? "" : ",") + csvCell(key); });
  std::string out = header + "\n";
  for (auto const &r : rs.rows)
  {
    std::string line;
    forEachField(r, [&](char const *, auto const &v) {
      using T = std::decay_t<decltype(v)>;
      std::string cell;
      if constexpr (std::is_enum_v<T>)
        cell = toString(v);
      else if constexpr (std::is_same_v<T, std::string>)
        cell = v;
      else if constexpr (std::is_same_v<T, bool>)
        cell = v ? "true" : "false";
      else if constexpr (std::is_floating_point_v<T>)
        cell = fmt("%.17g", v);
      else
        cell = std::to_string(v);
      line += (line.empty() ? "" : ",") + csvCell(cell);
    });
    out += line + "\n";
  }
  return out;
}

std::string toMarkdownTable(ResultSet const &rs)
{
  TableLayout const t = layoutOf(rs, false);
  std::ostringstream o;
  o << "**" << t.caption << ".**\n\n|";
  for (auto const &c : t.cols)
    o << " " << c.title << " |";
  o << "\n|";
  for (size_t i = 0; i < t.cols.size(); ++i)
    o << (i < 1 ? " --- |" : " ---: |");
  o << "\n";
  for (auto const &r : rs.rows)
  {
    o << "|";
    for (auto const &c : t.cols)
      o << " " << c.get(r) << " |";
    o << "\n";
  }
  std::set<std::string> notes;
  for (auto const &r : rs.rows)
    if (!r.note.empty() && notes.insert(r.design + toString(r.mode) + r.note).second)
      o << "\n- " << r.design << " (" << toString(r.mode) << "): " << r.note;
  if (rs.environment.count("device"))
    o << "\n\nMeasured on: " << rs.environment.at("device") << "; git " << rs.environment.at("git") << ".\n";
  return o.str();
}

std::string toLatexTable(ResultSet const &rs)
{
  TableLayout const t = layoutOf(rs, true);
  std::ostringstream o;
  o << "% Generated by canopy run; needs \\usepackage{booktabs}\n\\begin{table}[t]\n\\centering\n\\small\n"
    << "\\begin{tabular}{" << std::string(1, 'l');
  for (size_t i = 1; i < t.cols.size(); ++i)
    o << (i < 2 ? "l" : "r");
  o << "}\n\\toprule\n";
  for (size_t i = 0; i < t.cols.size(); ++i)
    o << (i ? " & " : "") << t.cols[i].title;
  o << " \\\\\n\\midrule\n";
  std::string last_input;
  for (auto const &r : rs.rows)
  {
    if (!last_input.empty() && r.input != last_input)
      o << "\\addlinespace\n";
    last_input = r.input;
    for (size_t i = 0; i < t.cols.size(); ++i)
      o << (i ? " & " : "") << latexEscape(t.cols[i].get(r));
    o << " \\\\\n";
  }
  o << "\\bottomrule\n\\end{tabular}\n\\caption{" << latexEscape(t.caption) << ".}\n\\end{table}\n";
  return o.str();
}

std::vector<OutputFile> resultFiles(ResultSet const &rs)
{
  return {{"results.json", toJson(rs)},
          {"results.csv", toCsv(rs)},
          {"table.md", toMarkdownTable(rs)},
          {"table.tex", toLatexTable(rs)}};
}

void writeResults(ResultSet const &rs, std::string const &dir) { OutputDir(dir, true).commit(resultFiles(rs)); }
} // namespace canopy
