# canopy_add_test(<Thing> SOURCES a.cpp ... [LIBS ...] [LABELS ...])
# Builds canopy_Test_<Thing> from the sources + the shared main (Kokkos::ScopeGuard + gtest) and
# registers each test case with ctest through gtest_discover_tests.
include(GoogleTest)
function(canopy_add_test thing)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  set(target canopy_Test_${thing})
  add_executable(${target} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/canopy_TestMain.cpp)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(${target} PRIVATE canopy::backends GTest::gtest ${ARG_LIBS})
  set_target_properties(${target} PROPERTIES BUILD_RPATH "$ORIGIN;$ORIGIN/lib")
  gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
