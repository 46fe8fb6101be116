# `cmake --install <build> --prefix P`: the public headers, the libraries a design links, the `canopy`
# command, the Python package, the out-of-tree example, and CanopyConfig.cmake with the namespaced
# targets Canopy::core, Canopy::core_kokkos, Canopy::backends (and Canopy::cuda on CUDA builds) plus
# the facts of this build (docs/design.md §7). Included last by the top-level CMakeLists.txt, once
# every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CANOPY_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/canopy)
set(CANOPY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Canopy)
set(CANOPY_INSTALL_PYTHONDIR ${CMAKE_INSTALL_LIBDIR}/python3/site-packages CACHE STRING
    "Where the Python package `canopy` is installed, relative to the prefix (PYTHONPATH=<prefix>/<this>)")

# The public API (docs/design.md §7 lists it and its promise). Everything else under core/ and
# backends/ (the designs' kernels, trace I/O, statistics, the cost model) stays internal.
set(_canopy_public_headers
  core/canopy_Types.hpp core/canopy_EnumNames.hpp core/canopy_Error.hpp core/canopy_Bf16.hpp core/canopy_Fp8.hpp
  core/canopy_KvDtype.hpp core/canopy_KvQuant.hpp
  core/canopy_BatchRef.hpp core/canopy_BatchCapacity.hpp core/canopy_Batch.hpp core/canopy_KokkosCompat.hpp
  core/canopy_Problem.hpp core/canopy_Generator.hpp core/canopy_Reference.hpp
  backends/canopy_Design.hpp backends/canopy_Registry.hpp backends/canopy_Plugin.hpp
  backends/canopy_PluginLoader.hpp backends/canopy_BatchStorage.hpp backends/canopy_Runtime.hpp)
if(CANOPY_ENABLE_CUDA_KERNELS)
  list(APPEND _canopy_public_headers
    backends/cuda/canopy_CudaRuntime.hpp backends/cuda/canopy_VerifyAttentionCuda.hpp
    backends/cuda/canopy_CudaParams.hpp backends/cuda/canopy_SoftmaxState.cuh)
endif()
list(TRANSFORM _canopy_public_headers PREPEND ${PROJECT_SOURCE_DIR}/)
install(FILES ${_canopy_public_headers} ${PROJECT_BINARY_DIR}/include/canopy_Config.hpp
        DESTINATION ${CANOPY_INSTALL_INCLUDEDIR} COMPONENT development)

set(_canopy_exported canopy_core canopy_core_kokkos canopy_backends)
set_target_properties(canopy_core PROPERTIES EXPORT_NAME core)
set_target_properties(canopy_core_kokkos PROPERTIES EXPORT_NAME core_kokkos)
set_target_properties(canopy_backends PROPERTIES EXPORT_NAME backends)
if(TARGET canopy_cuda)
  list(APPEND _canopy_exported canopy_cuda)
  set_target_properties(canopy_cuda PROPERTIES EXPORT_NAME cuda)
endif()
foreach(t IN LISTS _canopy_exported)
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CANOPY_INSTALL_INCLUDEDIR}>)
endforeach()
install(TARGETS ${_canopy_exported} EXPORT CanopyTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
install(EXPORT CanopyTargets NAMESPACE Canopy:: DESTINATION ${CANOPY_INSTALL_CMAKEDIR} COMPONENT development)

# The facts a consumer must share with this build, read by CanopyConfig.cmake. The plugin ABI
# version comes from its one definition, backends/canopy_Plugin.hpp.
file(STRINGS ${PROJECT_SOURCE_DIR}/backends/canopy_Plugin.hpp _abi REGEX "^#define CANOPY_PLUGIN_ABI_VERSION ")
string(REGEX MATCH "[0-9]+$" CANOPY_PLUGIN_ABI_VERSION "${_abi}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/CanopyConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/CanopyConfig.cmake INSTALL_DESTINATION ${CANOPY_INSTALL_CMAKEDIR}
                              PATH_VARS CANOPY_INSTALL_INCLUDEDIR)
# Pre-1.0: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/CanopyConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/CanopyConfig.cmake ${PROJECT_BINARY_DIR}/CanopyConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/canopy_Kokkos.cmake
        DESTINATION ${CANOPY_INSTALL_CMAKEDIR} COMPONENT development)

if(TARGET canopy)
  # The link path of a Kokkos outside the system folders goes into the installed command's RPATH.
  set_target_properties(canopy PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS canopy RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()
if(TARGET canopy_c)
  set_target_properties(canopy_c PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS canopy_c LIBRARY DESTINATION ${CANOPY_INSTALL_PYTHONDIR}/canopy COMPONENT python)
  file(GLOB _canopy_py CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/canopy/*.py)
  install(FILES ${_canopy_py} DESTINATION ${CANOPY_INSTALL_PYTHONDIR}/canopy COMPONENT python)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/canopy/examples
        COMPONENT development)
