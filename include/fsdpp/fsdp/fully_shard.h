#pragma once
// fully_shard: shard a torch::nn::Module's parameters across ranks.
//
//   auto world = fsdpp::dist::init_from_env();
//   fsdpp::FullyShardOptions opts;
//   opts.mesh = world->mesh();
//   for (auto& block : *model->blocks) fsdpp::fully_shard(*block, opts);   // units, bottom-up
//   fsdpp::fully_shard(*model, opts);                                      // the root
//   torch::optim::AdamW opt(model->parameters(), ...);                      // the local shards
//   auto loss = fsdpp::forward(model, x, y);     // all-gather, compute, reshard
//   loss.backward();                             // all-gather again, reduce-scatter gradients
//   fsdpp::clip_grad_norm_(*model, 1.0);
//   opt.step(); opt.zero_grad();
//
// LibTorch's C++ modules have no forward hooks, so a unit runs through fsdpp::forward(unit,
// args...) instead of unit->forward(args...): in the root's call and inside the parent's
// forward for every sharded child. On a module that is not a unit it is a plain call. Its
// machinery (the unit's hooks around a call, activation checkpointing) is in
// detail/unit_forward.h.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <utility>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/fsdp/clip.h"  // clip_grad_norm_(root, ...), which the example above calls
#include "fsdpp/fsdp/detail/unit_forward.h"
#include "fsdpp/fsdp/mixed_precision.h"
#include "fsdpp/fsdp/prefetch.h"
#include "fsdpp/fsdp/sharded_param.h"

namespace fsdpp {

// ZeRO stages map onto strategies: FULL_SHARD is ZeRO-3, SHARD_GRAD_OP ZeRO-2, ZERO1 ZeRO-1,
// NO_SHARD plain data parallelism (DDP).
enum class ShardingStrategy {
  FULL_SHARD,     // shard params, grads, optimizer state; free params after forward and backward
  SHARD_GRAD_OP,  // the same, but keep params gathered from forward to the end of backward
  ZERO1,          // params gathered once per step and kept; grads and optimizer state sharded
  NO_SHARD,       // replicate everything, all-reduce gradients
  HYBRID_SHARD,   // FULL_SHARD inside the mesh's "shard" dim, replicate across "replicate"
  HYBRID_SHARD_ZERO2,  // SHARD_GRAD_OP inside "shard", replicate across "replicate"
};
const char* to_string(ShardingStrategy s);
ShardingStrategy parse_sharding_strategy(const std::string& name);  // "full_shard", ...

struct FullyShardOptions {
  // The ranks to shard over (required): world->mesh() for 1-D strategies, a 2-D mesh for the
  // HYBRID ones whose dim 0 replicates and dim 1 shards ("replicate" and "shard", or
  // torchtitan's "dp_replicate" and "dp_shard").
  std::shared_ptr<dist::DeviceMesh> mesh;
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  // Gradients are divided by this after the sum over ranks; 0 means the number of data-parallel
  // ranks (an average, as single-process training on the global batch gives).
  double gradient_divide_factor = 0;
  // Broadcast rank 0's parameters and buffers before sharding, for models not initialised
  // identically on every rank.
  bool sync_module_states = false;
  MixedPrecisionPolicy mp_policy;
  OffloadPolicy offload_policy;
  // Prefetch: gather the next units' parameters asynchronously while this one computes. The
  // order is the one recorded in the previous step (the first step runs without prefetch), so
  // it must be the same on every rank, as the collectives themselves must be.
  int forward_prefetch = 0;  // units gathered ahead in forward (0: none)
  BackwardPrefetch backward_prefetch = BackwardPrefetch::BACKWARD_PRE;
  int backward_prefetch_depth = 1;  // units gathered ahead in backward when prefetching
  // Most prefetched all-gathers in flight at once (issued, not yet used); bounds the memory
  // that prefetching adds to about this many units. 0: no limit beyond the depths above.
  int limit_all_gathers = 2;
  // Gradients are reduced in buckets of at least this many elements (consecutive parameters of
  // the unit, from its last), each issued as soon as autograd has computed all of its
  // gradients, instead of in one reduce-scatter once the whole unit's are: the reduction that
  // nothing computes behind at the end of backward (the first unit's) shrinks to its last
  // bucket. DeepSpeed's reduce_bucket_size, inside a unit. 0: one reduction per unit, as FSDP2.
  int64_t reduce_bucket_size = 0;
  // How tensor or expert parallelism already split or replicated each parameter before this
  // call (fsdpp/fsdp/sharded_param.h), e.g. tp::TensorParallel::outer_layout(). FSDP shards
  // what this rank holds either way; the layout lets state dicts and gather_full see the whole
  // tensors. Placements must match the parameter's shape.
  OuterLayoutOf outer_layout;
};

// Makes `module` a unit: its parameters (except those of units already made inside it) become
// this rank's padded dim-0 shards. Call it on inner units first, then on the root.
void fully_shard(torch::nn::Module& module, const FullyShardOptions& options);
template <typename T>
void fully_shard(torch::nn::ModuleHolder<T>& holder, const FullyShardOptions& options) {
  fully_shard(*holder.ptr(), options);
}

// Overrides the strategy's choice of freeing the gathered parameters of the unit `module` was
// made into after its forward (FSDP2's set_reshard_after_forward, for one unit). false keeps
// them to its backward, saving that backward's all-gather for the memory of one gathered unit:
// FSDP2 does so for the root, torchtitan also for the last block, whose backward comes first
// and whose gather nothing would hide. true frees them under SHARD_GRAD_OP too. Strategies
// that do not shard (NO_SHARD) or keep parameters gathered between steps (ZERO1) accept only
// false. Takes effect at the unit's next forward.
void set_reshard_after_forward(torch::nn::Module& module, bool reshard);

// Gradient accumulation without communication: while false, backward keeps unsharded gradients
// and reduces nothing; the next backward with sync on reduces them all at once.
void set_requires_gradient_sync(torch::nn::Module& root, bool sync);

// Explicit control, for callers that run one step's forwards and backwards outside FSDP's own
// rhythm: pipeline stages run several microbatches per step, and zero-bubble schedules split
// backward into an input pass and a weight pass that comes later, after the autograd call that
// FSDP's end-of-backward follows (PyTorch FSDP2's FSDPModule.unshard() / reshard() and the
// pipelining stage's explicit post-backward).
//
// unshard: gathers every unit of `root` now (all gathers issued, then waited) and holds them:
// until reshard(root), forward and backward do not reshard them and their hooks reduce no
// gradients, which accumulate unsharded over any number of passes.
void unshard(torch::nn::Module& root);
// Reduce-scatters (and all-reduces over replicas) the accumulated unsharded gradients of every
// held unit that has any (a unit no backward reached keeps none, as after a plain backward),
// adds them to the sharded gradients the optimizer reads, and waits. Collective over the units'
// groups; the units must be held (unshard(root)).
void reduce_gradients(torch::nn::Module& root);
// Ends the hold: every unit back to its shard, its unsharded storage freed (ZERO1 keeps it).
void reshard(torch::nn::Module& root);

// Runs module.forward(args...) as an FSDP unit: gathers its parameters first, frees them after
// (as the strategy says), and hooks the result so backward gathers them again and
// reduce-scatters their gradients. A module marked by apply_activation_checkpointing keeps no
// activations and recomputes its forward in backward. `module` may be a ModuleHolder, a
// std::shared_ptr<Impl> or the Impl itself. The result may be a tensor, tuples, pairs and
// vectors of them, or a struct with an fsdpp_visit_tensors (detail/unit_forward.h).
template <typename M, typename... Args>
auto forward(M&& module, Args&&... args) {
  return detail::forward_as(detail::as_module(module), detail::impl_of(module), std::forward<Args>(args)...);
}

}  // namespace fsdpp
