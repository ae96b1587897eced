#include "fsdpp/pipeline/clip.h"

#include <ATen/ATen.h>

#include <cmath>

namespace fsdpp::pipeline {

double clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  at::NoGradGuard no_grad;
  at::Device device = at::kCPU;  // where the groups communicate: the gradients' device
  for (const auto& p : params) {
    if (p.grad().defined()) device = p.grad().device();
  }
  auto total = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (const auto& p : params) {
    if (p.grad().defined()) total += p.grad().to(at::kDouble).square().sum();
  }
  for (const auto& g : groups) {
    if (g && g->size() > 1) g->all_reduce(total, dist::ReduceOp::SUM, {"pipeline clip_grad_norm_"});
  }
  const double norm = std::sqrt(total.item<double>());
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(coef);
    }
  }
  return norm;
}

}  // namespace fsdpp::pipeline
