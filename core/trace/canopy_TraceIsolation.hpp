/// \file canopy_TraceIsolation.hpp
/// \brief Internal: runs the HDF5 part of reading a trace in a forked child process. libhdf5 1.10
/// trusts a file's metadata: a corrupt global heap, object header or B-tree node can make it read
/// out of bounds (a byte flipped in a vlen string attribute segfaults inside H5HG_read). A crash
/// there must not take the caller down, so the child parses the file and streams the columns back
/// through a pipe; a child killed by a signal becomes an InputError in the parent. Some corrupt
/// files make libhdf5 loop instead (a global-heap read under a string attribute): the child has a
/// deadline, and is killed when it passes.
#pragma once

#include "canopy_Trace.hpp"

#include <functional>
#include <string>

namespace canopy::Impl
{
/// \brief Runs \p read in a child process and returns its columns. An InputError or another
/// exception in the child is rethrown here (as InputError or RuntimeFailure) with its message; a
/// child killed by a signal, or one that exits before sending everything, becomes
/// InputError("<label>: the HDF5 library crashed (signal N, ...) while parsing the file: it is corrupt").
/// A child that has not finished after \p deadline_s seconds is killed: InputError("<label>:
/// unreadable (reader did not finish): ...").
TraceColumns readColumnsIsolated(std::function<TraceColumns()> const &read, std::string const &label,
                                 double deadline_s);

/// \brief The isolated reader's deadline for a file of \p file_bytes: 10 s plus 1 s per 4 MiB.
double readerDeadlineSeconds(uint64_t file_bytes);
} // namespace canopy::Impl
