# cmake -DLAYER=<name> -DSTAMP=<file> -DFILES=<a;b;...> -P check_layer_includes.cmake
# Fails when a file of the layer includes a private header of another folder ("../x/y.h"), the one
# kind of climbing include that the per-layer include paths (cmake/FsdppLayers.cmake) cannot stop.
set(found "")
foreach(file IN LISTS FILES)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    string(APPEND found "\n  ${file}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "[build] layer '${LAYER}' includes private headers of another folder; "
    "use that layer's public header under include/fsdpp/ (docs/architecture.md):${found}")
endif()
file(TOUCH ${STAMP})
