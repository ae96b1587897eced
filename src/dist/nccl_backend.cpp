#include "nccl_backend.h"

#include "fsdpp/common/error.h"
#include "fsdpp/dist/device.h"

#ifdef FSDPP_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace fsdpp::dist {

#ifdef FSDPP_WITH_CUDA

bool cuda_available() { return c10::cuda::device_count() > 0; }

namespace detail {

void delay_current_cuda_stream(int64_t cycles) { at::cuda::sleep(cycles); }

namespace {

class NcclBackend final : public Backend {
 public:
  NcclBackend(c10::intrusive_ptr<c10d::Backend> c10d, int rank, int size,
              std::chrono::milliseconds timeout, int device_index)
      : Backend(std::move(c10d), rank, size, timeout), device_index_(device_index) {}

  at::Device device() const override {
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index_));
  }

  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      ReduceOp op) const override {
    auto out = output;
    auto in = input;
    c10d::ReduceScatterOptions o;
    o.reduceOp = to_c10d(op);
    wait_c10d(c10d()->_reduce_scatter_base(out, in, o));
  }

  void all_reduce(const at::Tensor& tensor, ReduceOp op) const override {
    std::vector<at::Tensor> ts{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    wait_c10d(c10d()->allreduce(ts, o));
  }

  // NCCL's barrier needs a device guess; a one-element all-reduce is the same thing, and the
  // CPU waits for it (a barrier orders hosts, not streams).
  void barrier() const override {
    std::vector<at::Tensor> ts{at::zeros({1}, at::TensorOptions().device(device()))};
    wait_c10d(c10d()->allreduce(ts));
    Stream::current(device()).synchronize();
  }

 private:
  int device_index_;
};

}  // namespace

std::shared_ptr<Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, const ProcessGroup::Options& options) {
  FSDPP_CHECK_AS(ConfigError, cuda_available(),
                 "[dist] the NCCL backend needs a CUDA device, and none is visible; use Gloo "
                 "(FSDPP_BACKEND=gloo) on CPU");
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = options.timeout;
  auto nccl_store = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
  return std::make_shared<NcclBackend>(
      c10::make_intrusive<c10d::ProcessGroupNCCL>(nccl_store, rank, size, opts), rank, size,
      options.timeout, options.device_index);
}

}  // namespace detail

#else

bool cuda_available() { return false; }

namespace detail {

void delay_current_cuda_stream(int64_t) {
  FSDPP_THROW(ConfigError, "[dist] FSDPP_DEBUG_COMM_DELAY_CYCLES needs fsdpp built with CUDA");
}


std::shared_ptr<Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                           const ProcessGroup::Options&) {
  FSDPP_THROW(ConfigError,
              "[dist] the NCCL backend was asked for, but fsdpp was built without CUDA "
              "(configure with -DFSDPP_WITH_CUDA=ON); use Gloo on CPU");
}

}  // namespace detail

#endif

}  // namespace fsdpp::dist
