/// \file canopy_MemoryEstimate.cpp
/// \brief The host memory this process may allocate.
#include "canopy_MemoryEstimate.hpp"

#include <algorithm>
#include <sys/resource.h>
#include <unistd.h>

namespace canopy
{
uint64_t hostMemoryBytes()
{
  long const pages = ::sysconf(_SC_PHYS_PAGES);
  long const page = ::sysconf(_SC_PAGESIZE);
  uint64_t bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
  struct rlimit lim;
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    bytes = std::min<uint64_t>(bytes, lim.rlim_cur);
  return bytes;
}
} // namespace canopy
