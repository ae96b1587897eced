# LibTorch, taken from PyTorch's pip wheel.
#
# The wheel's own TorchConfig.cmake drags in Caffe2's CUDA detection (arch lists, NVRTC from the
# system toolkit) even for a CPU build, and it does not ship Gloo's headers that c10d's
# ProcessGroupGloo.hpp needs. So we locate the wheel through torch's cmake prefix path and
# describe the few libraries we use ourselves; Gloo's headers come from Debian's libgloo-dev
# (only declarations are used: the Gloo code that runs is the copy inside libtorch_cpu).

set(FSDPP_PYTHON "python3" CACHE FILEPATH "Python interpreter whose torch package provides LibTorch")
if(NOT DEFINED CACHE{FSDPP_TORCH_CMAKE_PREFIX})
  execute_process(
    COMMAND ${FSDPP_PYTHON} -c "import torch,sys; sys.stdout.write(torch.utils.cmake_prefix_path + ';' + torch.__version__)"
    OUTPUT_VARIABLE _torch_out RESULT_VARIABLE _torch_rc ERROR_VARIABLE _torch_err)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "[build] cannot import torch with ${FSDPP_PYTHON}: ${_torch_err}\n"
                        "Run `make setup` (or pass -DFSDPP_PYTHON=<python with torch>).")
  endif()
  list(GET _torch_out 0 _prefix)
  list(GET _torch_out 1 _version)
  set(FSDPP_TORCH_CMAKE_PREFIX "${_prefix}" CACHE INTERNAL "")
  set(FSDPP_TORCH_VERSION "${_version}" CACHE INTERNAL "")
endif()
get_filename_component(FSDPP_TORCH_ROOT "${FSDPP_TORCH_CMAKE_PREFIX}/../.." ABSOLUTE)
message(STATUS "fsdpp: LibTorch ${FSDPP_TORCH_VERSION} at ${FSDPP_TORCH_ROOT}")

find_path(GLOO_INCLUDE_DIR gloo/algorithm.h REQUIRED)

set(_torch_lib "${FSDPP_TORCH_ROOT}/lib")
add_library(fsdpp_torch INTERFACE)
target_include_directories(fsdpp_torch SYSTEM INTERFACE
  "${FSDPP_TORCH_ROOT}/include"
  "${FSDPP_TORCH_ROOT}/include/torch/csrc/api/include"
  "${GLOO_INCLUDE_DIR}")
# LibTorch ships its own {fmt} (v12) in include/fmt, which shadows Debian's libfmt-dev (v9) for
# every file that includes torch; mixing the two fails at link time. Code on top of LibTorch uses
# the bundled copy header-only; code without LibTorch (the launcher) uses Debian's.
target_compile_definitions(fsdpp_torch INTERFACE USE_C10D_GLOO USE_DISTRIBUTED FMT_HEADER_ONLY)
target_link_libraries(fsdpp_torch INTERFACE
  "${_torch_lib}/libtorch.so" "${_torch_lib}/libtorch_cpu.so" "${_torch_lib}/libc10.so")
target_link_options(fsdpp_torch INTERFACE "LINKER:-rpath,${_torch_lib}" "LINKER:--no-as-needed")

# CUDA: on by default when the wheel has CUDA libraries and a toolkit is installed, so that the
# GPU code compiles on machines without a GPU.
find_package(CUDAToolkit QUIET)
if(EXISTS "${_torch_lib}/libtorch_cuda.so" AND CUDAToolkit_FOUND)
  set(_cuda_default ON)
else()
  set(_cuda_default OFF)
endif()
option(FSDPP_WITH_CUDA "Build fsdpp's CUDA parts (NCCL backend, collective streams)" ${_cuda_default})
if(FSDPP_WITH_CUDA)
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "[build] FSDPP_WITH_CUDA=ON but no CUDA toolkit was found")
  endif()
  message(STATUS "fsdpp: CUDA parts on (toolkit ${CUDAToolkit_VERSION})")
  target_compile_definitions(fsdpp_torch INTERFACE USE_C10D_NCCL USE_CUDA FSDPP_WITH_CUDA=1)
  # The toolkit's include directories by their real paths: FindCUDAToolkit reports
  # /usr/local/cuda/include when nvcc is found through /usr/local/cuda/bin on PATH and
  # /usr/local/cuda-13.0/include when it is found elsewhere (CI's environment has no CUDA bin on
  # PATH), and the two spellings of one directory gave every object two ccache keys: CI missed
  # the cache that a session's run of .ci/run had warmed, and overran its 90 minutes.
  set(_cuda_includes "")
  foreach(_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    file(REAL_PATH "${_dir}" _real)
    list(APPEND _cuda_includes "${_real}")
  endforeach()
  list(REMOVE_DUPLICATES _cuda_includes)
  target_include_directories(fsdpp_torch SYSTEM INTERFACE ${_cuda_includes})
  target_link_libraries(fsdpp_torch INTERFACE
    "${_torch_lib}/libtorch_cuda.so" "${_torch_lib}/libc10_cuda.so")
else()
  message(STATUS "fsdpp: CUDA parts off")
endif()
