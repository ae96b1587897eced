#pragma once
// One call per system, over fully_shard and its policies: FSDP (wrap), DDP (ddp) and ZeRO stages
// by number (zero_stage), as AiDotNet's FSDP<float>.Wrap(model, config) / DDP.Wrap(model) and
// Accelerate's FSDP plugin offer them.
//
//   auto world = fsdpp::dist::init_from_env();
//   auto made = fsdpp::fsdp::wrap(*model, {.mesh = world->mesh(),
//                                          .layer_classes = {"Block"},       // or "BlockImpl"
//                                          .mixed_precision = fsdpp::fsdp::bf16(),
//                                          .checkpoint_every = 2});
//   std::cout << made.describe() << "\n";  // "FULL_SHARD over 2 ranks: 4 Block units + the root..."
//   torch::optim::AdamW opt(model->parameters(), 1e-3);   // after wrap: the local shards
//   auto y = fsdpp::forward(model, x);                    // the root runs through fsdpp::forward
//
//   fsdpp::ddp(*model, world->mesh());                     // DDP: replicas, bucketed all-reduce
//   fsdpp::fsdp::wrap(*model, {.mesh = world->mesh(), .strategy = fsdpp::fsdp::zero_stage(2)});
//
// Everything here is fully_shard (fully_shard.h) with its options chosen: the units are the
// modules of `layer_classes` (transformer_layer_policy, or size_based_policy with
// min_num_params), bottom-up, then the root; activation checkpointing marks every k-th of them
// first. A model's own forward must call those modules through fsdpp::forward(block, ...), as
// for fully_shard by hand.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/mixed_precision.h"

namespace fsdpp::fsdp {

struct WrapOptions {
  // The ranks to shard over (required): world->mesh(); for the HYBRID strategies a 2-D mesh
  // with dims "replicate" and "shard" (world->init_device_mesh({nodes, ranks_per_node}, ...)).
  std::shared_ptr<dist::DeviceMesh> mesh;
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;  // or zero_stage(1..3)
  // The classes whose modules become units, as the model's code names them ("Block" or
  // "BlockImpl"; fsdpp::module_class_is). Empty: the whole model is one unit (the root).
  std::vector<std::string> layer_classes;
  // > 0: only modules of layer_classes holding at least this many parameter elements not in a
  // unit below them become units (FSDP's size_based_auto_wrap_policy).
  int64_t min_num_params = 0;
  // Gathered parameters, compute and the gradient reduction in these dtypes (bf16() below).
  // output_dtype applies to the root only, so that the model's output (the logits) comes back
  // in it while the blocks hand each other param_dtype: one dtype inside the model.
  MixedPrecisionPolicy mixed_precision;
  // Activation checkpointing of every k-th module of layer_classes (1: all; 0: none).
  int checkpoint_every = 0;
  OffloadPolicy offload;
  int forward_prefetch = 0;  // units gathered ahead in forward (FullyShardOptions)
  BackwardPrefetch backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  int64_t reduce_bucket_size = 0;  // gradient elements per reduce bucket inside a unit; 0: one
  // Keep the root and the last unit gathered from forward to backward (keep_ends_gathered).
  bool keep_ends_gathered = false;
  bool sync_module_states = false;  // rank 0's values first, for models not seeded alike
};

// bf16 parameters and compute, float32 gradient reduction and float32 outputs from the root:
// what FSDP users mean by "mixed precision".
MixedPrecisionPolicy bf16();

// What wrap made.
struct Wrapped {
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  int ranks = 1;                           // over which the model is sharded or replicated
  std::vector<std::string> units;          // module paths, bottom-up; the root last, as ""
  std::vector<std::string> checkpointed;   // module paths marked for activation checkpointing
  int64_t params = 0;                      // parameter elements of the whole model
  int64_t params_held = 0;                 // of them, held by this rank between steps
  // "FULL_SHARD over 2 ranks: 4 units (Block) and the root, 2 checkpointed; 1.20 M parameters,
  // 0.60 M held per rank"
  std::string describe() const;
};

// Shards `model` (its root and the units chosen) in one call. ConfigError naming what is wrong
// and what is accepted: no mesh, a class that no module of the model has (listing those it
// has), checkpoint_every < 0, a HYBRID strategy on a 1-D mesh.
Wrapped wrap(torch::nn::Module& model, const WrapOptions& options);
template <typename T>
Wrapped wrap(torch::nn::ModuleHolder<T>& model, const WrapOptions& options) {
  return wrap(*model.ptr(), options);
}

// ZeRO stages by number: 1 ZERO1 (optimizer state sharded), 2 SHARD_GRAD_OP (+ gradients), 3
// FULL_SHARD (+ parameters); 0 NO_SHARD (plain data parallelism). ConfigError otherwise.
ShardingStrategy zero_stage(int stage);

}  // namespace fsdpp::fsdp

namespace fsdpp {

struct DdpOptions {
  // Gradients are all-reduced in buckets of about this many megabytes (of the gradients'
  // dtype), each as soon as autograd has computed all of its gradients: PyTorch DDP's
  // bucket_cap_mb. 0: one all-reduce after backward.
  double bucket_cap_mb = 25;
  MixedPrecisionPolicy mixed_precision;  // as fsdp::WrapOptions::mixed_precision
  bool sync_module_states = false;             // DDP broadcasts rank 0's values: set it when
                                               // the ranks are not seeded alike
};

// Distributed data parallelism (PyTorch's DDP, AiDotNet's DDP.Wrap): every rank holds the whole
// model and its optimizer state, takes its own batches, and backward all-reduces the gradients
// to their mean over the ranks of `mesh`, so the step equals one process's on the global batch.
// It is fully_shard's NO_SHARD strategy on the root with gradient buckets; the root runs
// through fsdpp::forward(model, ...).
fsdp::Wrapped ddp(torch::nn::Module& model, std::shared_ptr<dist::DeviceMesh> mesh,
                  const DdpOptions& options = {});
template <typename T>
fsdp::Wrapped ddp(torch::nn::ModuleHolder<T>& model, std::shared_ptr<dist::DeviceMesh> mesh,
                  const DdpOptions& options = {}) {
  return ddp(*model.ptr(), std::move(mesh), options);
}

}  // namespace fsdpp
