# One CTest test per googletest suite of a test binary, all of the suite's cases in one process,
# instead of gtest_discover_tests' one test (and one process) per case: every process loads
# LibTorch first (1 to 3 s on 2 shared cores), and the unit binaries have some 290 cases in some
# 50 suites, so one process per case spent minutes of each CI run, twice (make test and the ASan
# run). `ctest -R Config` still picks a suite; one case: the binary's --gtest_filter.
#
#   fsdpp_gtest_suites(fsdpp_unit_tests LABELS unit TIMEOUT 600 [PREFIX moe.] [EXCLUDE "*Rss*"]
#                      [ENVIRONMENT OMP_NUM_THREADS=1])
#
# Whenever the target is rebuilt, `--gtest_list_tests` lists its suites into a CTest file that
# this directory's tests include (a binary not built yet is one failing test saying so).
set(FSDPP_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/gtest_suites.cmake)

function(fsdpp_gtest_suites target)
  cmake_parse_arguments(A "" "PREFIX;TIMEOUT;EXCLUDE" "LABELS;ENVIRONMENT" ${ARGN})
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  string(REPLACE ";" "," labels "${A_LABELS}")
  string(REPLACE ";" "," environment "${A_ENVIRONMENT}")
  add_custom_command(OUTPUT ${list_file}
    COMMAND ${CMAKE_COMMAND} -D BIN=$<TARGET_FILE:${target}> -D OUT=${list_file}
            -D PREFIX=${A_PREFIX} -D LABELS=${labels} -D TIMEOUT=${A_TIMEOUT}
            -D EXCLUDE=${A_EXCLUDE} -D ENVIRONMENT=${environment} -D WORKDIR=${CMAKE_CURRENT_BINARY_DIR}
            -P ${FSDPP_GTEST_SUITES_SCRIPT}
    DEPENDS ${target} ${FSDPP_GTEST_SUITES_SCRIPT}
    COMMENT "Listing the test suites of ${target}"
    VERBATIM)
  add_custom_target(${target}_suites ALL DEPENDS ${list_file})
  # The placeholder carries the labels, so that a run selecting them (ctest -L unit) fails on it
  # instead of leaving the binary's suites out without a word.
  file(WRITE ${include_file}
       "if(EXISTS [=[${list_file}]=])\n  include([=[${list_file}]=])\nelse()\n"
       "  add_test([=[${A_PREFIX}${target}_NOT_BUILT]=] [=[${target}_NOT_BUILT]=])\n"
       "  set_tests_properties([=[${A_PREFIX}${target}_NOT_BUILT]=] PROPERTIES LABELS [=[${A_LABELS}]=])\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
