/// \file canopy_BoundedRead.cpp
/// \brief Regular-file checks and size-capped reads.
#include "canopy_BoundedRead.hpp"

#include "canopy_Error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace canopy
{
namespace
{
std::string kindOf(mode_t mode)
{
  if (S_ISDIR(mode))
    return "a folder";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse(std::string const &what, std::string const &path, std::string const &why)
{
  throw InputError(what + ": '" + path + "' " + why);
}

void requireRegular(struct stat const &st, std::string const &path, std::string const &what)
{
  if (!S_ISREG(st.st_mode))
    refuse(what, path, "is " + kindOf(st.st_mode) + "; give a regular file");
}

/// Closes the descriptor on every way out.
struct Fd
{
  int fd;
  ~Fd() { ::close(fd); }
};
} // namespace

uint64_t requireRegularFile(std::string const &path, std::string const &what)
{
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    refuse(what, path, std::string("cannot be read: ") + std::strerror(errno));
  requireRegular(st, path, what);
  return static_cast<uint64_t>(st.st_size);
}

std::string readRegularFile(std::string const &path, std::string const &what, uint64_t max_bytes)
{
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat can tell.
  int const fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    refuse(what, path, std::string("cannot be opened: ") + std::strerror(errno));
  Fd const guard{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    refuse(what, path, std::string("cannot be read: ") + std::strerror(errno));
  requireRegular(st, path, what);
  auto const tooLarge = [&](uint64_t bytes) {
    refuse(what, path, "is " + std::to_string(bytes) + " bytes or more, larger than the " + std::to_string(max_bytes) +
                           " bytes such a file may be");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    tooLarge(static_cast<uint64_t>(st.st_size));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  char extra;
  while (true)
  {
    // One byte past the stated size tells a file that grew since fstat.
    char *dst = got < text.size() ? text.data() + got : &extra;
    size_t const want = got < text.size() ? text.size() - got : 1;
    ssize_t const n = ::read(fd, dst, want);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n < 0)
      refuse(what, path, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0)
      break;
    if (dst == &extra)
    {
      if (text.size() + 1 > max_bytes)
        tooLarge(text.size() + 1);
      text.push_back(extra);
      got = text.size();
      text.resize(std::min<uint64_t>(max_bytes, text.size() * 2));
      continue;
    }
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}
} // namespace canopy
