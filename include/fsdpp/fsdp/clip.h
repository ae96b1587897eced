#pragma once
// Gradient-norm clipping for every layout, in one place: the gradients are split into parts, each
// part's squared norm (or max, for the inf-norm) is summed over the groups whose ranks hold
// disjoint pieces of it, and pieces held alike by several ranks (replicas) count once. The total
// is what torch.nn.utils.clip_grad_norm_ gives the whole model in one process.
//
//   // FSDP's shards over dp_shard; tensor parallelism's slices over tp as well; a norm's weight
//   // that tensor parallelism left whole on every tp rank over dp_shard only; stages over pp.
//   fsdpp::clip_grad_norm_({{split, {dp_shard, tp}}, {whole, {dp_shard}}}, 1.0, 2.0, {pp});
//
//   // A fully_shard-ed model, whatever split it before (tensor or expert parallelism): the
//   // parts read off its placements (fsdpp/fsdp/sharded_param.h).
//   fsdpp::clip_grad_norm_(fsdpp::grad_norm_parts(fsdpp::sharded_params(*model)), 1.0);
//
// fsdpp::clip_grad_norm_(root, ...) of fully_shard.h is the second line. The collectives: one
// all-reduce per distinct group named in the parts, of as many doubles as parts name it, then one
// per `across` group of one double; groups are reduced in the order they first appear in the
// parts, so every rank of a group must pass parts of the same structure (ranks that hold the same
// stage of the same model do). Ranks that hold different parts (pipeline stages) meet only in
// `across`.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "fsdpp/dist/process_group.h"
#include "fsdpp/fsdp/sharded_param.h"

namespace fsdpp {

struct GradNormPart {
  std::vector<at::Tensor> params;  // their .grad() (undefined gradients are skipped)
  // The groups over which these gradients are disjoint pieces of the whole, summed over each in
  // turn (null entries and groups of one rank are skipped); empty: every rank holds them whole.
  std::vector<std::shared_ptr<dist::ProcessGroup>> split_over;
};

// Scales every gradient by max_norm / (total + 1e-6) when that is below 1; returns the total
// norm before clipping. norm_type is 2 or inf (ConfigError otherwise). A parameter that appears
// in several parts (tied weights) counts once, in the first. `across`: groups over which ranks
// hold disjoint sets of parts (the pp group), reduced once, on the total.
double clip_grad_norm_(const std::vector<GradNormPart>& parts, double max_norm,
                       double norm_type = 2.0,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& across = {});

// The parts of sharded parameters: grouped by the groups their placements split them over (in
// placement order), each parameter once; replicas (replicate_group, outer_replicas) split
// nothing and so count once.
std::vector<GradNormPart> grad_norm_parts(const std::vector<ShardedParam>& params);

}  // namespace fsdpp
