/// \file canopy_EnumNames.hpp
/// \brief Names of the project's enums, one table per enum (EnumNames<E>), and the one pair of
/// helpers that reads and writes them: toString(E) and parseEnum<E>(name, what).
#pragma once

#include "canopy_Error.hpp"

#include <array>
#include <string>
#include <utility>

namespace canopy
{
/// \brief Specialise with `static constexpr char const *kind` (what the enum is called in a
/// message) and `static constexpr std::array<std::pair<E, char const *>, N> table`.
template <class E>
struct EnumNames;

/// \brief The name of \p value, as configs and result files spell it.
template <class E, class = decltype(EnumNames<E>::table)>
std::string toString(E value)
{
  for (auto const &[v, name] : EnumNames<E>::table)
    if (v == value)
      return name;
  return "?";
}

/// \brief The enumerator named \p name; throws InputError naming \p what, the bad name and the
/// names accepted.
template <class E>
E parseEnum(std::string const &name, std::string const &what)
{
  std::string expected;
  for (auto const &[v, n] : EnumNames<E>::table)
  {
    if (name == n)
      return v;
    expected += (expected.empty() ? "" : ", ") + std::string(n);
  }
  throw InputError(what + ": unknown " + EnumNames<E>::kind + " '" + name + "' (expected one of " + expected + ")");
}
} // namespace canopy
