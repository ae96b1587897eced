#pragma once
// Pipeline parallelism in the estimate (private to src/estimate/): estimate_memory hands a run
// with pipeline.degree > 1 to estimate_pipeline. docs/estimate.md#pipeline-parallelism.

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp::estimate_detail {

// Every pp rank's peak: its stages' shards, gathered parameters and unsharded gradients (kept
// for the whole step, as the pipeline runtime keeps FSDP stages), and the activations of the
// microbatches it holds, replayed action by action from the schedule's own lists (a microbatch's
// saved tensors from its F to its B, or to its W after an I; the recv buffers posted at the
// step's start; the backward's own temporaries at each B or I). Returns the most loaded rank's
// (or options.pipeline.stage's) estimate with every stage in `stages`.
MemoryEstimate estimate_pipeline(const ModelDescription& model, const EstimateOptions& options);

}  // namespace fsdpp::estimate_detail
