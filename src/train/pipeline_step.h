#pragma once
// Pipeline parallelism in fsdpp-train (parallelism.pipeline_parallel_degree > 1,
// docs/pipeline.md#fsdpp-train): parallel::parallelize cut the model into stages, each rank
// keeps its own, FSDP-sharded; a step runs the global batch of the step
// (per_device_train_batch_size x gradient_accumulation_steps sequences per dp rank) through its
// pipeline runtime. Private to src/train.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fsdpp/models/generate.h"

namespace fsdpp::train::detail {

struct TrainSession;
struct StepOutcome;

// train_step's branch: the step's batches, the Parallelized's forward_backward (distilling: with
// the distiller's objective for the last stage, Distiller::pipeline_objective), its clipping and
// loss scaler, AdamW. loss_sum and aux_loss_sum are the step's means times
// gradient_accumulation_steps (what train_step sums).
StepOutcome pipeline_train_step(TrainSession& s, int64_t step);
// models::sample_tokens through the stages: the same tokens on every rank.
at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options);

}  // namespace fsdpp::train::detail
