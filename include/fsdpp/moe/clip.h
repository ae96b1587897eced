#pragma once
// Global gradient-norm clipping when parameters are split over different groups: expert
// weights over the expert-parallel group (and FSDP's expert shard group), the rest replicated or
// sharded by FSDP over the data-parallel ranks. Each part's sum of squares is summed over the
// groups that split it and counted once; the total is what torch's clip_grad_norm_ gives the
// whole model in one process (an expert counted once, not once per rank that saw its tokens).
//
//   moe::clip_grad_norm_({{dense_params, {fsdp_group}}, {expert_params, {efsdp_group, ep}}}, 1.0);

#include <ATen/Tensor.h>

#include <vector>

#include "fsdpp/moe/all_to_all.h"

namespace fsdpp::moe {

struct GradNormPart {
  std::vector<at::Tensor> params;  // their .grad() (undefined grads are skipped)
  // The groups over which these gradients are disjoint pieces of the whole, summed in turn
  // (null entries and groups of one rank are skipped); empty: every rank holds all of them.
  std::vector<GroupPtr> split_over;
};

// Scales every gradient by max_norm / (total + 1e-6) when that is below 1; returns the total
// 2-norm before clipping. Collective over every group named (one all-reduce of one double per
// group and part).
double clip_grad_norm_(const std::vector<GradNormPart>& parts, double max_norm);

}  // namespace fsdpp::moe
