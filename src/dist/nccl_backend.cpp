#include "nccl_backend.h"

#include "fsdpp/common/error.h"

#ifdef FSDPP_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace fsdpp::dist {

#ifdef FSDPP_WITH_CUDA

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    int device_index) {
  FSDPP_CHECK_AS(ConfigError, cuda_available(),
                 "[dist] the NCCL backend needs a CUDA device, and none is visible; use Gloo "
                 "(FSDPP_BACKEND=gloo) on CPU");
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
}

bool cuda_available() { return c10::cuda::device_count() > 0; }

#else

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, std::chrono::milliseconds, int) {
  FSDPP_THROW(ConfigError,
              "[dist] the NCCL backend was asked for, but fsdpp was built without CUDA "
              "(configure with -DFSDPP_WITH_CUDA=ON); use Gloo on CPU");
}

bool cuda_available() { return false; }

#endif

}  // namespace fsdpp::dist
