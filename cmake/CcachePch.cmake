# ccache hits across clone paths (make's CCACHE_BASEDIR is the clone): a fresh clone of a commit
# that was built before compiles only its precompiled header, even in another directory.
#
# What stands in the way with CMake's defaults for clang, and what this file does about it:
# - The flags that use the PCH are "-Xclang <absolute path>", which ccache neither understands
#   as paths nor rewrites relative to CCACHE_BASEDIR. The driver's "-include <header>" finds
#   "<header>.pch" by itself (as GCC's does .gch), and ccache rewrites that path.
# - ccache hashes the PCH's bytes into every object that uses it, and a PCH embeds the absolute
#   paths of its inputs. The PCH target's launcher (pch_checksum.sh) writes a digest of what the
#   PCH holds beside it, without paths, and make sets CCACHE_PCH_EXTSUM so that ccache hashes
#   that digest instead.
# - A PCH restored from the cache must not fail clang's check of its inputs' modification
#   times (a fresh clone's files are newer): -fno-pch-timestamp. The PCH itself stays per clone
#   (its creation keeps the absolute -Xclang path, so it misses in a new clone): a PCH made in
#   another clone names that clone's files, which clang would go looking for on the next miss.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  return()
endif()
set(CMAKE_CXX_COMPILE_OPTIONS_USE_PCH -include <PCH_HEADER>)
set(CMAKE_CXX_COMPILE_OPTIONS_CREATE_PCH
    -Xclang -emit-pch -Xclang -fno-pch-timestamp -Xclang -include -Xclang <PCH_HEADER>
    -x c++-header)

# fsdpp_pch_launcher(<target>): the launcher of the target that creates the PCH.
function(fsdpp_pch_launcher target)
  if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
    set_property(TARGET ${target} PROPERTY CXX_COMPILER_LAUNCHER
                 sh ${PROJECT_SOURCE_DIR}/cmake/pch_checksum.sh ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CXX_COMPILER} ${CMAKE_CXX_COMPILER_LAUNCHER})
  endif()
endfunction()
