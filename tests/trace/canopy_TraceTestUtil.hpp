/// \file canopy_TraceTestUtil.hpp
/// \brief Helpers for the trace tests: small seeded traces, temporary paths, and surgical HDF5 edits
/// that break a valid file in exactly one way (dtype, missing dataset, attribute).
#pragma once

#include "canopy_Error.hpp"
#include "canopy_TraceHdf5.hpp"
#include "canopy_TraceSimulator.hpp"
#include "canopy_TraceWriter.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace canopy::test
{
/// A small simulated trace: a few steps of a few requests, short prompts, small pool.
inline SimulatorConfig smallConfig(uint64_t seed)
{
  SimulatorConfig c;
  c.seed = seed;
  c.steps = 6;
  c.warmup_steps = 2;
  c.concurrency = 3;
  c.prompt = {LengthDistribution::Kind::kUniform, 0, 4, 40, 0, 0};
  c.output = {LengthDistribution::Kind::kUniform, 0, 4, 24, 0, 0};
  c.budget = 6;
  c.num_slots = 1024;
  c.shape.num_heads = 2;
  return c;
}

inline TraceColumns smallColumns(uint64_t seed, bool values = false)
{
  TraceColumns c = simulateTrace(smallConfig(seed));
  c.created = "2025-01-02T03:04:05Z";
  if (values)
    addSyntheticValues(c, seed + 99);
  return c;
}

/// A fresh path under the test temp folder, unique per test and name.
inline std::string tempPath(std::string const &name)
{
  auto const *info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "canopy_trace_tests" /
                              (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::create_directories(dir);
  std::filesystem::path p = dir / name;
  std::filesystem::remove_all(p);  // a folder too (a command's output folder from an earlier run)
  return p.string();
}

/// A valid trace of 0 steps (source "empty", no pool), written to tempPath(\p name); its path.
inline std::string writeEmptyTrace(std::string const &name)
{
  TraceColumns c;
  c.source = "empty";
  c.num_slots = 0;
  std::string const path = tempPath(name);
  writeTraceColumns(path, c);
  return path;
}

/// Asserts that \p fn throws InputError whose message contains every one of \p needles.
template <class Fn>
void expectInputError(Fn &&fn, std::vector<std::string> const &needles)
{
  try
  {
    fn();
    ADD_FAILURE() << "expected InputError mentioning '" << (needles.empty() ? "" : needles[0]) << "', nothing thrown";
  }
  catch (InputError const &e)
  {
    std::string const msg = e.what();
    for (auto const &n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
  }
  catch (std::exception const &e)
  {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
  }
}

/// Opens an existing file read-write for an edit.
class H5Edit
{
public:
  explicit H5Edit(std::string const &path)
  {
    Impl::quietHdf5();
    _file = Impl::ownFile(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    if (!_file.valid())
      throw std::runtime_error("test: cannot open " + path + " for editing");
  }
  hid_t file() const { return _file.get(); }

  void remove(char const *path)
  {
    if (H5Ldelete(_file.get(), path, H5P_DEFAULT) < 0)
      throw std::runtime_error(std::string("test: cannot delete ") + path);
  }
  /// Replaces a dataset by one of \p file_type holding \p data (converted from \p mem_type).
  void replace(char const *path, hid_t file_type, hid_t mem_type, void const *data, std::vector<hsize_t> const &dims)
  {
    if (H5Lexists(_file.get(), path, H5P_DEFAULT) > 0)
      remove(path);
    Impl::Hid space = Impl::ownSpace(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    Impl::Hid ds = Impl::ownDataset(
        H5Dcreate2(_file.get(), path, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!ds.valid() || H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
      throw std::runtime_error(std::string("test: cannot write ") + path);
  }
  void removeAttr(char const *obj, char const *name)
  {
    if (H5Adelete_by_name(_file.get(), obj, name, H5P_DEFAULT) < 0)
      throw std::runtime_error(std::string("test: cannot delete attribute ") + name);
  }
  void setStringAttr(char const *obj, char const *name, std::string const &value)
  {
    Impl::Hid o = freshAttr(obj, name);
    Impl::writeStringAttr(o.get(), name, value);
  }
  void setIntAttr(char const *obj, char const *name, int64_t value)
  {
    Impl::Hid o = freshAttr(obj, name);
    Impl::writeInt64Attr(o.get(), name, value);
  }
  void setDoubleAttr(char const *obj, char const *name, double value)
  {
    Impl::Hid o = freshAttr(obj, name);
    Impl::writeDoubleAttr(o.get(), name, value);
  }

private:
  /// Opens \p obj and deletes its attribute \p name if present, so it can be written anew.
  Impl::Hid freshAttr(char const *obj, char const *name)
  {
    Impl::Hid o(H5Oopen(_file.get(), obj, H5P_DEFAULT), H5Oclose);
    if (!o.valid())
      throw std::runtime_error(std::string("test: cannot open ") + obj);
    if (H5Aexists(o.get(), name) > 0)
      H5Adelete(o.get(), name);
    return o;
  }
  Impl::Hid _file;
};
} // namespace canopy::test
