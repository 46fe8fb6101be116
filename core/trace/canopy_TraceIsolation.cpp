/// \file canopy_TraceIsolation.cpp
/// \brief Forked-child trace parsing: the child reads with HDF5, the parent receives the columns.
#include "canopy_TraceIsolation.hpp"

#include "canopy_Error.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace canopy::Impl
{
namespace
{
enum Tag : uint8_t
{
  kColumns = 'C',
  kInputError = 'E',
  kFailure = 'F'
};

// ---- child side: write or die (a parent that stopped listening needs nothing more) ----------
void put(int fd, void const *data, size_t n)
{
  auto const *p = static_cast<char const *>(data);
  while (n > 0)
  {
    ssize_t const w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      _exit(4);
    p += w;
    n -= static_cast<size_t>(w);
  }
}
void putU64(int fd, uint64_t v) { put(fd, &v, sizeof(v)); }
void putString(int fd, std::string const &s)
{
  putU64(fd, s.size());
  put(fd, s.data(), s.size());
}
template <class T>
void putVector(int fd, std::vector<T> const &v)
{
  putU64(fd, v.size());
  put(fd, v.data(), v.size() * sizeof(T));
}

void putColumns(int fd, TraceColumns const &c)
{
  uint8_t const tag = kColumns;
  put(fd, &tag, 1);
  putString(fd, c.source);
  putString(fd, c.created);
  putU64(fd, static_cast<uint64_t>(c.format_version));
  putU64(fd, static_cast<uint64_t>(c.shape.num_heads));
  put(fd, &c.shape.sm_scale, sizeof(double));
  putU64(fd, static_cast<uint64_t>(c.kv_dtype));
  put(fd, &c.kv_scale, sizeof(float));
  putU64(fd, static_cast<uint64_t>(c.num_slots));
  putVector(fd, c.request_offset);
  putVector(fd, c.request_id);
  putVector(fd, c.prefix_len);
  putVector(fd, c.tree_offset);
  putVector(fd, c.kv_offset);
  putVector(fd, c.accepted);
  putVector(fd, c.parent);
  putVector(fd, c.out_cache_loc);
  putVector(fd, c.kv_indices);
  uint8_t const values = c.has_values ? 1 : 0;
  put(fd, &values, 1);
  putVector(fd, c.q);
  putVector(fd, c.kv);
  putVector(fd, c.out);
  putVector(fd, c.kv_fp8);
}

void putMessage(int fd, Tag tag, char const *what)
{
  put(fd, &tag, 1);
  putString(fd, what);
}

// ---- parent side: every read may hit EOF when the child died, or the deadline --------------
using Clock = std::chrono::steady_clock;

/// Milliseconds left until \p deadline, for poll(): 0 once it has passed.
int msLeft(Clock::time_point deadline)
{
  auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

class Stream
{
public:
  Stream(int fd, Clock::time_point deadline) : _fd(fd), _deadline(deadline) {}
  bool timedOut() const { return _timed_out; }
  bool get(void *data, size_t n)
  {
    auto *p = static_cast<char *>(data);
    while (n > 0)
    {
      pollfd pfd{_fd, POLLIN, 0};
      int const ready = ::poll(&pfd, 1, msLeft(_deadline));
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready == 0)
        _timed_out = true;
      if (ready <= 0)
        return false;
      ssize_t const r = ::read(_fd, p, n);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  bool getU64(uint64_t &v) { return get(&v, sizeof(v)); }
  bool getString(std::string &s)
  {
    uint64_t n = 0;
    if (!getU64(n) || n > (uint64_t{1} << 30))
      return false;
    s.resize(static_cast<size_t>(n));
    return get(s.data(), s.size());
  }
  template <class T>
  bool getVector(std::vector<T> &v)
  {
    uint64_t n = 0;
    if (!getU64(n) || n > (uint64_t{1} << 46) / sizeof(T))
      return false;
    v.resize(static_cast<size_t>(n));
    return get(v.data(), v.size() * sizeof(T));
  }

private:
  int _fd;
  Clock::time_point _deadline;
  bool _timed_out = false;
};

/// The child's exit status; a child still running at \p deadline is killed first (a reader that
/// sent everything can still hang in libhdf5's cleanup).
int reap(pid_t pid, Clock::time_point deadline, bool &killed)
{
  int status = 0;
  while (true)
  {
    pid_t const r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR))
      return status;
    if (Clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  killed = true;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR)
  {
  }
  return status;
}

bool getColumns(Stream &in, TraceColumns &c)
{
  uint64_t version = 0, heads = 0, dtype = 0, slots = 0;
  uint8_t values = 0;
  bool ok = in.getString(c.source) && in.getString(c.created) && in.getU64(version) && in.getU64(heads) &&
            in.get(&c.shape.sm_scale, sizeof(double)) && in.getU64(dtype) && in.get(&c.kv_scale, sizeof(float)) &&
            in.getU64(slots) && in.getVector(c.request_offset) &&
            in.getVector(c.request_id) && in.getVector(c.prefix_len) && in.getVector(c.tree_offset) &&
            in.getVector(c.kv_offset) && in.getVector(c.accepted) && in.getVector(c.parent) &&
            in.getVector(c.out_cache_loc) && in.getVector(c.kv_indices) && in.get(&values, 1) && in.getVector(c.q) &&
            in.getVector(c.kv) && in.getVector(c.out) && in.getVector(c.kv_fp8);
  c.format_version = static_cast<int64_t>(version);
  ok = ok && dtype <= static_cast<uint64_t>(KvDtype::kFp8E4m3BlockScaled);
  c.kv_dtype = static_cast<KvDtype>(dtype);
  c.shape.num_heads = static_cast<int>(heads);
  c.num_slots = static_cast<int64_t>(slots);
  c.has_values = values != 0;
  return ok;
}
} // namespace

double readerDeadlineSeconds(uint64_t file_bytes)
{
  // libhdf5 reads a valid trace at well over 100 MB/s; 4 MB/s after a 10 s start leaves a wide
  // margin for a loaded machine and still ends a loop in a corrupt file (35-45 KB) in 10 s.
  return 10.0 + static_cast<double>(file_bytes) / (4.0 * 1024 * 1024);
}

TraceColumns readColumnsIsolated(std::function<TraceColumns()> const &read, std::string const &label,
                                 double deadline_s)
{
  int fds[2];
  if (::pipe(fds) != 0)
    throw RuntimeFailure(label + ": cannot create a pipe for the isolated reader: " + std::strerror(errno));
  pid_t const pid = ::fork();
  if (pid < 0)
  {
    int const err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw RuntimeFailure(label + ": cannot fork the isolated reader: " + std::strerror(err));
  }
  if (pid == 0)
  {
    // Child: parse, stream, and leave without running the parent's atexit handlers or flushing
    // its stdio buffers (they would be written twice).
    ::close(fds[0]);
    // A parent killed while waiting (a timeout, Ctrl-C) takes its reader along.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::signal(SIGPIPE, SIG_IGN);
    int code = 0;
    try
    {
      TraceColumns const c = read();
      putColumns(fds[1], c);
    }
    catch (InputError const &e)
    {
      putMessage(fds[1], kInputError, e.what());
      code = 2;
    }
    catch (std::exception const &e)
    {
      putMessage(fds[1], kFailure, e.what());
      code = 3;
    }
    ::close(fds[1]);
    _exit(code);
  }
  ::close(fds[1]);
  auto const deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s));
  Stream in(fds[0], deadline);
  uint8_t tag = 0;
  TraceColumns columns;
  std::string message;
  bool complete = false;
  if (in.get(&tag, 1))
  {
    if (tag == kColumns)
      complete = getColumns(in, columns);
    else if (tag == kInputError || tag == kFailure)
      complete = in.getString(message);
  }
  ::close(fds[0]);
  bool killed = in.timedOut();
  int const status = reap(pid, killed ? Clock::now() : deadline, killed);
  if (killed)
  {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.0f", deadline_s);
    throw InputError(label + ": unreadable (reader did not finish): libhdf5 was still parsing after " + seconds +
                     " s, as it does on some corrupt files");
  }
  if (WIFSIGNALED(status))
    throw InputError(label + ": the HDF5 library crashed (signal " + std::to_string(WTERMSIG(status)) + ", " +
                     strsignal(WTERMSIG(status)) + ") while parsing the file: it is corrupt");
  if (!complete || !WIFEXITED(status))
    throw InputError(label + ": the isolated reader stopped before finishing (exit status " +
                     std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "): corrupt file?");
  if (tag == kInputError)
    throw InputError(message);
  if (tag == kFailure)
    throw RuntimeFailure(message);
  return columns;
}
} // namespace canopy::Impl
