/// \file canopy_TraceWriter.hpp
/// \brief Writes verify traces (format v1, or v2 for an FP8 pool): validated first, then written to a
/// temporary file in the target's folder and renamed over it, so a reader never sees a half-written trace.
#pragma once

#include "canopy_Trace.hpp"

#include <string>
#include <vector>

namespace canopy
{
struct TraceWriteOptions
{
  /// zlib level (after HDF5's byte shuffle); 0 = uncompressed. Level 4 keeps synth I/O-bound on one
  /// core while staying within ~10% of level 9's size on slot lists.
  int deflate_level = 4;
  int64_t chunk_bytes = 1 << 20;  ///< target chunk size (whole rows for /values)
};

/// \brief Validates (InputError naming the dataset and first bad index) and writes atomically.
/// I/O failures throw RuntimeFailure; a missing output folder is an InputError.
void writeTrace(std::string const &path, TraceContent const &content);
void writeTraceColumns(std::string const &path, TraceColumns const &columns, TraceWriteOptions const &options = {});

namespace Impl
{
/// \brief Writes the columns as they are, without validation: for tests and the fuzzer, which need
/// files that break the format's invariants. Still atomic.
void writeColumnsUnchecked(std::string const &path, TraceColumns const &columns, TraceWriteOptions const &options = {});
/// \brief The HDF5 file image of the columns (no validation, nothing on disk).
std::vector<unsigned char> writeColumnsImage(TraceColumns const &columns, TraceWriteOptions const &options = {});
} // namespace Impl
} // namespace canopy
