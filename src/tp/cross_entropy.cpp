#include "fsdpp/tp/cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "fsdpp/common/error.h"

namespace fsdpp::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kIgnoreIndex = -100;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, int64_t vocab_offset,
                            const GroupPtr& group, double divisor) {
    const int64_t v_local = logits.size(-1);
    auto x = logits.reshape({-1, v_local}).to(at::promote_types(logits.scalar_type(), at::kFloat));
    auto t = targets.reshape({-1});  // (M)
    FSDPP_CHECK_AS(ConfigError, t.numel() == x.size(0),
                   "[tp] vocab_parallel_cross_entropy: {} targets for {} rows of logits",
                   t.numel(), x.size(0));
    // Row maxima over the whole vocabulary, for a stable exp.
    auto max = std::get<0>(x.max(-1)).contiguous();  // (M)
    group->all_reduce(max, dist::ReduceOp::MAX, {"tp.vocab_parallel_cross_entropy"});
    auto shifted = x - max.unsqueeze(1);             // (M, V_r)
    auto in_range = (t >= vocab_offset) & (t < vocab_offset + v_local);  // (M)
    auto local_t = at::where(in_range, t - vocab_offset, at::zeros_like(t));
    auto exp = shifted.exp();
    // [sum of exp, target logit] over the vocabulary: one all-reduce of 2M floats.
    auto sums = at::stack({exp.sum(-1),
                           shifted.gather(1, local_t.unsqueeze(1)).squeeze(1) *
                               in_range.to(shifted.scalar_type())})
                    .contiguous();  // (2, M)
    group->all_reduce(sums, dist::ReduceOp::SUM, {"tp.vocab_parallel_cross_entropy"});
    auto sum_exp = sums[0], target_logit = sums[1];
    auto valid = (t != kIgnoreIndex).to(shifted.scalar_type());  // (M)
    // The mean's count, or the caller's divisor (a sum over it: 0 without kept targets).
    auto count = divisor > 0 ? at::full({}, divisor, valid.options()) : valid.sum();
    auto per_token = (at::log(sum_exp) - target_logit) * valid;
    ctx->save_for_backward({exp / sum_exp.unsqueeze(1), local_t, in_range, valid, count});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    ctx->saved_data["shape"] = logits.sizes().vec();
    // In the compute dtype (float32 or wider), as models::token_cross_entropy returns it.
    return per_token.sum() / count;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto softmax = saved[0], local_t = saved[1], in_range = saved[2], valid = saved[3];
    auto count = saved[4];
    // d(mean loss)/d(logit) = (softmax - one_hot(target)) / count on the kept rows.
    auto grad = softmax.clone();
    grad.scatter_add_(1, local_t.unsqueeze(1), -in_range.to(grad.scalar_type()).unsqueeze(1));
    grad = grad * (valid / count * grads[0].to(grad.scalar_type())).unsqueeze(1);
    auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto shape = ctx->saved_data["shape"].toIntVector();
    return {grad.to(dtype).reshape(shape), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                        int64_t vocab_offset, const GroupPtr& group,
                                        double divisor) {
  FSDPP_CHECK_AS(ConfigError, divisor >= 0 && std::isfinite(divisor),
                 "[tp] vocab_parallel_cross_entropy: divisor={}; expected 0 (the mean) or > 0",
                 divisor);
  return VocabParallelCrossEntropy::apply(local_logits, targets, vocab_offset, group, divisor);
}

}  // namespace fsdpp::tp
