/// \file canopy_PluginLoader.cpp
/// \brief dlopen + the ABI check + registration through a collecting registrar, so a refused library
/// leaves the registry as it was.
#include "canopy_PluginLoader.hpp"

#include "canopy_Error.hpp"
#include "canopy_Plugin.hpp"
#include "canopy_Registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <sstream>

namespace canopy
{
namespace
{
/// Runs \p f, rethrowing what it throws with "<where>: <step>: " before its message (built only then:
/// the wrapper adds no allocation to a design's run). Canopy's own error types keep
/// their meaning (Unsupported: the design skips the shape; GpuUnavailable: wrong host;
/// RuntimeFailure: the machine failed); anything else a plugin throws is a fault of the library,
/// reported as bad input rather than a crash or a failure of Canopy.
template <class F>
void rethrowNamed(std::string const &where, char const *step, F &&f)
{
  auto const named = [&](char const *what) { return where + ": " + step + ": " + what; };
  try
  {
    f();
  }
  catch (Unsupported const &e)
  {
    throw Unsupported(named(e.what()));
  }
  catch (InputError const &e)
  {
    throw InputError(named(e.what()));
  }
  catch (GpuUnavailable const &)
  {
    throw;
  }
  catch (RuntimeFailure const &e)
  {
    throw RuntimeFailure(named(e.what()));
  }
  catch (std::exception const &e)
  {
    throw InputError(named(e.what()));
  }
  catch (...)
  {
    throw InputError(named("threw an exception that is no std::exception"));
  }
}

/// A plugin's design behind the registry: its failures name it and its library (rethrowNamed).
class PluginDesign final : public Design
{
public:
  PluginDesign(DesignPtr inner, std::string where) : _inner(std::move(inner)), _where(std::move(where)) {}

  std::string name() const override { return _inner->name(); }
  MemoryKind memory() const override { return _inner->memory(); }
  void plan(PlanBounds const &bounds, DesignOptions const &options) override
  {
    requireServed(*this, bounds, options);
    guarded("plan", [&] { _inner->plan(bounds, options); });
  }
  void run(BatchRef const &batch, ExecContext const &ctx) override
  {
    guarded("run", [&] { _inner->run(batch, ctx); });
  }
  std::string path() const override { return _inner->path(); }
  int splits() const override { return _inner->splits(); }
  std::string kernelPaths() const override { return _inner->kernelPaths(); }
  size_t workspaceBytes() const override { return _inner->workspaceBytes(); }
  bool captureSafe() const override { return _inner->captureSafe(); }
  std::string whyNotServed(KvDtype kv_dtype, Numerics numerics) const override
  {
    return _inner->whyNotServed(kv_dtype, numerics);
  }

private:
  template <class F>
  void guarded(char const *step, F &&f)
  {
    rethrowNamed(_where, step, std::forward<F>(f));
  }

  DesignPtr _inner;
  std::string _where;
};

/// Collects a plugin's designs; the loader registers them only once all are known to be valid.
class CollectingRegistrar final : public PluginRegistrar
{
public:
  struct Item
  {
    std::string name, summary;
    DesignFactory factory;
    bool experimental;
  };
  void add(std::string const &name, std::string const &summary, std::function<DesignPtr()> factory,
           bool experimental) override
  {
    items.push_back({name, summary, std::move(factory), experimental});
  }
  std::vector<Item> items;
};

/// Names fit the C ABI's 64-byte field and read cleanly in tables, CSV and config lists.
bool validName(std::string const &name)
{
  return !name.empty() && name.size() < 64 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

/// Loaded libraries (absolute path -> their designs). They stay loaded for the life of the process:
/// the registry holds factories whose code lives in them.
std::map<std::string, std::vector<std::string>> &loaded()
{
  static std::map<std::string, std::vector<std::string>> m;
  return m;
}

std::string dlerrorText()
{
  char const *e = dlerror();
  return e ? e : "unknown error";
}
} // namespace

std::vector<std::string> splitPluginList(std::string const &list)
{
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ':'))
    if (!item.empty())
      out.push_back(item);
  return out;
}

std::vector<std::string> loadPlugin(std::string const &path)
{
  std::string const what = "plugin " + path;
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec))
    throw InputError(what + ": no such file");
  std::string const absolute = std::filesystem::canonical(path, ec).string();
  if (auto it = loaded().find(absolute); it != loaded().end())
    return it->second;
  registerBuiltinDesigns();  // so a plugin that reuses a built-in name is refused, whatever ran first

  // RTLD_LOCAL: the plugin's symbols stay its own, so two plugins never bind to each other's code.
  void *handle = dlopen(absolute.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw InputError(what + ": cannot load it: " + dlerrorText());
  auto refuse = [&](std::string const &why) {
    dlclose(handle);
    throw InputError(what + ": " + why);
  };
  auto const abi = reinterpret_cast<int (*)()>(dlsym(handle, CANOPY_PLUGIN_ABI_SYMBOL));
  auto const reg = reinterpret_cast<void (*)(PluginRegistrar &)>(dlsym(handle, CANOPY_PLUGIN_REGISTER_SYMBOL));
  if (!abi || !reg)
    refuse("not a Canopy plugin (it exports no " CANOPY_PLUGIN_ABI_SYMBOL " and " CANOPY_PLUGIN_REGISTER_SYMBOL
           "; define them with CANOPY_PLUGIN from canopy_Plugin.hpp)");
  if (int const v = abi(); v != CANOPY_PLUGIN_ABI_VERSION)
    refuse("built against Canopy plugin ABI version " + std::to_string(v) + ", this Canopy has version " +
           std::to_string(CANOPY_PLUGIN_ABI_VERSION) + ": rebuild it against this installation");

  std::string problem;
  {
    // The collected factories are the plugin's code: they go before a refused library is closed.
    CollectingRegistrar collected;
    try
    {
      rethrowNamed(what, "registration", [&] { reg(collected); });
    }
    catch (InputError const &e)
    {
      problem = e.what();
    }
    std::vector<std::string> names;
    for (auto const &item : collected.items)
    {
      if (!problem.empty())
        break;
      if (!validName(item.name))
        problem = what + ": design name '" + item.name + "' is not 1-63 letters, digits, '-', '_' or '.'";
      else if (designExists(item.name))
        problem = what + ": design '" + item.name + "' exists already" +
                  (designOrigin(item.name).empty() ? " (built in)" : " (from " + designOrigin(item.name) + ")");
      else if (std::find(names.begin(), names.end(), item.name) != names.end())
        problem = what + ": registers design '" + item.name + "' twice";
      names.push_back(item.name);
    }
    if (problem.empty() && collected.items.empty())
      problem = what + ": registers no design (register through the PluginRegistrar that CANOPY_PLUGIN "
                       "passes, not canopy::registerDesign)";
    if (problem.empty())
    {
      for (auto &item : collected.items)
      {
        std::string const where = "design '" + item.name + "' (from " + absolute + ")";
        DesignFactory make = [factory = std::move(item.factory), where]() -> DesignPtr {
          DesignPtr d;
          rethrowNamed(where, "construction", [&] { d = factory(); });
          if (!d)
            throw InputError(where + ": its factory returned no design");
          return std::make_unique<PluginDesign>(std::move(d), where);
        };
        registerDesign(item.name, item.summary, std::move(make), item.experimental, absolute);
      }
      loaded()[absolute] = names;
      return names;
    }
  }
  dlclose(handle);
  throw InputError(problem);
}
} // namespace canopy
