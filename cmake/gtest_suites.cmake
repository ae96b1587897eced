# cmake -P script for FsdppGtestSuites.cmake: BIN's suites into OUT, one add_test each.
execute_process(COMMAND "${BIN}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE err
                RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "[tests] ${BIN} --gtest_list_tests failed (${rc}): ${err}")
endif()
string(REPLACE "," ";" labels "${LABELS}")
string(REPLACE "," ";" environment "${ENVIRONMENT}")
set(negative "")
if(EXCLUDE)
  set(negative ":-${EXCLUDE}")
endif()
set(content "# Written by cmake/gtest_suites.cmake after the build of ${BIN}.\n")
string(REPLACE "\n" ";" lines "${listing}")
set(count 0)
foreach(line IN LISTS lines)
  # "Suite." or "Prefix/Suite/0.  # TypeParam = ..." (a suite); "  Case" lines are its cases.
  string(REGEX REPLACE "  #.*$" "" line "${line}")
  if(line MATCHES "^([^ ].*)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    set(name "${PREFIX}${suite}")
    string(APPEND content
           "add_test([=[${name}]=] [=[${BIN}]=] [=[--gtest_filter=${suite}.*${negative}]=])\n"
           "set_tests_properties([=[${name}]=] PROPERTIES LABELS [=[${labels}]=] TIMEOUT ${TIMEOUT} "
           "WORKING_DIRECTORY [=[${WORKDIR}]=] ENVIRONMENT [=[${environment}]=])\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "[tests] ${BIN} lists no test suites")
endif()
file(WRITE "${OUT}" "${content}")
