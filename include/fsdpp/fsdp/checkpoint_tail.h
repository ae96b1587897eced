#pragma once
// The last projection of a checkpointed module's residual branch, left out of its recomputation
// (PyTorch's non-reentrant checkpointing gets the same by stopping its recomputation early).
//
//   at::Tensor BlockImpl::forward(const at::Tensor& x) {   // a checkpointed module
//     auto h = x + fsdpp::forward(attention, norm1(x));
//     fsdpp::ResidualTail tail(*this);   // what this returns: h + a branch ending in tail_linear
//     return h + fsdpp::forward(mlp, norm2(h));            // mlp: ... fsdpp::tail_linear(w2, g)
//   }
//
// When a checkpointed module is recomputed inside its backward, what its forward returns is
// never read, only the graph to it: the residual sum passes its gradient on unchanged, and a
// bias-free linear's backward needs its input and weight, not its product. So during the
// module's own recomputation, while a ResidualTail of that module is open, the first
// tail_linear returns zeros whose backward is the product's: the gradients are the same, bit
// for bit, for one matrix multiply less per module (a Llama block's w2: on an H200, 4 ms of a
// 1B model's 159 ms step; docs/gpus.md). Everywhere else (the first forward, no checkpointing,
// the recomputation of an enclosing module, whose next part reads this output) tail_linear is
// the linear itself.
//
// Correct only as the sketch is: the module returns residual + branch, and nothing between
// tail_linear and that sum reads the branch's value (no norm, no nonlinearity, no collective).
#include <ATen/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

namespace fsdpp {

class ResidualTail {
 public:
  explicit ResidualTail(torch::nn::Module& module);
  ~ResidualTail();
  ResidualTail(const ResidualTail&) = delete;
  ResidualTail& operator=(const ResidualTail&) = delete;

 private:
  bool previous_;
};

// linear(x); inside an open ResidualTail of the module being recomputed, for a linear without
// a bias, zeros of its output's shape whose backward is x W^T's.
at::Tensor tail_linear(torch::nn::Linear& linear, const at::Tensor& x);

}  // namespace fsdpp
