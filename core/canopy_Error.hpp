/// \file canopy_Error.hpp
/// \brief Error types. InputError = bad user input (trace, config, flags, shapes): exit code 2;
/// RuntimeFailure = the machine or a library failed: exit code 3; GpuUnavailable = the work needs a
/// GPU this host lacks: exit code 4.
#pragma once

#include <stdexcept>
#include <string>

namespace canopy
{
/// \brief Bad input from the user (malformed trace or config, out-of-range index, unsupported shape).
/// The message names the thing and the first bad index. Command-line tools map it to exit code 2.
class InputError : public std::runtime_error
{
public:
  explicit InputError(std::string const &what) : std::runtime_error(what) {}
};

/// \brief A design that cannot serve a shape or option (tree larger than its kernels take, too much
/// shared memory): the shape is fine, this design is not for it. `canopy run` and `canopy check`
/// report that design as unsupported for the shape, with the reason, and go on with the others.
class Unsupported : public InputError
{
public:
  explicit Unsupported(std::string const &what) : InputError(what) {}
};

/// \brief A failure of the machine or a library (CUDA error, I/O failure). Exit code 3.
class RuntimeFailure : public std::runtime_error
{
public:
  explicit RuntimeFailure(std::string const &what) : std::runtime_error(what) {}
};

/// \brief The work asked for needs a GPU and this host has no usable one (no device, no driver).
/// Neither bad input (the same command is right on a GPU host) nor a failure of the machine (nothing
/// broke): its own exit code, so that a script or a batch job can tell "wrong host" from the rest.
class GpuUnavailable : public std::runtime_error
{
public:
  explicit GpuUnavailable(std::string const &what) : std::runtime_error(what) {}
};

constexpr int EXIT_BAD_INPUT = 2;
constexpr int EXIT_RUNTIME_FAILURE = 3;
constexpr int EXIT_NO_GPU = 4;
} // namespace canopy
