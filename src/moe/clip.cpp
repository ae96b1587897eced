#include "fsdpp/moe/clip.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace fsdpp::moe {

double clip_grad_norm_(const std::vector<GradNormPart>& parts, double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  double total = 0;
  for (const auto& part : parts) {
    std::vector<at::Tensor> squares;
    for (const auto& p : part.params) {
      auto g = p.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      squares.push_back(at::linalg_vector_norm(g, 2.0, {}, false, at::kDouble).square());
    }
    // Read back once per part, not once per parameter.
    auto sum = squares.empty() ? at::zeros({1}, at::kDouble)
                               : at::stack(squares).sum().reshape({1}).cpu();
    for (const auto& group : part.split_over) {
      if (group && group->size() > 1) {
        group->all_reduce(sum, dist::ReduceOp::SUM, {"moe.clip_grad_norm_"});
      }
    }
    total += sum.item<double>();
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (auto& g : grads) g.mul_(coef);
  }
  return total;
}

}  // namespace fsdpp::moe
