/// \file canopy_SyncedWrite.hpp
/// \brief Writing a whole file and making it durable, with every failure (ENOSPC, EFBIG, EIO) a
/// RuntimeFailure naming the file: the one low-level writer of results, summaries and traces.
#pragma once

#include <cstddef>
#include <string>

namespace canopy
{
/// \brief Writes \p size bytes at \p data to a new file \p path (truncating one there) and fsyncs it:
/// after this returns the bytes are on disk. RuntimeFailure "cannot write '<path>': ..." otherwise.
void writeSynced(std::string const &path, void const *data, size_t size);

inline void writeSynced(std::string const &path, std::string const &text) { writeSynced(path, text.data(), text.size()); }
} // namespace canopy
