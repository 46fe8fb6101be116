/// \file canopy_BoundedRead.hpp
/// \brief The one reader of every text file the tools take as input (configs, shard results,
/// summaries): regular files only, of a bounded size, so that a FIFO, a device or a link to one
/// (`/dev/zero`, `/dev/urandom`) is refused by name instead of blocking or growing without end.
#pragma once

#include <cstdint>
#include <string>

namespace canopy
{
/// \brief Size caps of the files read whole into memory; far above any real one.
namespace file_caps
{
inline constexpr uint64_t CONFIG = uint64_t{16} << 20;    ///< an experiment or trace config (TOML)
inline constexpr uint64_t RESULTS = uint64_t{1} << 30;    ///< a run's results.json
} // namespace file_caps

/// \brief Requires \p path to name a regular file (links followed) and returns its size. InputError
/// "<what>: '<path>' ..." otherwise: missing, a folder, a FIFO, a device, a socket.
uint64_t requireRegularFile(std::string const &path, std::string const &what);

/// \brief The whole of regular file \p path, at most \p max_bytes of it: refused (InputError naming
/// \p what, the path and the cap) when it is not a regular file or is, or grows while read, larger.
/// A FIFO is refused without blocking on its open.
std::string readRegularFile(std::string const &path, std::string const &what, uint64_t max_bytes);
} // namespace canopy
