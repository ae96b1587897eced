# Apache Arrow and Parquet (C++), taken from the pyarrow wheel as LibTorch is taken from torch's.
#
# Debian 12 has no Arrow package; the pyarrow wheel that scripts/setup.sh installs beside torch
# carries the C++ headers (pyarrow.get_include()) and the shared libraries the data readers need,
# libarrow.so.<NNNN> and libparquet.so.<NNNN> (NNNN = major * 100 + minor of the release). The
# wheel ships no unversioned libarrow.so links and no ArrowConfig.cmake for its own copy, so the
# libraries are named by path here and the binaries get an rpath to the wheel's directory, as
# FsdppTorch.cmake does for LibTorch. Only src/data/'s readers include Arrow's headers; fsdpp's
# public headers do not, so a user of find_package(fsdpp) needs the libraries, not the headers.

if(NOT DEFINED CACHE{FSDPP_ARROW_DIR})
  execute_process(
    COMMAND ${FSDPP_PYTHON} -c "import os,sys,pyarrow; sys.stdout.write(os.path.dirname(pyarrow.__file__) + ';' + pyarrow.get_include() + ';' + pyarrow.__version__)"
    OUTPUT_VARIABLE _arrow_out RESULT_VARIABLE _arrow_rc ERROR_VARIABLE _arrow_err)
  if(NOT _arrow_rc EQUAL 0)
    message(FATAL_ERROR "[build] cannot import pyarrow with ${FSDPP_PYTHON}: ${_arrow_err}\n"
                        "Run `make setup` (it installs the pyarrow wheel, whose C++ libraries read "
                        "Parquet and Arrow files), or pass -DFSDPP_PYTHON=<python with pyarrow>.")
  endif()
  list(GET _arrow_out 0 _dir)
  list(GET _arrow_out 1 _include)
  list(GET _arrow_out 2 _version)
  set(FSDPP_ARROW_DIR "${_dir}" CACHE INTERNAL "")
  set(FSDPP_ARROW_INCLUDE_DIR "${_include}" CACHE INTERNAL "")
  set(FSDPP_ARROW_VERSION "${_version}" CACHE INTERNAL "")
endif()

# 26.0.1 -> libarrow.so.2600: Arrow's SONAME carries major and two-digit minor.
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _arrow_mm "${FSDPP_ARROW_VERSION}")
math(EXPR _arrow_so "${CMAKE_MATCH_1} * 100 + ${CMAKE_MATCH_2}")
set(FSDPP_ARROW_LIBRARIES
  "${FSDPP_ARROW_DIR}/libparquet.so.${_arrow_so}" "${FSDPP_ARROW_DIR}/libarrow.so.${_arrow_so}")
foreach(_lib IN LISTS FSDPP_ARROW_LIBRARIES)
  if(NOT EXISTS "${_lib}")
    message(FATAL_ERROR "[build] pyarrow ${FSDPP_ARROW_VERSION} at ${FSDPP_ARROW_DIR} has no ${_lib}; "
                        "expected the wheel's libarrow.so.${_arrow_so} and libparquet.so.${_arrow_so}")
  endif()
endforeach()
if(NOT EXISTS "${FSDPP_ARROW_INCLUDE_DIR}/parquet/arrow/reader.h")
  message(FATAL_ERROR "[build] pyarrow's include directory ${FSDPP_ARROW_INCLUDE_DIR} has no "
                      "parquet/arrow/reader.h; reinstall the pyarrow wheel (`make setup`)")
endif()
message(STATUS "fsdpp: Arrow ${FSDPP_ARROW_VERSION} (libarrow.so.${_arrow_so}) at ${FSDPP_ARROW_DIR}")

add_library(fsdpp_arrow INTERFACE)
target_include_directories(fsdpp_arrow SYSTEM INTERFACE "${FSDPP_ARROW_INCLUDE_DIR}")
target_link_libraries(fsdpp_arrow INTERFACE ${FSDPP_ARROW_LIBRARIES})
target_link_options(fsdpp_arrow INTERFACE "LINKER:-rpath,${FSDPP_ARROW_DIR}")
