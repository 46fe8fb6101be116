/// \file canopy_OutputDir.cpp
/// \brief Claiming, locking and committing a run's output folder.
#include "canopy_OutputDir.hpp"

#include "canopy_Error.hpp"
#include "canopy_SyncedWrite.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

namespace canopy
{
namespace fs = std::filesystem;

namespace
{
constexpr char const LOCK_NAME[] = ".canopy.lock";
constexpr char const STAGING_TAG[] = ".canopy-staging-";

/// What a run (and plot.py beside it) writes into its folder: what --overwrite may replace.
bool isRunOutput(fs::directory_entry const &entry)
{
  std::string const name = entry.path().filename().string();
  std::string const ext = entry.path().extension().string();
  std::error_code ec;
  return entry.is_regular_file(ec) && (name == "results.json" || name == "results.csv" || name == "table.md" ||
                                       name == "table.tex" || ext == ".png" || ext == ".pdf");
}

/// fsync of a folder: makes the entries created or renamed in it durable.
void syncFolder(std::string const &dir)
{
  int const fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
  {
    ::fsync(fd);
    ::close(fd);
  }
}

/// What tells an entry the run found in its folder from one written there later: its name, inode and
/// modification time (of the entry itself, a link is not followed). Empty when it cannot be read.
std::optional<std::tuple<std::string, uint64_t, int64_t>> entryIdentity(fs::path const &p)
{
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0)
    return std::nullopt;
  int64_t const mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return std::make_tuple(p.filename().string(), static_cast<uint64_t>(st.st_ino), mtime);
}

/// Staging folders of runs that died before they finished (their process is gone): removed, so a
/// killed run leaves nothing behind once the folder is used again.
void removeStaleStaging(fs::path const &parent, std::string const &prefix)
{
  std::error_code ec;
  for (auto const &entry : fs::directory_iterator(parent, ec))
  {
    std::string const name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0)
      continue;
    char *end = nullptr;
    long const pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid > 0 && *end == '\0' && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fs::remove_all(entry.path(), ec);
  }
}
} // namespace

OutputDir::OutputDir(std::string dir, bool overwrite, std::string flag) : _shown(std::move(dir))
{
  if (_shown.empty())
    throw InputError(flag + ": the output folder is empty; give a folder");
  auto const refuse = [&](std::string const &why) {
    throw InputError(flag + ": output folder '" + _shown + "' " + why);
  };
  std::error_code ec;
  fs::create_directories(_shown, ec);
  if (ec || !fs::is_directory(_shown, ec))
    refuse("cannot be created: " + (ec ? ec.message() : std::string("a file of that name exists")));
  fs::path const leaf = fs::canonical(_shown, ec);
  if (ec || !leaf.has_parent_path() || leaf == leaf.root_path())
    refuse("cannot be resolved to a folder with a parent: " + (ec ? ec.message() : std::string("it is the root")));
  _dir = leaf.string();
  std::string const lock = (leaf / LOCK_NAME).string();
  _lock_fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (_lock_fd < 0)
    refuse("is not writable: " + std::string(std::strerror(errno)));
  if (::flock(_lock_fd, LOCK_EX | LOCK_NB) != 0)
  {
    ::close(_lock_fd);
    _lock_fd = -1;
    refuse("is in use by another canopy run (it holds " + lock + ")");
  }
  std::string first, foreign;
  for (auto const &entry : fs::directory_iterator(_dir, ec))
  {
    std::string const name = entry.path().filename().string();
    if (name == LOCK_NAME)
      continue;
    if (first.empty())
      first = name;
    if (foreign.empty() && !isRunOutput(entry))
      foreign = name;
    if (auto const id = entryIdentity(entry.path()))
      _claimed.insert(*id);
  }
  if (!first.empty() && !overwrite)
    refuse("is not empty (it holds '" + first + "'): pass --overwrite to replace a previous run's results, or "
           "choose a new folder");
  if (!foreign.empty())
    refuse("holds files that are not a canopy run's results (e.g. '" + foreign + "'); --overwrite replaces only a "
           "folder of results, tables and figures: choose a new folder");
  std::string const prefix = "." + leaf.filename().string() + STAGING_TAG;
  removeStaleStaging(leaf.parent_path(), prefix);
  _parent = leaf.parent_path().string();
  _staging = (leaf.parent_path() / (prefix + std::to_string(::getpid()))).string();
  fs::remove_all(_staging, ec);
  if (!fs::create_directory(_staging, ec))
    refuse("cannot be written as one set: its parent folder is not writable (" + _staging + ": " + ec.message() + ")");
}

OutputDir::~OutputDir()
{
  std::error_code ec;
  if (!_staging.empty())
    fs::remove_all(_staging, ec);
  if (_lock_fd >= 0)
    ::close(_lock_fd);
}

std::vector<std::string> OutputDir::keepForeign(std::string const &old)
{
  std::vector<std::string> kept;
  bool all_moved = true;
  std::error_code ec;
  std::vector<fs::path> entries;  // listed first: moving entries out while iterating may skip some
  for (auto const &entry : fs::directory_iterator(old, ec))
    entries.push_back(entry.path());
  for (fs::path const &entry : entries)
  {
    std::string const name = entry.filename().string();
    auto const id = entryIdentity(entry);
    if (name == LOCK_NAME || !id || _claimed.count(*id))
      continue;
    std::string kept_name = name;
    for (int n = 0; fs::symlink_status(fs::path(_dir) / kept_name, ec).type() != fs::file_type::not_found; ++n)
      kept_name = name + KEPT_SUFFIX + (n ? std::to_string(n) : "");
    if (std::rename(entry.c_str(), (fs::path(_dir) / kept_name).c_str()) == 0)
      kept.push_back(kept_name);
    else
    {
      kept.push_back(name + " (left in " + old + ": " + std::strerror(errno) + ")");
      all_moved = false;
    }
  }
  if (!all_moved)
    _staging.clear();  // the destructor must not remove what could not be moved
  return kept;
}

std::vector<std::string> OutputDir::commit(std::vector<OutputFile> const &files)
{
  for (OutputFile const &f : files)
    writeSynced((fs::path(_staging) / f.name).string(), f.text);
  syncFolder(_staging);
  // One rename swaps the whole set in; the old set (now under the staging name) goes after, less
  // what was written into the folder while this run held it.
  if (::renameat2(AT_FDCWD, _staging.c_str(), AT_FDCWD, _dir.c_str(), RENAME_EXCHANGE) != 0)
  {
    if (errno != EINVAL && errno != ENOSYS)
      throw RuntimeFailure("cannot move the results into '" + _shown + "': " + std::strerror(errno));
    // No exchange on this file system (e.g. NFS): the old folder steps aside first, so a reader
    // finds the old set, no folder, or the new set, never a mix.
    std::string const old = _staging + ".old";
    if (std::rename(_dir.c_str(), old.c_str()) != 0 || std::rename(_staging.c_str(), _dir.c_str()) != 0)
      throw RuntimeFailure("cannot move the results into '" + _shown + "': " + std::strerror(errno));
    _staging = old;
  }
  std::vector<std::string> kept = keepForeign(_staging);
  syncFolder(_dir);
  syncFolder(_parent);
  // _staging now names the previous contents: the destructor removes them.
  return kept;
}

void writeFileAtomically(std::string const &path, std::string const &text)
{
  std::string const tmp = path + ".tmp." + std::to_string(::getpid());
  try
  {
    writeSynced(tmp, text);
  }
  catch (...)
  {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
  {
    int const err = errno;
    std::remove(tmp.c_str());
    throw RuntimeFailure("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  syncFolder(fs::absolute(path).parent_path().string());
}
} // namespace canopy
