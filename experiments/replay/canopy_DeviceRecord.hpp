/// \file canopy_DeviceRecord.hpp
/// \brief How a results file names the GPU a row ran on: its index as nvidia-smi numbers it, its
/// UUID and name, in nvidia-smi -L's own form, so that a row can be traced to one card of a host.
#pragma once

#include <string>

namespace canopy
{
/// \brief The GPU behind CUDA ordinal \p ordinal of this process: the entry \p ordinal of
/// \p cuda_visible_devices (an index or a UUID, as the launcher pinned it), or the ordinal itself
/// when the variable is unset or empty (every GPU visible, numbered as CUDA numbers them).
std::string visibleDeviceIndex(char const *cuda_visible_devices, int ordinal);

/// \brief "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from the 16 bytes of cudaDeviceProp::uuid, the
/// form nvidia-smi prints and CUDA_VISIBLE_DEVICES accepts.
std::string gpuUuidText(unsigned char const (&bytes)[16]);

/// \brief A row's `device` for a GPU: "GPU <index>: <name> (UUID: <uuid>)", nvidia-smi -L's line.
std::string gpuRowDevice(std::string const &index, std::string const &name, std::string const &uuid);
} // namespace canopy
