#pragma once
// Pipeline parallelism's stages in the estimate (private to src/estimate/): the layout
// parallelize builds under a pipeline, the cut of the model into stages, and what each stage
// holds and what one microbatch costs it. pipeline_estimate.h replays them rank by rank.

#include <vector>

#include "decoder_layers.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/parallel/parallel_dims.h"
#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::estimate_detail {

// The mesh parallelize builds: pp outermost, then (dp_replicate x) dp_shard x tp; the experts'
// FSDP over efsdp = dp_shard x tp / ep (replicated over dp_replicate).
struct PipelineLayout {
  const StrategyTraits* traits = nullptr;
  parallel::ParallelDims dims;
  int shard_world = 1, expert_shard_world = 1;  // ranks a stage's dense / expert units shard over
  bool split_experts = true;
  ModelDescription local;  // this rank's slices and expert units, as parallelize cuts them after tp and ep
};
// Checked as parallelize and split_llama check it. ConfigError ("[estimate] pipeline ...").
PipelineLayout pipeline_layout(const ModelDescription& model, const EstimateOptions& o);

// The cut parallelize makes (parallel::cut_pipeline: by layers_per_stage, torchtitan's key, or
// as even as can be over the schedule's stages); --stages-per-rank picks another number of
// stages for the looped schedules.
struct StageCut {
  std::vector<int> units_per_stage;
  pipeline::PipelineSchedule schedule;
};
StageCut cut_stages(const DecoderShape& shape, const EstimateOptions& o);

// One stage: its units (0 the embedding, 1..L the blocks, L+1 the head, as llama_stages.h counts
// them) and what one microbatch costs it.
struct StagePlan {
  int first = 0, count = 0;
  bool embedding = false, head = false;
  int64_t numel = 0, shard = 0, buffers = 0, largest_param = 0, largest_unit_shard = 0;
  int64_t largest_gather = 0;  // elements of the largest unit's all-gather output (its shard world x shard)
  int64_t sparse_layers = 0;   // Qwen3-MoE: the stage's layers whose MLP is the experts
  int64_t gathered = 0;        // elements of the units FSDP gathers (sharded over more than one rank)
  int64_t grad_shards = 0;     // bytes of its gradients after the reduce (fp32 shards, or reduce_dtype replicas)
  int64_t saved = 0;      // a microbatch's tensors from its F to its B (input and output included)
  int64_t fwd_extra = 0;  // above `saved` at the forward's own peak, over what was live before it
  int64_t bwd_extra = 0;  // above `saved` during its backward (received gradient included)
  int64_t wgrad = 0;      // zero-bubble: what I leaves for W beyond `saved` (gradients at the weights' nodes)
};

// Every stage of the cut, its shards laid out by `layout` and one microbatch (sizes `layers`)
// played through it. The unit names of a stage as MemoryEstimate::Stage lists them.
std::vector<StagePlan> plan_stages(const DecoderShape& shape, const EstimateOptions& o, const PipelineLayout& layout,
                                   const std::vector<int>& units_per_stage, const DecoderLayers& layers);
std::vector<std::string> stage_unit_names(const StagePlan& s, int64_t n_units);

}  // namespace fsdpp::estimate_detail
