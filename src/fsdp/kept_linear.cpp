#include "fsdpp/fsdp/kept_linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "activation_checkpoint_region.h"
#include "fsdpp/common/error.h"
#include "linear_backward.h"

namespace fsdpp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = x W^T given y, computed by the first forward: forward hands y back; backward is the
// linear's (linear_backward.h).
struct KeptLinear : public torch::autograd::Function<KeptLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& product) {
    ctx->save_for_backward({x, weight});
    return product;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [gx, gw] = detail::linear_backward(grads[0], saved[0], saved[1], ctx->needs_input_grad(0),
                                            ctx->needs_input_grad(1));
    return {gx, gw, at::Tensor()};
  }
};

}  // namespace

at::Tensor kept_linear(torch::nn::Linear& linear, const at::Tensor& x) {
  auto* kept = detail::kept_products();
  if (kept == nullptr || linear->bias.defined()) return linear->forward(x);
  if (detail::checkpoint_phase() == detail::CheckpointPhase::FORWARD) {
    auto y = linear->forward(x);
    kept->tensors.push_back(y);
    return y;
  }
  FSDPP_CHECK(kept->next < kept->tensors.size(),
              "[checkpoint] selective checkpointing: the recomputation asked for product {} where "
              "the first forward kept {}; a checkpointed forward must run the same projections",
              kept->next + 1, kept->tensors.size());
  const auto& y = kept->tensors[kept->next++];
  FSDPP_CHECK(y.size(-1) == linear->weight.size(0) && y.numel() / y.size(-1) == x.numel() / x.size(-1),
              "[checkpoint] selective checkpointing: a kept product of shape {} does not fit "
              "x {} W {} in the recomputation",
              y.sizes(), x.sizes(), linear->weight.sizes());
  return KeptLinear::apply(x, linear->weight, y.detach());
}

}  // namespace fsdpp
