/// \file canopy_TestDesigns.hpp
/// \brief A design registered for the scope of one test (ScopedDesign), and the shared main's check
/// that every test leaves the registry as it found it (RegistryLeakCheck): no test leaves a design
/// behind it, so none depends on the order the tests run in.
#pragma once

#include "canopy_Registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace canopy::test
{
class ScopedDesign
{
public:
  /// \pre \p name is not registered yet (removing it afterwards would remove a design the build owns).
  ScopedDesign(std::string name, std::string const &summary, DesignFactory factory, bool experimental = false)
      : _name(std::move(name))
  {
    auto const names = designNames(/*include_experimental=*/true);
    if (std::find(names.begin(), names.end(), _name) != names.end())
      throw std::logic_error("ScopedDesign: '" + _name + "' is already registered");
    registerDesign(_name, summary, std::move(factory), experimental);
  }
  ~ScopedDesign() { unregisterDesign(_name); }
  ScopedDesign(ScopedDesign const &) = delete;
  ScopedDesign &operator=(ScopedDesign const &) = delete;

private:
  std::string _name;
};

/// \brief Fails the test that leaves the registry with other designs than it started with
/// (googletest's leak-checking listener pattern: a failure raised in OnTestEnd counts for the test).
class RegistryLeakCheck : public ::testing::EmptyTestEventListener
{
  std::vector<std::string> _before;
  void OnTestStart(::testing::TestInfo const &) override { _before = designNames(/*include_experimental=*/true); }
  void OnTestEnd(::testing::TestInfo const &) override
  {
    EXPECT_EQ(designNames(/*include_experimental=*/true), _before)
        << "this test left the design registry changed (register test designs with test::ScopedDesign)";
  }
};
} // namespace canopy::test
