/// \file canopy_OutputDir.hpp
/// \brief The output folder of a run, owned from before the first step to the last byte: created,
/// checked writable and locked at the start, its results written as one set at the end.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace canopy
{
/// \brief One file of a result set: its name inside the folder and its contents.
struct OutputFile
{
  std::string name;
  std::string text;
};

/// \brief Claims a folder for one run's results.
///
/// The constructor does, before any work: creates the folder, takes an exclusive lock on it (flock
/// of `.canopy.lock` inside; a second run into the same folder is refused while the first holds
/// it), refuses a folder that already holds anything unless \p overwrite (and even then one that
/// holds anything but a previous run's results, tables and figures), and creates the staging
/// folder beside it, which proves the parent writable too. commit() writes every file into the
/// staging folder, fsyncs each file and the folder, and swaps it with the output folder in one
/// rename (renameat2 RENAME_EXCHANGE; on file systems without it, two renames), so readers see the
/// old set or the new one, never a mix. Every refusal is an InputError naming \p flag and the folder.
///
/// The folder is the one \p dir resolves to (`D/.`, `D/sub/..` and a symlink to a folder name the
/// folder itself), so the swap never touches a link or a `.` entry. Only what the folder held when it
/// was claimed is replaced: anything written into it while the run held it (by a notebook, a script,
/// a person) is moved into the new set untouched, and commit() returns its names.
class OutputDir
{
public:
  OutputDir(std::string dir, bool overwrite, std::string flag = "--out");
  ~OutputDir();
  OutputDir(OutputDir const &) = delete;
  OutputDir &operator=(OutputDir const &) = delete;

  /// \brief The folder as given on the command line or in the config.
  std::string const &path() const { return _shown; }
  /// \brief Writes \p files as the folder's new contents. What the folder held when it was claimed
  /// is removed; what appeared in it since is kept. Returns the kept entries' names in the folder
  /// (a kept entry whose name is also a file of the new set is renamed with KEPT_SUFFIX).
  std::vector<std::string> commit(std::vector<OutputFile> const &files);

  static constexpr char const KEPT_SUFFIX[] = ".kept";

private:
  /// \brief Moves the entries of \p old that were not there when the folder was claimed into _dir.
  std::vector<std::string> keepForeign(std::string const &old);

  std::string _shown;
  std::string _dir;
  std::string _staging;
  std::string _parent;
  int _lock_fd = -1;
  /// (name, inode, modification time) of each entry the folder held when it was claimed.
  std::set<std::tuple<std::string, uint64_t, int64_t>> _claimed;
};

/// \brief Writes \p text to \p path through a temporary file beside it, fsynced and renamed over
/// \p path, so a reader never sees a partial file.
void writeFileAtomically(std::string const &path, std::string const &text);
} // namespace canopy
