#include "canopy_Results.hpp"

#include "canopy_Error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unistd.h>

namespace canopy
{
namespace
{
std::string optionsKey(ResultRow const &r)
{
  return r.input + "|" + r.group + "|" + r.mask + "|" + std::to_string(r.nsplit) + "|" + r.workspace + "|" + r.mode +
         "|" + (r.l2_flush ? "1" : "0");
}

std::string fmt(char const *f, double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
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
  double max_median = 0;
  for (auto const &r : rs.rows)
    max_median = std::max(max_median, r.median);
  bool const ms = max_median > 0.02;
  double const scale = ms ? 1e3 : 1e6;
  std::string const unit = ms ? "ms" : (latex ? "\\textmu s" : "µs");

  std::vector<Column> options{
      {"input", [](auto const &r) { return r.input; }},
      {"group", [](auto const &r) { return r.group; }},
      {"mask", [](auto const &r) { return r.mask; }},
      {"NSPLIT", [](auto const &r) { return r.nsplit > 0 ? std::to_string(r.nsplit) : std::string("auto"); }},
      {"workspace", [](auto const &r) { return r.workspace; }},
      {"mode", [](auto const &r) { return r.mode; }},
      {"L2 flush", [](auto const &r) { return std::string(r.l2_flush ? "yes" : "no"); }},
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
  auto timed = [](ResultRow const &r) { return r.samples > 0; };
  t.cols.push_back({"median (" + unit + ")",
                    [=](auto const &r) { return timed(r) ? fmt("%.1f", r.median * scale) : "-"; }});
  t.cols.push_back({"p10-p90 (" + unit + ")", [=](auto const &r) {
                      return timed(r) ? fmt("%.1f", r.p10 * scale) + "-" + fmt("%.1f", r.p90 * scale) : "-";
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
  bool any_ws = false;
  for (auto const &r : rs.rows)
    any_ws = any_ws || r.workspace_bytes > 0;
  if (any_ws)  // the workspace experiment compares memory as well as latency
    t.cols.push_back({"workspace (MB)", [](auto const &r) { return fmt("%.2f", r.workspace_bytes * 1e-6); }});
  t.cols.push_back({"speedup", [](auto const &r) { return r.speedup > 0 ? fmt("%.2fx", r.speedup) : "-"; }});
  t.cols.push_back({"rel L2", [](auto const &r) { return r.checked_steps > 0 ? fmt("%.1e", r.rel_l2) : "-"; }});
  t.cols.push_back({"status", [](auto const &r) { return r.status; }});
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
    if (r.design == rs.baseline && r.status == "ok" && r.total_median > 0)
      base[optionsKey(r)] = r.total_median;
  for (auto &r : rs.rows)
  {
    auto it = base.find(optionsKey(r));
    r.speedup = (it != base.end() && r.status == "ok" && r.total_median > 0) ? it->second / r.total_median : 0;
  }
}

std::string toJson(ResultSet const &rs)
{
  nlohmann::json j;
  j["experiment"] = rs.experiment;
  j["description"] = rs.description;
  j["baseline"] = rs.baseline;
  j["repetitions"] = rs.repetitions;
  j["environment"] = rs.environment;
  j["rows"] = nlohmann::json::array();
  for (auto const &r : rs.rows)
  {
    j["rows"].push_back({{"input", r.input},
                         {"group", r.group},
                         {"design", r.design},
                         {"path", r.path},
                         {"mask", r.mask},
                         {"nsplit", r.nsplit},
                         {"workspace", r.workspace},
                         {"mode", r.mode},
                         {"l2_flush", r.l2_flush},
                         {"status", r.status},
                         {"note", r.note},
                         {"steps", r.steps},
                         {"samples", r.samples},
                         {"median_s", r.median},
                         {"p10_s", r.p10},
                         {"p90_s", r.p90},
                         {"total_median_s", r.total_median},
                         {"flops", r.flops},
                         {"bytes_min", r.bytes},
                         {"tflops", r.tflops},
                         {"gbps", r.gbps},
                         {"roofline_s", r.roofline_s},
                         {"roofline_fraction", r.roofline_fraction},
                         {"mma_roofline_s", r.mma_roofline_s},
                         {"mma_roofline_fraction", r.mma_roofline_fraction},
                         {"fma_roofline_s", r.fma_roofline_s},
                         {"fma_roofline_fraction", r.fma_roofline_fraction},
                         {"speedup", r.speedup},
                         {"checked_steps", r.checked_steps},
                         {"max_abs_error", r.max_abs},
                         {"rel_l2_error", r.rel_l2},
                         {"workspace_bytes", r.workspace_bytes},
                         {"order", r.order}});
  }
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
      where = source + ": rows[" + std::to_string(i) + "]";
      auto const &o = rows[i];
      ResultRow r;
      r.input = field(o, "input").get<std::string>();
      r.group = field(o, "group").get<std::string>();
      r.design = field(o, "design").get<std::string>();
      r.path = field(o, "path").get<std::string>();
      r.mask = field(o, "mask").get<std::string>();
      r.nsplit = field(o, "nsplit").get<int>();
      r.workspace = field(o, "workspace").get<std::string>();
      r.mode = field(o, "mode").get<std::string>();
      r.l2_flush = field(o, "l2_flush").get<bool>();
      r.status = field(o, "status").get<std::string>();
      r.note = field(o, "note").get<std::string>();
      r.steps = field(o, "steps").get<int64_t>();
      r.samples = field(o, "samples").get<int64_t>();
      r.median = field(o, "median_s").get<double>();
      r.p10 = field(o, "p10_s").get<double>();
      r.p90 = field(o, "p90_s").get<double>();
      r.total_median = field(o, "total_median_s").get<double>();
      r.flops = field(o, "flops").get<double>();
      r.bytes = field(o, "bytes_min").get<double>();
      r.tflops = field(o, "tflops").get<double>();
      r.gbps = field(o, "gbps").get<double>();
      r.roofline_s = field(o, "roofline_s").get<double>();
      r.roofline_fraction = field(o, "roofline_fraction").get<double>();
      r.mma_roofline_s = field(o, "mma_roofline_s").get<double>();
      r.mma_roofline_fraction = field(o, "mma_roofline_fraction").get<double>();
      // Results written before the fp32 FMA bound existed have no such fields.
      r.fma_roofline_s = o.value("fma_roofline_s", 0.0);
      r.fma_roofline_fraction = o.value("fma_roofline_fraction", 0.0);
      r.speedup = field(o, "speedup").get<double>();
      r.checked_steps = field(o, "checked_steps").get<int64_t>();
      r.max_abs = field(o, "max_abs_error").get<double>();
      r.rel_l2 = field(o, "rel_l2_error").get<double>();
      r.workspace_bytes = field(o, "workspace_bytes").get<double>();
      r.order = field(o, "order").get<int64_t>();
      rs.rows.push_back(r);
    }
    return rs;
  }
  catch (nlohmann::json::exception const &e)
  {
    throw InputError(where + ": a field has the wrong type (" + e.what() + ")");
  }
}

std::string toCsv(ResultSet const &rs)
{
  std::ostringstream o;
  o << "input,group,design,path,mask,nsplit,workspace,mode,l2_flush,status,steps,samples,median_s,p10_s,p90_s,"
       "total_median_s,flops,bytes_min,tflops,gbps,roofline_fraction,mma_roofline_fraction,fma_roofline_fraction,speedup,checked_steps,max_abs_error,rel_l2_error,"
       "workspace_bytes\n";
  auto q = [](std::string const &s) { return "\"" + s + "\""; };
  for (auto const &r : rs.rows)
    o << q(r.input) << "," << q(r.group) << "," << r.design << "," << q(r.path) << "," << r.mask << "," << r.nsplit << ","
      << r.workspace << "," << r.mode << "," << (r.l2_flush ? 1 : 0) << "," << r.status << "," << r.steps << ","
      << r.samples << "," << r.median << "," << r.p10 << "," << r.p90 << "," << r.total_median << "," << r.flops << ","
      << r.bytes << "," << r.tflops << "," << r.gbps << "," << r.roofline_fraction << "," << r.mma_roofline_fraction << "," << r.fma_roofline_fraction
      << "," << r.speedup << ","
      << r.checked_steps << "," << r.max_abs << "," << r.rel_l2 << "," << r.workspace_bytes << "\n";
  return o.str();
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
    if (!r.note.empty() && notes.insert(r.design + r.mode + r.note).second)
      o << "\n- " << r.design << " (" << r.mode << "): " << r.note;
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

void writeFileAtomically(std::string const &path, std::string const &text)
{
  std::string const tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw RuntimeFailure("cannot write '" + tmp + "'");
    out << text;
    out.flush();
    if (!out)
      throw RuntimeFailure("write failed for '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
  {
    std::filesystem::remove(tmp);
    throw RuntimeFailure("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

void writeResults(ResultSet const &rs, std::string const &dir)
{
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw RuntimeFailure("cannot create output folder '" + dir + "': " + ec.message());
  writeFileAtomically(dir + "/results.json", toJson(rs));
  writeFileAtomically(dir + "/results.csv", toCsv(rs));
  writeFileAtomically(dir + "/table.md", toMarkdownTable(rs));
  writeFileAtomically(dir + "/table.tex", toLatexTable(rs));
}
} // namespace canopy
