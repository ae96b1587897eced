# fsdpp_layer(<name> [DEPS <layer>...]): the OBJECT library fsdpp_<name> for src/<name>/.
#
# Its include path is a directory of links made at configure time, <build>/layer-include/<name>/
# fsdpp/<layer> -> include/fsdpp/<layer>, one for the layer itself and one for every layer it may
# use (DEPS and theirs): a header of a layer above is not there to be found. src/<name>/ (its
# private headers) is on the path of that layer only. Sources are added by src/<name>/
# CMakeLists.txt; third-party libraries go on both fsdpp_<name> (headers) and fsdpp (the link).
set(FSDPP_LAYERS "")

function(fsdpp_layer name)
  cmake_parse_arguments(L "" "" "DEPS" ${ARGN})
  set(closure ${name})
  foreach(dep IN LISTS L_DEPS)
    if(NOT TARGET fsdpp_${dep})
      message(FATAL_ERROR "fsdpp_layer(${name}): layer '${dep}' must be declared before it")
    endif()
    get_property(dep_closure GLOBAL PROPERTY FSDPP_LAYER_CLOSURE_${dep})
    list(APPEND closure ${dep_closure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set_property(GLOBAL PROPERTY FSDPP_LAYER_CLOSURE_${name} ${closure})

  set(root ${PROJECT_BINARY_DIR}/layer-include/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/fsdpp)
  foreach(layer IN LISTS closure)
    if(EXISTS ${PROJECT_SOURCE_DIR}/include/fsdpp/${layer})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/fsdpp/${layer} ${root}/fsdpp/${layer} SYMBOLIC)
    endif()
  endforeach()

  add_library(fsdpp_${name} OBJECT)
  target_include_directories(fsdpp_${name} PRIVATE ${root})
  target_link_libraries(fsdpp_${name} PUBLIC fsdpp_torch Threads::Threads)
  foreach(dep IN LISTS L_DEPS)
    # Object libraries pass on usage requirements only; the layer's own include path above is
    # private, so a dependency's headers come from the links, never transitively.
    target_link_libraries(fsdpp_${name} PUBLIC fsdpp_${dep})
  endforeach()
  target_precompile_headers(fsdpp_${name} REUSE_FROM fsdpp_pch)
  target_compile_options(fsdpp_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)

  # The layer check: a source of this layer that includes "../<folder>/..." reaches into another
  # folder's private headers, which no include path can forbid.
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp
       ${PROJECT_SOURCE_DIR}/src/${name}/*.h ${PROJECT_SOURCE_DIR}/include/fsdpp/${name}/*.h)
  set(stamp ${PROJECT_BINARY_DIR}/layer-include/${name}.checked)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DLAYER=${name} -DSTAMP=${stamp} "-DFILES=${sources}"
            -P ${PROJECT_SOURCE_DIR}/cmake/check_layer_includes.cmake
    DEPENDS ${sources} ${PROJECT_SOURCE_DIR}/cmake/check_layer_includes.cmake
    COMMENT "Checking that src/${name} includes no other folder's private headers" VERBATIM)
  add_custom_target(fsdpp_${name}_layer_check DEPENDS ${stamp})
  add_dependencies(fsdpp_${name} fsdpp_${name}_layer_check)

  set(FSDPP_LAYERS ${FSDPP_LAYERS} ${name} PARENT_SCOPE)
endfunction()

# fsdpp_layer_link(<layer> <library>...): a third-party library that <layer>'s sources use: its
# headers for the layer's objects, the library itself for the link of fsdpp.
function(fsdpp_layer_link layer)
  target_link_libraries(fsdpp_${layer} PRIVATE ${ARGN})
  target_link_libraries(fsdpp PRIVATE ${ARGN})
endfunction()
