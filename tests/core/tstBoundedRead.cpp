/// \file tstBoundedRead.cpp
/// \brief The one reader of input text files: regular files of a bounded size, everything else
/// refused by name at once (never a block on a FIFO, never an endless read of a device).
#include "canopy_BoundedRead.hpp"
#include "canopy_Error.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace
{
using namespace canopy;
namespace fs = std::filesystem;

fs::path scratch(std::string const &name)
{
  fs::path const dir = fs::temp_directory_path() / ("canopy_bounded_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::remove_all(dir / name);
  return dir / name;
}

void expectRefused(std::string const &path, uint64_t cap, std::vector<std::string> const &needles)
{
  auto const t0 = std::chrono::steady_clock::now();
  try
  {
    readRegularFile(path, "config", cap);
    ADD_FAILURE() << path << " was read";
  }
  catch (InputError const &e)
  {
    std::string const msg = e.what();
    for (std::string const &n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    EXPECT_EQ(msg.rfind("config: '" + path + "'", 0), 0u) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << path;
}

TEST(BoundedRead, regularFilesAreReadWhole)
{
  fs::path const p = scratch("ok.toml");
  std::ofstream(p) << "a = 1\n";
  EXPECT_EQ(readRegularFile(p.string(), "config", 100), "a = 1\n");
  EXPECT_EQ(requireRegularFile(p.string(), "config"), 6u);
  // Files whose stated size is 0 but that have contents (procfs) are read up to the cap.
  EXPECT_NE(readRegularFile("/proc/self/status", "config", 1 << 20).find("Name:"), std::string::npos);
}

TEST(BoundedRead, specialFilesAreRefusedWithoutBlocking)
{
  fs::path const fifo = scratch("fifo.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expectRefused(fifo.string(), 1 << 20, {"FIFO"});
  EXPECT_THROW(requireRegularFile(fifo.string(), "trace"), InputError);
  expectRefused("/dev/zero", 1 << 20, {"character device"});
  expectRefused("/dev/urandom", 1 << 20, {"character device"});
  fs::path const link = scratch("zero-link.json");
  fs::create_symlink("/dev/zero", link);
  expectRefused(link.string(), 1 << 20, {"character device"});
  expectRefused(fs::temp_directory_path().string(), 1 << 20, {"a folder"});
  expectRefused(scratch("absent.toml").string(), 1 << 20, {"cannot be opened", "No such file"});
}

TEST(BoundedRead, filesLargerThanTheCapAreRefused)
{
  fs::path const p = scratch("big.json");
  std::ofstream(p) << std::string(1000, 'x');
  expectRefused(p.string(), 999, {"1000 bytes", "999 bytes"});
  EXPECT_EQ(readRegularFile(p.string(), "config", 1000).size(), 1000u);
  // A procfs file states size 0 and still holds more than a tiny cap.
  expectRefused("/proc/self/status", 16, {"larger than the 16 bytes"});
}
} // namespace
