/// \file canopy_OutputDir.hpp
/// \brief The output folder of a run, owned from before the first step to the last byte: created,
/// checked writable and locked at the start, its results written as one set at the end.
#pragma once

#include <string>
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
class OutputDir
{
public:
  OutputDir(std::string dir, bool overwrite, std::string flag = "--out");
  ~OutputDir();
  OutputDir(OutputDir const &) = delete;
  OutputDir &operator=(OutputDir const &) = delete;

  std::string const &path() const { return _dir; }
  /// \brief Writes \p files as the folder's new contents (what was there before is removed).
  void commit(std::vector<OutputFile> const &files);

private:
  std::string _dir;
  std::string _staging;
  std::string _parent;
  int _lock_fd = -1;
};

/// \brief Writes \p text to \p path through a temporary file beside it, fsynced and renamed over
/// \p path, so a reader never sees a partial file.
void writeFileAtomically(std::string const &path, std::string const &text);
} // namespace canopy
