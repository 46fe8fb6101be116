#include "canopy_DeviceRecord.hpp"

#include <cstdio>

namespace canopy
{
std::string visibleDeviceIndex(char const *cuda_visible_devices, int ordinal)
{
  std::string const list = cuda_visible_devices ? cuda_visible_devices : "";
  if (list.empty())
    return std::to_string(ordinal);
  size_t begin = 0;
  for (int i = 0; i < ordinal && begin != std::string::npos; ++i)
  {
    begin = list.find(',', begin);
    begin = begin == std::string::npos ? begin : begin + 1;
  }
  if (begin == std::string::npos)
    return std::to_string(ordinal);
  size_t const end = list.find(',', begin);
  std::string entry = list.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  // CUDA ignores spaces around an entry; so does the record.
  entry.erase(0, entry.find_first_not_of(' '));
  entry.erase(entry.find_last_not_of(' ') + 1);
  return entry.empty() ? std::to_string(ordinal) : entry;
}

std::string gpuUuidText(unsigned char const (&b)[16])
{
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

std::string gpuRowDevice(std::string const &index, std::string const &name, std::string const &uuid)
{
  return "GPU " + index + ": " + name + " (UUID: " + uuid + ")";
}
} // namespace canopy
