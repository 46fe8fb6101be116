# Finds Kokkos (and optionally Kokkos Kernels) and exposes Kokkos::kokkos / Kokkos::kokkoskernels.
# Installed beside CanopyConfig.cmake, which includes it to find Debian's Kokkos again for a consumer.
#
# Order: a user Kokkos (-DKokkos_ROOT=... , 4.x with CUDA/OpenMP) through its CMake config; else
# Debian's Trilinos Kokkos 3.4. Debian's KokkosConfig.cmake is found but its Kokkos::kokkos target
# points at <prefix>/include, which does not hold the headers (they live in include/trilinos), so
# generation fails with "imported target includes non-existent path". We detect that and repair the
# target in place with the real include folder and libraries.
find_package(Kokkos CONFIG QUIET)

function(_canopy_dirs_exist out)
  set(ok TRUE)
  foreach(d IN LISTS ARGN)
    if(NOT d MATCHES "^\\$<" AND NOT EXISTS "${d}")
      set(ok FALSE)
    endif()
  endforeach()
  set(${out} ${ok} PARENT_SCOPE)
endfunction()

set(CANOPY_KOKKOS_ORIGIN "config")
set(_canopy_need_manual TRUE)
if(Kokkos_FOUND AND TARGET Kokkos::kokkos)
  get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  _canopy_dirs_exist(_kk_ok ${_kk_inc})
  if(_kk_ok)
    set(_canopy_need_manual FALSE)
  endif()
endif()

if(_canopy_need_manual)
  find_path(CANOPY_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
  find_library(CANOPY_KOKKOSCORE_LIB trilinos_kokkoscore)
  find_library(CANOPY_KOKKOSCONTAINERS_LIB trilinos_kokkoscontainers)
  if(NOT CANOPY_KOKKOS_INCLUDE_DIR OR NOT CANOPY_KOKKOSCORE_LIB)
    message(FATAL_ERROR "Kokkos not found: install libtrilinos-kokkos-dev (scripts/setup does) "
                        "or pass -DKokkos_ROOT=<your Kokkos install>")
  endif()
  if(NOT TARGET Kokkos::kokkos)
    add_library(Kokkos::kokkos INTERFACE IMPORTED)
  endif()
  find_package(Threads REQUIRED)
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CANOPY_KOKKOS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CANOPY_KOKKOSCONTAINERS_LIB};${CANOPY_KOKKOSCORE_LIB};Threads::Threads;${CMAKE_DL_LIBS}"
    INTERFACE_COMPILE_OPTIONS "")
  file(STRINGS "${CANOPY_KOKKOS_INCLUDE_DIR}/KokkosCore_config.h" _kv REGEX "#define KOKKOS_VERSION ")
  string(REGEX MATCH "[0-9][0-9][0-9]+" _kv "${_kv}")
  if(_kv)
    math(EXPR _maj "${_kv} / 10000")
    math(EXPR _min "(${_kv} / 100) % 100")
    math(EXPR _pat "${_kv} % 100")
    set(Kokkos_VERSION "${_maj}.${_min}.${_pat}")
  endif()
  set(CANOPY_KOKKOS_ORIGIN "debian-trilinos")
endif()

# Kokkos Kernels (optional: only the kokkos-kk design needs it).
set(CANOPY_HAVE_KOKKOSKERNELS OFF)
if(CANOPY_KOKKOS_ORIGIN STREQUAL "config")
  find_package(KokkosKernels CONFIG QUIET)
  if(TARGET Kokkos::kokkoskernels)
    set(CANOPY_HAVE_KOKKOSKERNELS ON)
  endif()
else()
  find_path(CANOPY_KOKKOSKERNELS_INCLUDE_DIR KokkosBatched_Gemm_Decl.hpp PATH_SUFFIXES trilinos)
  find_library(CANOPY_KOKKOSKERNELS_LIB trilinos_kokkoskernels)
  if(CANOPY_KOKKOSKERNELS_INCLUDE_DIR AND CANOPY_KOKKOSKERNELS_LIB)
    # Imported, as Kokkos::kokkos is: an installed Canopy names it and CanopyConfig.cmake makes it again
    # with this file.
    if(NOT TARGET Kokkos::kokkoskernels)
      add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
    endif()
    set_target_properties(Kokkos::kokkoskernels PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CANOPY_KOKKOSKERNELS_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${CANOPY_KOKKOSKERNELS_LIB};Kokkos::kokkos")
    set(CANOPY_HAVE_KOKKOSKERNELS ON)
  endif()
endif()
