/// \file tstOutputDir.cpp
/// \brief The output folder of a run: what it did not write is never removed, and the folder it
/// publishes into is the one the given path resolves to.
#include "canopy_OutputDir.hpp"
#include "canopy_Error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace
{
using namespace canopy;
namespace fs = std::filesystem;

fs::path freshDir(std::string const &tag)
{
  fs::path const dir = fs::temp_directory_path() / ("canopy_outdir_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::string readAll(fs::path const &p)
{
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<OutputFile> someResults() { return {{"results.json", "{}\n"}, {"table.md", "| x |\n"}}; }

TEST(OutputDir, filesWrittenDuringTheRunAreKeptAndNamed)
{
  fs::path const dir = freshDir("foreign");
  fs::create_directories(dir);
  std::ofstream(dir / "table.md") << "previous run\n";
  std::vector<std::string> kept;
  {
    OutputDir out(dir.string(), true);
    // While the run holds the folder, someone else writes into it.
    std::ofstream(dir / "notes.txt") << "mine\n";
    fs::create_directories(dir / "notebook");
    std::ofstream(dir / "notebook" / "cell.py") << "print(1)\n";
    std::ofstream(dir / "results.json") << "not canopy's\n";
    kept = out.commit(someResults());
  }
  EXPECT_EQ(readAll(dir / "notes.txt"), "mine\n");
  EXPECT_EQ(readAll(dir / "notebook" / "cell.py"), "print(1)\n");
  // Same name as a file of the new set: both kept, the user's under the kept suffix.
  EXPECT_EQ(readAll(dir / "results.json"), "{}\n");
  EXPECT_EQ(readAll(dir / (std::string("results.json") + OutputDir::KEPT_SUFFIX)), "not canopy's\n");
  // The previous run's table (there when the folder was claimed) is replaced.
  EXPECT_EQ(readAll(dir / "table.md"), "| x |\n");
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"notebook", "notes.txt", "results.json.kept"}));
  fs::remove_all(dir);
}

TEST(OutputDir, nothingKeptWhenNothingForeignAppeared)
{
  fs::path const dir = freshDir("clean");
  {
    OutputDir out(dir.string(), false);
    EXPECT_TRUE(out.commit(someResults()).empty());
  }
  EXPECT_EQ(readAll(dir / "results.json"), "{}\n");
  fs::remove_all(dir);
}

TEST(OutputDir, dotAndParentSegmentsNameTheFolderItself)
{
  fs::path const dir = freshDir("dot");
  fs::create_directories(dir);
  for (std::string const given : {(dir / ".").string(), (dir / ".." / dir.filename()).string(), dir.string() + "/"})
  {
    OutputDir out(given, true);
    EXPECT_EQ(out.path(), given);
    out.commit(someResults());
    EXPECT_EQ(readAll(dir / "results.json"), "{}\n") << given;
  }
  fs::remove_all(dir);
}

TEST(OutputDir, symlinkPublishesIntoItsTargetAndStaysALink)
{
  fs::path const target = freshDir("target");
  fs::path const link = freshDir("link");
  fs::create_directories(target);
  fs::create_directory_symlink(target, link);
  {
    OutputDir out(link.string(), false);
    out.commit(someResults());
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(readAll(target / "results.json"), "{}\n");
  for (auto const &e : fs::directory_iterator(target.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(target.filename().string() + ".canopy-staging"), std::string::npos)
        << e.path();  // only this test's: other tests may stage beside it at the same time
  fs::remove(link);
  fs::remove_all(target);
}
} // namespace
