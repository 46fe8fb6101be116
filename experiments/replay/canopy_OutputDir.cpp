/// \file canopy_OutputDir.cpp
/// \brief Claiming, locking and committing a run's output folder.
#include "canopy_OutputDir.hpp"

#include "canopy_Error.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
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

/// Writes all of \p text to a new file \p path and fsyncs it: after this returns the bytes are on disk.
void writeSynced(std::string const &path, std::string const &text)
{
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RuntimeFailure("cannot write '" + path + "': " + std::strerror(errno));
  char const *p = text.data();
  size_t left = text.size();
  while (left > 0)
  {
    ssize_t const w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
    {
      int const err = errno;
      ::close(fd);
      throw RuntimeFailure("write failed for '" + path + "': " + std::strerror(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  bool const synced = ::fsync(fd) == 0;
  int const err = errno;
  if (::close(fd) != 0 || !synced)
    throw RuntimeFailure("cannot flush '" + path + "' to disk: " + std::strerror(err));
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

OutputDir::OutputDir(std::string dir, bool overwrite, std::string flag) : _dir(std::move(dir))
{
  if (_dir.empty())
    throw InputError(flag + ": the output folder is empty; give a folder");
  auto const refuse = [&](std::string const &why) { throw InputError(flag + ": output folder '" + _dir + "' " + why); };
  std::error_code ec;
  fs::create_directories(_dir, ec);
  if (ec || !fs::is_directory(_dir, ec))
    refuse("cannot be created: " + (ec ? ec.message() : std::string("a file of that name exists")));
  std::string const lock = (fs::path(_dir) / LOCK_NAME).string();
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
  }
  if (!first.empty() && !overwrite)
    refuse("is not empty (it holds '" + first + "'): pass --overwrite to replace a previous run's results, or "
           "choose a new folder");
  if (!foreign.empty())
    refuse("holds files that are not a canopy run's results (e.g. '" + foreign + "'); --overwrite replaces only a "
           "folder of results, tables and figures: choose a new folder");
  fs::path const abs = fs::absolute(_dir).lexically_normal();
  fs::path const leaf = abs.has_filename() ? abs : abs.parent_path();
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

void OutputDir::commit(std::vector<OutputFile> const &files)
{
  for (OutputFile const &f : files)
    writeSynced((fs::path(_staging) / f.name).string(), f.text);
  syncFolder(_staging);
  // One rename swaps the whole set in; the old set (now under the staging name) goes after.
  if (::renameat2(AT_FDCWD, _staging.c_str(), AT_FDCWD, _dir.c_str(), RENAME_EXCHANGE) != 0)
  {
    if (errno != EINVAL && errno != ENOSYS)
      throw RuntimeFailure("cannot move the results into '" + _dir + "': " + std::strerror(errno));
    // No exchange on this file system (e.g. NFS): the old folder steps aside first, so a reader
    // finds the old set, no folder, or the new set, never a mix.
    std::string const old = _staging + ".old";
    if (std::rename(_dir.c_str(), old.c_str()) != 0 || std::rename(_staging.c_str(), _dir.c_str()) != 0)
      throw RuntimeFailure("cannot move the results into '" + _dir + "': " + std::strerror(errno));
    std::error_code ec;
    fs::remove_all(old, ec);
    syncFolder(_parent);
    _staging.clear();
    return;
  }
  syncFolder(_parent);
  // _staging now names the previous contents: the destructor removes them.
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
