#pragma once
// The c10d backend under a ProcessGroup and the few things that differ between backends (what
// Gloo lacks and fsdpp emulates, where message buffers live), so that the group's collectives,
// their checks, counters and error messages are written once. One implementation per file:
// gloo_backend.{h,cpp} and nccl_backend.{h,cpp}; make_backend picks one for a group.

#include <chrono>
#include <memory>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist::detail {

// Shared by value with every collective body, so that a body the caller abandoned (it stalls in
// the backend after its ranks diverged) may outlive its ProcessGroup. The calls block until done
// (or until c10d gives up at the group's timeout) and run on the group's queue thread.
class Backend {
 public:
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const c10::intrusive_ptr<c10d::Backend>& c10d() const { return c10d_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Where tensors handed to this backend must live (CPU for Gloo, this rank's GPU for NCCL).
  virtual at::Device device() const = 0;
  // output (input.numel() / size) = this rank's chunk of the element-wise reduction of input.
  virtual void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                              ReduceOp op) const = 0;
  // In place over `tensor`.
  virtual void all_reduce(const at::Tensor& tensor, ReduceOp op) const = 0;
  virtual void barrier() const = 0;

 protected:
  Backend(c10::intrusive_ptr<c10d::Backend> c10d, int rank, int size,
          std::chrono::milliseconds timeout);

 private:
  c10::intrusive_ptr<c10d::Backend> c10d_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
};

// Connects this rank's backend of `options.backend` over `store` (already prefixed for the
// group); every member calls it. Throws what c10d throws when the connection fails.
std::shared_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int size, const ProcessGroup::Options& options);

c10d::ReduceOp to_c10d(ReduceOp op);
// Blocks until `work` is done and its result is visible to the caller's stream.
void wait_c10d(const c10::intrusive_ptr<c10d::Work>& work);

}  // namespace fsdpp::dist::detail
