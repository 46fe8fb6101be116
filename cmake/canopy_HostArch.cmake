# Host instruction set, one setting for the whole build. Per-file -march flags are unsafe here: a
# translation unit built for AVX2 emits its own copies of the inline Kokkos and standard-library
# functions it uses, and the linker may keep those copies for every caller, so a binary could need
# AVX2 on a CPU without it. The default is portable (the compiler's baseline x86-64). The host
# kernels' documented speeds (docs/results/kokkos-host.md: 64-75% of a Zen 4 core's FMA peak) were
# measured with -DCANOPY_HOST_ARCH=x86-64-v3 (AVX2 + FMA); baseline x86-64 (SSE2, no FMA) caps a core
# at about half its fp32 peak. "native" builds for the build machine.
include(CheckCXXCompilerFlag)
set(CANOPY_HOST_ARCH "" CACHE STRING "-march for every C++ translation unit (empty: the compiler's portable default; e.g. x86-64-v3, native)")
set(CANOPY_HOST_ARCH_FLAGS "")
if(CANOPY_HOST_ARCH)
  check_cxx_compiler_flag("-march=${CANOPY_HOST_ARCH}" CANOPY_COMPILER_HAS_HOST_ARCH)
  if(NOT CANOPY_COMPILER_HAS_HOST_ARCH)
    message(FATAL_ERROR "CANOPY_HOST_ARCH=${CANOPY_HOST_ARCH}: the C++ compiler does not accept -march=${CANOPY_HOST_ARCH}")
  endif()
  list(APPEND CANOPY_HOST_ARCH_FLAGS "-march=${CANOPY_HOST_ARCH}")
endif()
# GCC keeps any loop with a float compare (the softmax mask, max and exp range reduction) scalar
# unless FP exceptions are declared unobserved; results do not change (Clang's default). Build-wide,
# for the same reason as the ISA.
check_cxx_compiler_flag("-fno-trapping-math" CANOPY_COMPILER_HAS_NO_TRAPPING_MATH)
if(CANOPY_COMPILER_HAS_NO_TRAPPING_MATH)
  list(APPEND CANOPY_HOST_ARCH_FLAGS "-fno-trapping-math")
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${CANOPY_HOST_ARCH_FLAGS}>")
