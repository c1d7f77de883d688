# ampctl_add_test_dir(NAME DIR LABEL [LIBS...]): every *.cpp in DIR becomes one GoogleTest
# executable NAME whose cases are registered with ctest under LABEL (cpu or cuda). Cases that call
# GTEST_SKIP (cuda tests without a GPU) are reported by ctest as skipped, never as passed.
find_package(GTest REQUIRED)
include(GoogleTest)

function(ampctl_add_test_dir name dir label)
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(NOT sources)
    return()
  endif()
  add_executable(${name} ${sources})
  target_compile_options(${name} PRIVATE ${AMPCTL_CXX_FLAGS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE AMPCTL_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/data")
  ampctl_link_core(${name})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main ${ARGN})
  # The CUDA tests link the plugin (they call kernels/ directly); the others reach it, when a test
  # asks for a GPU, as ampctl does (cuda_plugin.h).
  if(AMPCTL_HAVE_CUDA AND label STREQUAL "cuda")
    target_link_libraries(${name} PRIVATE ampctl_cuda)
  elseif(AMPCTL_HAVE_CUDA)
    add_dependencies(${name} ampctl_cuda)
  endif()
  set_target_properties(${name} PROPERTIES BUILD_RPATH "$ORIGIN;$ORIGIN/lib")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS ${label} SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
                       ENVIRONMENT "AMPCTL_TEST_DATA=${CMAKE_SOURCE_DIR}/tests/data")
endfunction()
