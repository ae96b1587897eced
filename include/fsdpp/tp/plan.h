#pragma once
// A tensor-parallel plan applied to a module by names, as PyTorch's parallelize_module:
//
//   using tp::ParallelStyle;
//   auto tp = tp::parallelize_module(*model, group, {{"attention.wq", ParallelStyle::COLWISE},
//                                                    {"attention.wo", ParallelStyle::ROWWISE}});
//   tp.placement("attention.wq.weight");   // Shard(0), rows [offset, offset + size) of 64
//   // Each parameter counted once across the group (fsdpp/fsdp/clip.h):
//   fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tp.outer_layout(*model)), 1.0);
//
// Each named submodule (a torch::nn::Linear or Embedding) keeps its place in the model; its
// parameters are replaced, in place, by this rank's slice of the values they hold, so a model
// built whole from its seed and then parallelized starts exactly where the single-process
// model does. LibTorch's modules have no forward hooks, so the plan cannot reroute the model's
// own calls: the forward must call the communication (tp::column_parallel_linear, ...,
// or a model hook such as the Llama plan's, models/llama_tp_plan.h). The returned TensorParallel
// records every parameter's placement for clipping, gathering and checkpoints.
//
// Styles (the dimension of the weight that is split):
//   COLWISE  Linear: output features (weight dim 0, bias dim 0).
//   ROWWISE  Linear: input features (weight dim 1; the bias stays whole).
//            Embedding: the vocabulary (weight dim 0), for tp::vocab_parallel_embedding.
// Sizes that do not divide by the degree are split unevenly (tp::shard_range); fewer rows than
// ranks, an unknown name, or a module that is neither Linear nor Embedding is a ConfigError.

#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/tp/regions.h"

namespace fsdpp::tp {

enum class ParallelStyle { COLWISE, ROWWISE };
const char* to_string(ParallelStyle style);

using ParallelPlan = std::map<std::string, ParallelStyle>;

// How one parameter lies across the tensor-parallel group.
struct Placement {
  bool sharded = false;   // false: every rank holds the whole (replicated) tensor
  int64_t dim = 0;        // the split dimension
  int64_t full_size = 0;  // its size in the whole tensor
  ShardRange range;       // this rank's part of it
};

class TensorParallel {
 public:
  TensorParallel() = default;
  TensorParallel(GroupPtr group, std::map<std::string, Placement> placements)
      : group_(std::move(group)), placements_(std::move(placements)) {}
  const GroupPtr& group() const { return group_; }
  // Parameters not in the plan are replicated.
  Placement placement(const std::string& param_name) const;
  const std::map<std::string, Placement>& sharded() const { return placements_; }

  // The layout of root's parameters for FullyShardOptions::outer_layout: split ones placed
  // along `mesh_dim` of the group, the rest replicated over it. Then state dicts, gather_full
  // and sharded_params of a TP x FSDP model see whole tensors, and a checkpoint loads into any
  // other layout. `root` is the module the plan was applied to; call it after
  // parallelize_module and before fully_shard.
  OuterLayoutOf outer_layout(const torch::nn::Module& root, const std::string& mesh_dim = "tp") const;

 private:
  GroupPtr group_;
  std::map<std::string, Placement> placements_;  // sharded parameters only
};

TensorParallel parallelize_module(torch::nn::Module& root, const GroupPtr& group,
                                  const ParallelPlan& plan);

// The whole tensor from every rank's slice (an all-gather over the group; uneven slices are
// padded to the largest and cut back). Replicated tensors are returned as they are.
at::Tensor full_tensor(const at::Tensor& local, const Placement& placement, const GroupPtr& group);
// Every parameter of `root`, whole, by name.
std::map<std::string, at::Tensor> full_parameters(const torch::nn::Module& root,
                                                  const TensorParallel& tp);

// The reverse: copies into every parameter of `root` its slice of the whole tensor of the same
// name (bit for bit), so whole parameters saved from any layout (one process, TP 2, TP 4, or a
// TP x FSDP run gathered over both dims) load into this one. Every parameter must be in `full`
// with its whole shape; extra entries are an error too. Not for parameters FSDP has sharded.
void load_full_parameters(torch::nn::Module& root, const TensorParallel& tp,
                          const std::map<std::string, at::Tensor>& full);

}  // namespace fsdpp::tp
