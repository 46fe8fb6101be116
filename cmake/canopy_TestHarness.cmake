# canopy_add_test(<Thing> SOURCES a.cpp ... [LIBS ...] [LABELS ...])
# Builds canopy_Test_<Thing> from the sources + the shared main (Kokkos::ScopeGuard + gtest) and
# registers each test case with ctest through gtest_discover_tests. With a CUDA Kokkos the binaries
# need the CUDA driver library just to load, so the cases are listed when ctest runs (on the GPU
# machine), not at build time: a build machine without a GPU driver still builds everything.
include(GoogleTest)
set(_canopy_discovery POST_BUILD)
if(Kokkos_ENABLE_CUDA)
  set(_canopy_discovery PRE_TEST)
endif()
function(canopy_add_test thing)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  set(target canopy_Test_${thing})
  add_executable(${target} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/canopy_TestMain.cpp)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(${target} PRIVATE canopy::backends GTest::gtest ${ARG_LIBS})
  set_target_properties(${target} PROPERTIES BUILD_RPATH "$ORIGIN;$ORIGIN/lib")
  gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 DISCOVERY_MODE ${_canopy_discovery} PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
