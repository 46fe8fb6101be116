#include "canopy_Registry.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"

#include <mutex>
#include <sstream>

namespace canopy
{
namespace
{
struct Entry
{
  std::string name, summary;
  DesignFactory factory;
};
std::vector<Entry> &entries()
{
  static std::vector<Entry> e;
  return e;
}
} // namespace

std::string toString(WorkspaceStrategy s)
{
  switch (s)
  {
  case WorkspaceStrategy::kPersistent: return "persistent";
  case WorkspaceStrategy::kPerCall: return "per-call";
  case WorkspaceStrategy::kGrow: return "grow";
  }
  return "?";
}

WorkspaceStrategy parseWorkspaceStrategy(std::string const &name, std::string const &what)
{
  if (name == "persistent")
    return WorkspaceStrategy::kPersistent;
  if (name == "per-call")
    return WorkspaceStrategy::kPerCall;
  if (name == "grow")
    return WorkspaceStrategy::kGrow;
  throw InputError(what + ": unknown workspace strategy '" + name + "' (expected persistent, per-call or grow)");
}

void registerDesign(std::string const &name, std::string const &summary, DesignFactory factory)
{
  for (auto &e : entries())
    if (e.name == name)
    {
      e = {name, summary, std::move(factory)};
      return;
    }
  entries().push_back({name, summary, std::move(factory)});
}

std::vector<std::string> designNames()
{
  registerBuiltinDesigns();
  std::vector<std::string> names;
  for (auto const &e : entries())
    names.push_back(e.name);
  return names;
}

std::string designSummary(std::string const &name)
{
  registerBuiltinDesigns();
  for (auto const &e : entries())
    if (e.name == name)
      return e.summary;
  return {};
}

DesignPtr makeDesign(std::string const &name)
{
  registerBuiltinDesigns();
  for (auto const &e : entries())
    if (e.name == name)
      return e.factory();
  std::string known;
  for (auto const &e : entries())
    known += (known.empty() ? "" : ", ") + e.name;
  throw InputError("design '" + name + "' is not compiled into this build (available: " + known + ")");
}

std::vector<std::string> parseDesignList(std::string const &list)
{
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  auto names = designNames();
  while (std::getline(ss, item, ','))
  {
    if (item.empty())
      continue;
    makeDesign(item);  // throws with the list of what is compiled
    out.push_back(item);
  }
  if (out.empty())
    throw InputError("designs: empty list");
  return out;
}
} // namespace canopy
