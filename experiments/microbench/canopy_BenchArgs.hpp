/// \file canopy_BenchArgs.hpp
/// \brief The `--smoke` flag shared by every benchmark: tiny shapes for the ctest smoke run, removed
/// from the arguments before Kokkos and Google Benchmark see them.
#pragma once

#include <cstring>
#include <vector>

namespace canopy::bench
{
struct BenchArgs
{
  bool smoke = false;
  std::vector<char *> argv;
  int argc = 0;
};

inline BenchArgs stripSmokeFlag(int argc, char **argv)
{
  BenchArgs a;
  for (int i = 0; i < argc; ++i)
  {
    if (std::strcmp(argv[i], "--smoke") == 0)
      a.smoke = true;
    else
      a.argv.push_back(argv[i]);
  }
  a.argc = static_cast<int>(a.argv.size());
  a.argv.push_back(nullptr);
  return a;
}
} // namespace canopy::bench
