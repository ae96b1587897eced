#pragma once
// Clipping the gradients of a pipelined model by their global norm: the parts of
// fsdpp::clip_grad_norm_ (fsdpp/fsdp/clip.h), which fsdpp::parallel reads off its record.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::pipeline {

// Global gradient-norm clipping for a pipeline: the norm over every stage's gradients, each
// parameter counted once. `params` are this rank's (its stages', sharded or not) and `groups`
// the groups over which they are disjoint pieces of the model: the pp group, and the FSDP shard
// group when stages are sharded (not a group whose ranks hold replicas). Returns the total norm.
double clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups);

// With tensor parallelism inside the stages: the parameters tensor parallelism split over `tp`
// (each of its ranks holds another piece) and those it left whole on every rank of `tp`
// (norms, replicated copies), which count once. `groups` as above (pp, and FSDP's shard group),
// not `tp`.
struct TensorParallelParams {
  std::vector<at::Tensor> split, replicated;
  std::shared_ptr<dist::ProcessGroup> tp;
};
double clip_grad_norm_(const TensorParallelParams& params, double max_norm,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups);

}  // namespace fsdpp::pipeline
