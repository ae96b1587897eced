#include "fsdpp/tp/linear.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include "fsdpp/common/error.h"

namespace fsdpp::tp {

ShardRange checked_shard(const std::string& what, const std::string& dim, int64_t size,
                         const GroupPtr& group) {
  FSDPP_CHECK_AS(ConfigError, group != nullptr, "[tp] {}: no tensor-parallel group", what);
  FSDPP_CHECK_AS(ConfigError, size >= group->size(),
                 "[tp] {}: {}={} is smaller than the tensor-parallel degree {}; every rank needs "
                 "at least one",
                 what, dim, size, group->size());
  return shard_range(size, group->size(), group->rank());
}

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const GroupPtr& group,
                                  bool sequence_parallel, const std::string& what) {
  auto in = sequence_parallel ? gather_from_sequence(x, group, 1, what)
                              : copy_to_region(x, group, what);
  return at::linear(in, weight, bias);
}

at::Tensor row_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, const GroupPtr& group,
                               bool sequence_parallel, const std::string& what) {
  auto partial = at::linear(x, weight);  // (..., out): this rank's share of the sum
  auto y = sequence_parallel ? scatter_to_sequence(partial, group, 1, what)
                             : reduce_from_region(partial, group, what);
  if (!bias.defined()) return y;
  // Under sequence parallelism each rank adds the bias to its own positions only, so its
  // gradient is a partial sum: copy_to_region sums it over the group in backward.
  return y + (sequence_parallel ? copy_to_region(bias, group, what) : bias);
}

// ---- ColumnParallelLinear ----

ColumnParallelLinearImpl::ColumnParallelLinearImpl(ParallelLinearOptions options)
    : options(std::move(options)) {
  reset();
}

void ColumnParallelLinearImpl::reset() {
  rows = checked_shard(options.name, "out_features", options.out_features, options.group);
  // Kaiming-uniform as torch::nn::Linear; load_full gives the exact whole-model values.
  weight = register_parameter("weight", torch::empty({rows.size, options.in_features}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias) bias = register_parameter("bias", torch::zeros({rows.size}));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  return column_parallel_linear(x, weight, bias, options.group, options.sequence_parallel,
                                options.name);
}

void ColumnParallelLinearImpl::load_full(const at::Tensor& w, const at::Tensor& b) {
  FSDPP_CHECK_AS(ConfigError,
                 w.dim() == 2 && w.size(0) == options.out_features &&
                     w.size(1) == options.in_features,
                 "[tp] {}: load_full got a weight of shape {}; expected ({}, {})", options.name,
                 w.sizes(), options.out_features, options.in_features);
  torch::NoGradGuard no_grad;
  weight.copy_(w.narrow(0, rows.offset, rows.size));
  if (bias.defined() && b.defined()) bias.copy_(b.narrow(0, rows.offset, rows.size));
}

// ---- RowParallelLinear ----

RowParallelLinearImpl::RowParallelLinearImpl(ParallelLinearOptions options)
    : options(std::move(options)) {
  reset();
}

void RowParallelLinearImpl::reset() {
  cols = checked_shard(options.name, "in_features", options.in_features, options.group);
  weight = register_parameter("weight", torch::empty({options.out_features, cols.size}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias) bias = register_parameter("bias", torch::zeros({options.out_features}));
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  return row_parallel_linear(x, weight, bias, options.group, options.sequence_parallel,
                             options.name);
}

void RowParallelLinearImpl::load_full(const at::Tensor& w, const at::Tensor& b) {
  FSDPP_CHECK_AS(ConfigError,
                 w.dim() == 2 && w.size(0) == options.out_features &&
                     w.size(1) == options.in_features,
                 "[tp] {}: load_full got a weight of shape {}; expected ({}, {})", options.name,
                 w.sizes(), options.out_features, options.in_features);
  torch::NoGradGuard no_grad;
  weight.copy_(w.narrow(1, cols.offset, cols.size));
  if (bias.defined() && b.defined()) bias.copy_(b);
}

}  // namespace fsdpp::tp
