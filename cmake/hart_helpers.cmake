# One helper per target kind (style R38): every target gets the hart::<name>
# alias and links the warning flags privately.
add_library(hart_internal INTERFACE)
target_compile_options(hart_internal INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
if(HART_WERROR)
  target_compile_options(hart_internal INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# hart_add_library(NAME name SRCS ... [CUDA_SRCS ...] DEPS ... [PRIVATE_DEPS ...])
function(hart_add_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;CUDA_SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(srcs ${A_SRCS})
  if(HART_CUDA)
    list(APPEND srcs ${A_CUDA_SRCS})
  endif()
  add_library(hart_${A_NAME} ${srcs})
  add_library(hart::${A_NAME} ALIAS hart_${A_NAME})
  target_include_directories(hart_${A_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(hart_${A_NAME} PUBLIC ${A_DEPS} PRIVATE hart_internal ${A_PRIVATE_DEPS})
  if(HART_CUDA)
    target_compile_definitions(hart_${A_NAME} PUBLIC HART_CUDA=1)
    if(A_CUDA_SRCS)
      target_link_libraries(hart_${A_NAME} PUBLIC CUDA::cudart)
    endif()
  endif()
endfunction()

# hart_add_test(NAME name SRCS ... DEPS ... [LABELS ...] [FIXTURES ...] [SERIAL])
# FIXTURES: ctest fixtures (FIXTURES_SETUP tests) every case needs first.
# SERIAL: every case runs alone (RUN_SERIAL), for what measures the whole device.
function(hart_add_test)
  cmake_parse_arguments(A "SERIAL" "NAME" "SRCS;DEPS;LABELS;FIXTURES" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main hart_internal)
  target_compile_definitions(${A_NAME} PRIVATE HART_TEST_DATA="${PROJECT_SOURCE_DIR}/tests/data")
  # Passive OpenMP waiting: ctest runs suites side by side, and spinning OpenMP
  # workers of one test would starve the other's threads on a small machine.
  # Listing runs at build time beside the compiler: a LibTorch test binary, loading from a cold
  # page cache on 2 busy cores, once took over 60 s just to list its tests.
  gtest_discover_tests(${A_NAME} DISCOVERY_TIMEOUT 300
    PROPERTIES LABELS "${A_LABELS}" ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE" FIXTURES_REQUIRED "${A_FIXTURES}"
               RUN_SERIAL "${A_SERIAL}")
endfunction()
