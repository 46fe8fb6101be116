/// \file canopy_SyncedWrite.cpp
/// \brief A whole file written with write(2) and fsync(2), every error reported.
#include "canopy_SyncedWrite.hpp"

#include "canopy_Error.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace canopy
{
void writeSynced(std::string const &path, void const *data, size_t size)
{
  int const fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RuntimeFailure("cannot write '" + path + "': " + std::strerror(errno));
  char const *p = static_cast<char const *>(data);
  size_t left = size;
  while (left > 0)
  {
    ssize_t const w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
    {
      int const err = w < 0 ? errno : ENOSPC;
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
} // namespace canopy
