#pragma once
// Gradient-norm clipping for every layout, in one function whose behaviour the parameters'
// placements decide, as torch.nn.utils.clip_grad_norm_ over DTensors: each parameter's local
// gradient is a piece of the whole, its squared norm (or max, for the inf-norm) summed over
// exactly the groups its placements split it over; copies held alike by several ranks (the
// replicas of HYBRID_SHARD, a norm's weight on every tp rank) count once; ranks that hold
// different parameters (pipeline stages) are summed over `across`. The total is what
// torch.nn.utils.clip_grad_norm_ gives the whole model in one process.
//
//   // A fully_shard-ed model, whatever split it before (tensor or expert parallelism given as
//   // FullyShardOptions::outer_layout): the placements read off its units.
//   fsdpp::clip_grad_norm_(*model, 1.0);
//
//   // A model tensor parallelism split without fully_shard: the plan's placements.
//   fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tp.outer_layout(*model)), 1.0);
//
//   // Pipeline stages (sharded or not) on the pp group: this rank's stages, summed across pp.
//   fsdpp::clip_grad_norm_(rt.placed_params(), 1.0, 2.0, {pp});
//
// The collectives: one all-reduce per distinct group the placements name, of one double per
// part of the parameters it splits (parameters are grouped by the groups that split them, in
// placement order), then one per `across` group of one double; groups are reduced in the order
// they first appear, so every rank of a group must pass parameters of the same structure (ranks
// that hold the same stage of the same model do). Ranks that hold different parameters
// (pipeline stages) meet only in `across`.

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "fsdpp/dist/process_group.h"
#include "fsdpp/fsdp/sharded_param.h"

namespace fsdpp {

// Scales every gradient by max_norm / (total + 1e-6) when that is below 1; returns the total
// norm before clipping. norm_type is 2 or inf (ConfigError otherwise). Undefined gradients are
// skipped; a parameter given twice (tied weights) counts once, the first time. `across`: groups
// over which ranks hold disjoint sets of parameters (the pp group), reduced once, on the total.
double clip_grad_norm_(const std::vector<ShardedParam>& params, double max_norm,
                       double norm_type = 2.0,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& across = {});

// The same for a fully_shard-ed module: clip_grad_norm_(sharded_params(root), ...).
double clip_grad_norm_(torch::nn::Module& root, double max_norm, double norm_type = 2.0);

}  // namespace fsdpp
