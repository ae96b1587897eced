#pragma once
// A model known by its plan (models::ModelPlan: train()'s custom models, a
// parallel::sequential_plan) as one rank holds it under parallel::parallelize's layout, for
// estimate_memory: the model has no shape to derive a Llama's slices and stages from, so its
// description is read off the plan and the module themselves, the way parallelize composes them:
//
//   auto d = fsdpp::describe_plan_rank(*plan, policy, {.dims = dims.resolved(8), .rank = 5});
//   auto e = fsdpp::estimate_memory(d, fsdpp::plan_rank_options(options, dims));
//
// The pipeline's cut (parallel::cut_pipeline over the plan's units, the schedule's stages of this
// rank's pp coordinate), each stage's FSDP units under `policy` (plan_units, as
// apply_fully_shard makes them), each parameter this rank's tensor-parallel slice where the plan
// splits it (ModelPlan::tensor_parallel_splits, tp::shard_range of its tp coordinate). FSDP then
// shards every unit over the data-parallel ranks (plan_rank_options), so the estimate's held
// state is the rank's exactly. No activations (the model has no shape); a pipeline's parameters
// gathered for its whole step are not modelled either (fsdpp's own models' are: pipeline_estimate).
#include <string>

#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/parallel/parallel_dims.h"

namespace fsdpp::models {
class ModelPlan;
}

namespace fsdpp {

struct PlanLayout {
  parallel::ParallelDims dims;  // resolved (ParallelDims::resolved)
  int rank = 0;                 // in the world the dims span
  std::string schedule = "1F1B";  // the pipeline's (dims.pp > 1), as parallelize's options
  int microbatches = 1;
  int layers_per_stage = 0;
};

// The units of `rank`'s stages (the whole module without a pipeline), each stage's root first.
// ConfigError when dims.tp > 1 and the plan does not say what it splits, or for a cut that does
// not fit (cut_pipeline's).
ModelDescription describe_plan_rank(models::ModelPlan& plan, const WrapPolicy& policy, const PlanLayout& layout);

// `options` for that description: FSDP over the data-parallel ranks alone (dims.dp(), in shard
// groups of dims.dp_shard under the HYBRID strategies); the tensor-parallel and pipeline degrees
// are in the description already.
EstimateOptions plan_rank_options(EstimateOptions options, const parallel::ParallelDims& dims);

}  // namespace fsdpp
