/// \file canopy_TomlTable.hpp
/// \brief TOML tables read with key paths in every error ("options.nsplit[1]: must be >= 0") and
/// unknown keys rejected: the one config reader of `canopy run` and `canopy trace synth`.
#pragma once

#include "canopy_BoundedRead.hpp"
#include "canopy_Error.hpp"

#include <toml++/toml.h>

#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace canopy
{
/// \brief The whole of config file \p path as text: a regular file of at most file_caps::CONFIG
/// bytes, or an InputError naming it.
inline std::string readConfigText(std::string const &path)
{
  return readRegularFile(path, "config", file_caps::CONFIG);
}

/// \brief Parses TOML text; a syntax error becomes InputError "source:line:col: TOML syntax error: ...".
inline toml::table parseTomlText(std::string const &text, std::string const &source)
{
  try
  {
    return toml::parse(text, source);
  }
  catch (toml::parse_error const &e)
  {
    std::ostringstream o;
    o << source << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description();
    throw InputError(o.str());
  }
}

/// \brief A (possibly absent) table. Every get/getList/sub records the key as known; finish()
/// rejects the keys nobody asked for, naming them and listing the known ones.
class TomlTable
{
public:
  TomlTable(toml::table const *t, std::string prefix) : _t(t), _prefix(std::move(prefix)) {}

  std::string path(std::string const &key) const { return _prefix.empty() ? key : _prefix + "." + key; }
  bool present() const { return _t != nullptr; }
  bool has(std::string const &key) const { return _t && _t->contains(key); }

  template <class T>
  void get(std::string const &key, T &out)
  {
    _known.insert(key);
    if (toml::node const *node = _t ? _t->get(key) : nullptr)
      out = convert<T>(*node, path(key));
  }

  /// \brief A scalar or an array of scalars; a scalar becomes a one-element list.
  template <class T>
  void getList(std::string const &key, std::vector<T> &out)
  {
    _known.insert(key);
    toml::node const *node = _t ? _t->get(key) : nullptr;
    if (!node)
      return;
    out.clear();
    if (auto const *arr = node->as_array())
    {
      for (size_t i = 0; i < arr->size(); ++i)
        out.push_back(convert<T>(*arr->get(i), path(key) + "[" + std::to_string(i) + "]"));
      if (out.empty())
        throw InputError(path(key) + ": empty list");
    }
    else
      out.push_back(convert<T>(*node, path(key)));
  }

  /// \brief The sub-table \p key ([prefix.key]); absent tables read as empty.
  TomlTable sub(std::string const &key)
  {
    _known.insert(key);
    toml::node const *node = _t ? _t->get(key) : nullptr;
    if (node && !node->is_table())
      throw InputError(path(key) + ": expected a table ([" + path(key) + "])");
    return TomlTable(node ? node->as_table() : nullptr, path(key));
  }

  /// \brief The array of tables \p key ([[prefix.key]]).
  std::vector<TomlTable> subArray(std::string const &key)
  {
    _known.insert(key);
    std::vector<TomlTable> out;
    toml::node const *node = _t ? _t->get(key) : nullptr;
    if (!node)
      return out;
    auto const *arr = node->as_array();
    if (!arr)
      throw InputError(path(key) + ": expected an array of tables ([[" + path(key) + "]])");
    for (size_t i = 0; i < arr->size(); ++i)
    {
      std::string const where = path(key) + "[" + std::to_string(i) + "]";
      auto const *t = arr->get(i)->as_table();
      if (!t)
        throw InputError(where + ": expected a table");
      out.emplace_back(t, where);
    }
    return out;
  }

  void finish() const
  {
    if (!_t)
      return;
    for (auto const &[k, v] : *_t)
      if (!_known.count(std::string(k.str())))
      {
        std::string known;
        for (auto const &x : _known)
          known += (known.empty() ? "" : ", ") + x;
        throw InputError(path(std::string(k.str())) + ": unknown key (known here: " + known + ")");
      }
  }

  template <class T>
  static T convert(toml::node const &n, std::string const &where)
  {
    if constexpr (std::is_same_v<T, bool>)
    {
      if (auto v = n.value_exact<bool>())
        return *v;
      throw InputError(where + ": expected true or false");
    }
    else if constexpr (std::is_same_v<T, std::string>)
    {
      if (auto v = n.value_exact<std::string>())
        return *v;
      throw InputError(where + ": expected a string");
    }
    else if constexpr (std::is_floating_point_v<T>)
    {
      if (n.is_floating_point() || n.is_integer())
        return static_cast<T>(*n.value<double>());
      throw InputError(where + ": expected a number");
    }
    else
    {
      auto v = n.value_exact<int64_t>();
      if (!v)
        throw InputError(where + ": expected an integer");
      if (std::is_unsigned_v<T> && *v < 0)
        throw InputError(where + ": expected a non-negative integer, got " + std::to_string(*v));
      if (!std::is_unsigned_v<T> && (*v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
                                     *v > static_cast<int64_t>(std::numeric_limits<T>::max())))
        throw InputError(where + ": " + std::to_string(*v) + " is out of range");
      return static_cast<T>(*v);
    }
  }

private:
  toml::table const *_t;
  std::string _prefix;
  std::set<std::string> _known;
};
} // namespace canopy
