#pragma once
// Pipeline parallelism in fsdpp-train (parallelism.pipeline_parallel_degree > 1,
// docs/pipeline.md#fsdpp-train): parallel::parallelize cut the model into stages, each rank
// keeps its own, FSDP-sharded; train_step (phases.h) runs the global batch of the step
// (per_device_train_batch_size x gradient_accumulation_steps sequences per dp rank) through its
// pipeline runtime, and on-policy distillation samples through the stages here. Private to
// src/train.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fsdpp/models/generate.h"

namespace fsdpp::train::detail {

struct TrainSession;

// models::sample_tokens through the stages: the same tokens on every rank.
at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options);

}  // namespace fsdpp::train::detail
