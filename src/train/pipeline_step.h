#pragma once
// Pipeline parallelism in fsdpp-train (parallelism.pipeline_parallel_degree > 1,
// docs/pipeline.md#fsdpp-train): every rank builds the whole Llama from the seed, keeps its
// stages (models::split_llama), fully_shards each stage's units over the dp_shard dim of a
// (pp, dp_shard) mesh, and a step runs the global batch of the step (per_device_train_batch_size
// x gradient_accumulation_steps sequences per dp rank) through pipeline::PipelineRuntime.
// Private to src/train.

#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/models/generate.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/pipeline/runtime.h"
#include "fsdpp/train/parallel_dims.h"

namespace fsdpp::train::detail {

struct TrainSession;
struct StepOutcome;

struct PipelineParts {
  PipelinePlan plan;
  std::shared_ptr<dist::DeviceMesh> mesh;  // ("pp", "dp_shard")
  std::vector<models::LlamaStage> stages;  // this rank's, in stage order
  std::unique_ptr<pipeline::PipelineRuntime> runtime;
  // The stages as the modules a checkpoint is saved from and loaded into (state::*_state_dict's
  // parts), and the parameters the optimizer steps.
  std::vector<torch::nn::Module*> roots() const;
};

// The stages' collectives on the dp_shard group and their messages on the pp group, summed.
dist::CommCounters pipeline_comm_counters(const PipelineParts& parts);
// shard_model's branch for pp > 1: the mesh, the stages, fully_shard, the runtime (s.pipeline).
void shard_pipeline(TrainSession& s);
// train_step's branch: the step's batches, PipelineRuntime::step, clipping over pp x dp_shard,
// AdamW. loss_sum is the step's loss times gradient_accumulation_steps (what train_step sums).
StepOutcome pipeline_train_step(TrainSession& s, int64_t step);
// Forward only, stage by stage: the mean loss of (x, y) on every rank of the pp group.
double pipeline_eval_loss(TrainSession& s, const at::Tensor& x, const at::Tensor& y);
// models::sample_tokens through the stages: the same tokens on every rank.
at::Tensor pipeline_generate(TrainSession& s, const at::Tensor& prompt,
                             const models::GenerateOptions& options);

}  // namespace fsdpp::train::detail
