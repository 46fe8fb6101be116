#include "canopy_Environment.hpp"

#include "canopy_Config.hpp"
#include "canopy_Executor.hpp"
#include "canopy_GitHash.hpp"
#include "canopy_Runtime.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <sys/utsname.h>
#include <unistd.h>

namespace canopy
{
namespace
{
std::string runCommand(std::string const &cmd)
{
  std::array<char, 256> buf{};
  std::string out;
  if (FILE *f = ::popen(cmd.c_str(), "r"))
  {
    while (std::fgets(buf.data(), buf.size(), f))
      out += buf.data();
    ::pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}
} // namespace

std::string gitDescribe()
{
  std::string const built = CANOPY_GIT_BUILT;
  std::string const dir = CANOPY_SOURCE_DIR;
  std::string h = runCommand("git -C '" + dir + "' rev-parse --short=12 HEAD 2>/dev/null");
  if (h.empty())
    return built.empty() ? "unknown" : built + " (at build; no checkout at run time)";
  if (!runCommand("git -C '" + dir + "' status --porcelain --untracked-files=no 2>/dev/null").empty())
    h += "-dirty";
  // A checkout at the build path on another machine (a copy, a later pull) need not be what the
  // binary was built from: say both when they differ.
  return built.empty() || built == h ? h : h + " (checkout at run time; built at " + built + ")";
}

std::map<std::string, std::string> collectEnvironment(ExperimentConfig const &c, std::set<MemoryKind> const &kinds)
{
  std::map<std::string, std::string> env;
  utsname u{};
  if (::uname(&u) == 0)
    env["host_os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  env["host_cores"] = std::to_string(::sysconf(_SC_NPROCESSORS_ONLN));
  env["git"] = gitDescribe();
  env["config"] = c.source_path;
  env["config_hash"] = c.hash;
  std::string traces;
  for (std::string const &t : c.traces)
    traces += (traces.empty() ? "" : "; ") + t + " " + fileContentHash(t);
  env["trace_hashes"] = traces;
  env["seed"] = std::to_string(c.seed);
  env["shard"] = std::to_string(c.shard_index) + "/" + std::to_string(c.shard_count);
  char host[256] = {};
  env["host"] = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  env["canopy_build"] = std::string(CANOPY_GIT_BUILT).empty() ? "unknown" : CANOPY_GIT_BUILT;
  KokkosInfo const kokkos = kokkosInfo();
  env["kokkos_version"] = kokkos.version;
  env["kokkos_origin"] = CANOPY_KOKKOS_ORIGIN;
  env["kokkos_default_space"] = kokkos.default_space;
  env["kokkos_spaces"] = kokkos.spaces;
  env["canopy_version"] = CANOPY_VERSION;
  std::time_t const now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  env["date"] = buf;
  std::string device;
  for (MemoryKind k : kinds)
  {
    Executor &e = executorFor(k);
    std::string const d = e.device();
    if (device.find(d) == std::string::npos)
      device += (device.empty() ? "" : "; ") + d;
    for (auto const &[key, value] : e.environment())
      env[key] = value;
  }
  env["device"] = device;
  return env;
}
} // namespace canopy
