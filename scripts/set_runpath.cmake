# cmake -DRUNPATH=... -P set_runpath.cmake -- FILE...: sets each ELF file's RUNPATH in place
# (CMake's own ELF editor: the new path must be no longer than the one the linker wrote, which
# the build's absolute LibTorch path always is).
set(_files "")
set(_after_dashes OFF)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(i RANGE 0 ${_last})
  if(_after_dashes)
    list(APPEND _files "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(_after_dashes ON)
  endif()
endforeach()
foreach(f IN LISTS _files)
  file(RPATH_SET FILE "${f}" NEW_RPATH "${RUNPATH}")
endforeach()
