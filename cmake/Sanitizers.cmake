# FSDPP_SANITIZE: sanitizers for every target of this build, as a comma-separated list handed to
# -fsanitize= (make test-asan uses address,undefined in build-asan).
#
# LibTorch comes from PyTorch's wheel and is not instrumented: ASan still sees every heap block
# (it replaces malloc/new for the whole process) and checks every access fsdpp's own code makes,
# but not the accesses inside LibTorch (docs/faults.md, "Sanitizers").
set(FSDPP_SANITIZE "" CACHE STRING
    "Build with these sanitizers (-fsanitize=LIST), e.g. address,undefined; empty: none")
option(FSDPP_ASAN "Shorthand for FSDPP_SANITIZE=address,undefined" OFF)
if(FSDPP_ASAN AND NOT FSDPP_SANITIZE)
  set(FSDPP_SANITIZE "address,undefined")
endif()

if(FSDPP_SANITIZE)
  message(STATUS "fsdpp: sanitizers ${FSDPP_SANITIZE}")
  # -fno-sanitize-recover: a UBSan finding fails the test instead of scrolling by.
  # vptr is left out: it checks dynamic types against RTTI, and objects that LibTorch (built with
  # another compiler and hidden visibility) creates look like the wrong type to it.
  add_compile_options(-fsanitize=${FSDPP_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FSDPP_SANITIZE})
  if(FSDPP_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize=vptr)
    add_link_options(-fno-sanitize=vptr)
  endif()
endif()
