#pragma once
// Column- and row-parallel linears (Megatron-LM, PyTorch's ColwiseParallel / RowwiseParallel).
//
//   tp::ColumnParallelLinear up(tp::ParallelLinearOptions(dim, hidden, group));
//   tp::RowParallelLinear down(tp::ParallelLinearOptions(hidden, dim, group));
//   auto y = down(at::silu(up(x)));   // x, y replicated (B,T,C); the hidden (B,T,H/N) stays local
//   up->load_full(full_up_weight);    // this rank's rows of a weight built whole (same init)
//
// Column-parallel holds out_features / N rows of the weight (and bias): its input is copied
// into the region (backward all-reduces the input gradient), its output is this rank's columns
// of y. Row-parallel holds in_features / N columns: it multiplies this rank's input columns,
// then all-reduces the partial sums, or, under sequence parallelism, reduce-scatters them along
// the sequence (dim 1); its bias is replicated and added after the reduction. Under sequence
// parallelism the column-parallel input is a sequence shard that is all-gathered first.
//
// Uneven shards work: features that do not divide by N go one more to the first ranks
// (tp::shard_range), and neither layer gathers the split dimension, so a column-parallel
// layer followed by a row-parallel one is exact for any size >= N. Fewer features than ranks is
// a ConfigError naming the dimension, its size and the degree.

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "fsdpp/tp/regions.h"

namespace fsdpp::tp {

struct ParallelLinearOptions {
  ParallelLinearOptions(int64_t in_features, int64_t out_features, GroupPtr group)
      : in_features(in_features), out_features(out_features), group(std::move(group)) {}
  int64_t in_features;
  int64_t out_features;
  GroupPtr group;
  bool bias = false;
  bool sequence_parallel = false;  // activations outside the layer are split along dim 1
  std::string name = "linear";     // for messages and collective tags
};

// Functional forms, used by the modules and by plans that keep a model's own Linear modules.
// x (..., in) replicated (or (B, T/N, in) under sequence parallelism) -> (..., out_r).
at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const GroupPtr& group,
                                  bool sequence_parallel, const std::string& what);
// x (..., in_r) -> (..., out) replicated (or (B, T/N, out) under sequence parallelism).
at::Tensor row_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, const GroupPtr& group,
                               bool sequence_parallel, const std::string& what);

class ColumnParallelLinearImpl : public torch::nn::Cloneable<ColumnParallelLinearImpl> {
 public:
  explicit ColumnParallelLinearImpl(ParallelLinearOptions options);
  void reset() override;
  at::Tensor forward(const at::Tensor& x);
  // Copies this rank's rows of a full (out, in) weight and (out) bias.
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  ParallelLinearOptions options;
  ShardRange rows;     // this rank's output features
  at::Tensor weight;   // (out_r, in)
  at::Tensor bias;     // (out_r) or undefined
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Cloneable<RowParallelLinearImpl> {
 public:
  explicit RowParallelLinearImpl(ParallelLinearOptions options);
  void reset() override;
  at::Tensor forward(const at::Tensor& x);
  // Copies this rank's columns of a full (out, in) weight, and the whole (out) bias.
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  ParallelLinearOptions options;
  ShardRange cols;     // this rank's input features
  at::Tensor weight;   // (out, in_r)
  at::Tensor bias;     // (out) replicated, or undefined
};
TORCH_MODULE(RowParallelLinear);

// The ConfigError for a dimension too small to split: "[tp] <what>: <dim>=<size> is smaller
// than the tensor-parallel degree <N>; every rank needs at least one".
ShardRange checked_shard(const std::string& what, const std::string& dim, int64_t size,
                         const GroupPtr& group);

}  // namespace fsdpp::tp
