#include "canopy_Registry.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"

#include <algorithm>
#include <mutex>
#include <set>

namespace canopy
{
namespace
{
struct Entry
{
  std::string name, summary;
  DesignFactory factory;
  bool experimental = false;
  std::string origin;  ///< plugin library, "" when built in
};
std::vector<Entry> &entries()
{
  static std::vector<Entry> e;
  return e;
}
/// The registered entry named \p name (the built-ins registered first), nullptr when none is.
Entry const *findEntry(std::string const &name)
{
  registerBuiltinDesigns();
  for (auto const &e : entries())
    if (e.name == name)
      return &e;
  return nullptr;
}
} // namespace

void registerDesign(std::string const &name, std::string const &summary, DesignFactory factory, bool experimental,
                    std::string const &origin)
{
  for (auto &e : entries())
    if (e.name == name)
    {
      e = {name, summary, std::move(factory), experimental, origin};
      return;
    }
  entries().push_back({name, summary, std::move(factory), experimental, origin});
}

void unregisterDesign(std::string const &name)
{
  auto &e = entries();
  e.erase(std::remove_if(e.begin(), e.end(), [&](Entry const &x) { return x.name == name; }), e.end());
}

bool designIsExperimental(std::string const &name)
{
  Entry const *e = findEntry(name);
  return e && e->experimental;
}

std::string designOrigin(std::string const &name)
{
  Entry const *e = findEntry(name);
  return e ? e->origin : std::string();
}

bool designExists(std::string const &name) { return findEntry(name) != nullptr; }

std::vector<std::string> designNames(bool include_experimental)
{
  registerBuiltinDesigns();
  std::vector<std::string> names;
  for (auto const &e : entries())
    if (include_experimental || !e.experimental)
      names.push_back(e.name);
  return names;
}

std::string designSummary(std::string const &name)
{
  Entry const *e = findEntry(name);
  return e ? e->summary : std::string();
}

DesignPtr makeDesign(std::string const &name)
{
  if (Entry const *e = findEntry(name))
    return e->factory();
  std::string known;
  for (auto const &e : entries())
    known += (known.empty() ? "" : ", ") + e.name;
  throw InputError("design '" + name + "' is not compiled into this build (available: " + known + ")");
}

std::vector<std::string> parseDesignList(std::string const &list, std::string const &key)
{
  std::vector<std::string> out;
  std::set<std::string> seen;
  size_t begin = 0;
  for (size_t i = 0; begin <= list.size(); ++i)
  {
    size_t const end = std::min(list.find(',', begin), list.size());
    std::string const item = list.substr(begin, end - begin);
    begin = end + 1;
    std::string const at = key + "[" + std::to_string(i) + "]";
    if (item.empty())
      throw InputError(at + ": empty name (a stray comma?) in '" + list + "'");
    if (item == "all")
      throw InputError(at + ": 'all' stands alone: give --designs all, or a list of designs without it");
    if (!seen.insert(item).second)
      throw InputError(at + ": '" + item + "' is listed twice");
    try
    {
      makeDesign(item);
    }
    catch (InputError const &e)
    {
      throw InputError(at + ": " + e.what());  // e says what this build has
    }
    out.push_back(item);
  }
  return out;
}
} // namespace canopy
