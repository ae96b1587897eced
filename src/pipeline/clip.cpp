#include "fsdpp/pipeline/clip.h"

#include <ATen/ATen.h>

#include <cmath>

namespace fsdpp::pipeline {

namespace {

at::Device grad_device(const std::vector<const std::vector<at::Tensor>*>& lists) {
  at::Device device = at::kCPU;  // where the groups communicate: the gradients' device
  for (const auto* l : lists) {
    for (const auto& p : *l) {
      if (p.grad().defined()) device = p.grad().device();
    }
  }
  return device;
}

void add_squares(const std::vector<at::Tensor>& params, at::Tensor total) {
  for (const auto& p : params) {
    if (p.grad().defined()) total += p.grad().to(at::kDouble).square().sum();
  }
}

double scale_to(const std::vector<const std::vector<at::Tensor>*>& lists, double norm,
                double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const auto* l : lists) {
      for (const auto& p : *l) {
        if (p.grad().defined()) p.grad().mul_(coef);
      }
    }
  }
  return norm;
}

}  // namespace

double clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  at::NoGradGuard no_grad;
  auto total = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(grad_device({&params})));
  add_squares(params, total);
  for (const auto& g : groups) {
    if (g && g->size() > 1) g->all_reduce(total, dist::ReduceOp::SUM, {"pipeline clip_grad_norm_"});
  }
  return scale_to({&params}, std::sqrt(total.item<double>()), max_norm);
}

double clip_grad_norm_(const TensorParallelParams& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  at::NoGradGuard no_grad;
  const std::vector<const std::vector<at::Tensor>*> lists{&params.split, &params.replicated};
  // [split, replicated]: both summed over the stages (and FSDP shards), the split part over tp.
  auto sums = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(grad_device(lists)));
  add_squares(params.split, sums[0]);
  add_squares(params.replicated, sums[1]);
  for (const auto& g : groups) {
    if (g && g->size() > 1) g->all_reduce(sums, dist::ReduceOp::SUM, {"pipeline clip_grad_norm_"});
  }
  if (params.tp && params.tp->size() > 1) {
    auto split = sums.narrow(0, 0, 1).contiguous();
    params.tp->all_reduce(split, dist::ReduceOp::SUM, {"pipeline clip_grad_norm_ (tp)"});
    sums[0].copy_(split[0]);
  }
  return scale_to(lists, std::sqrt(sums.sum().item<double>()), max_norm);
}

}  // namespace fsdpp::pipeline
