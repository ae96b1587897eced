#include "fsdpp/fsdp/checkpoint_tail.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "activation_checkpoint_region.h"
#include "linear_backward.h"
#include "fsdpp/fsdp/fully_shard.h"

namespace fsdpp {
namespace {

// Whether the next tail_linear on this thread may skip its product: set by a ResidualTail of
// the module being recomputed, used up by the first tail_linear.
thread_local bool tl_tail_open = false;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = x W^T without computing y: forward keeps x and W and returns zeros; backward computes what
// at::linear's does (linear_backward.h), so the gradients are bit-equal to the product's.
struct UncomputedLinear : public torch::autograd::Function<UncomputedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    auto shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return at::zeros(shape, x.options());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [gx, gw] = detail::linear_backward(grads[0], saved[0], saved[1], ctx->needs_input_grad(0),
                                            ctx->needs_input_grad(1));
    return {gx, gw};
  }
};

}  // namespace

ResidualTail::ResidualTail(torch::nn::Module& module) : previous_(tl_tail_open) {
  const void* recomputed = detail::recomputing();
  tl_tail_open = recomputed != nullptr && recomputed == detail::checkpoint_marker_of(module);
}

ResidualTail::~ResidualTail() { tl_tail_open = previous_; }

at::Tensor tail_linear(torch::nn::Linear& linear, const at::Tensor& x) {
  const bool skip = tl_tail_open && !linear->bias.defined() && x.dim() >= 2 &&
                    detail::checkpoint_phase() == detail::CheckpointPhase::RECOMPUTE;
  if (!skip) return linear->forward(x);
  tl_tail_open = false;  // the first one only: the branch's last projection
  return UncomputedLinear::apply(x, linear->weight);
}

}  // namespace fsdpp
