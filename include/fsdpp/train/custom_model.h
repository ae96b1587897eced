#pragma once
// The trainer for any model: your module, your loss, your data, and everything fsdpp-train gives
// its own models: data-parallel sharding from the config (training.fsdp: full_shard,
// shard_grad_op, no_shard, hybrid_shard, ...), mixed precision, activation checkpointing of
// your blocks, AdamW with the configured schedule, gradient accumulation and clipping,
// evaluation, checkpoints and exact resume, metrics.jsonl, TensorBoard, traces, the stop signal
// and the heartbeat (docs/custom-models.md).
//
//   fsdpp::train::CustomModel model;
//   model.name = "mlp";
//   model.make = [] { return std::make_shared<MlpImpl>(); };      // the same on every rank
//   model.blocks = {"ResidualBlock"};                               // units, checkpointing
//   model.loss = [](torch::nn::Module& m, const fsdpp::train::Batch& b) {
//     auto& mlp = static_cast<MlpImpl&>(m);
//     return torch::mse_loss(fsdpp::forward(mlp, b.inputs), b.targets);
//   };
//   auto result = fsdpp::train::train(cfg, world, model, fsdpp::train::tensor_data(x, y));
//
// Tensor and pipeline parallelism (parallelism.tensor_parallel_degree, pipeline_parallel_degree)
// need a plan of the model's layers (models::ModelPlan), as fsdpp-train's Llama and Qwen3-MoE
// have: CustomModel::plan. A chain of units (a torch::nn::Sequential) has one ready,
// parallel::sequential_plan: the pipeline cut by ranges of its units, Linear units split COLWISE
// / ROWWISE. The module and its plan go through the same parallel::parallelize as fsdpp-train's
// models (docs/parallelize.md):
//
//   auto model = fsdpp::train::sequential_model(
//       [] { return torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::GELU(), ...); },
//       {.name = "mlp", .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); },
//        .tensor_parallel = {{"2", fsdpp::tp::ParallelStyle::COLWISE}, {"4", fsdpp::tp::ParallelStyle::ROWWISE}}});
//
// Without a plan a custom model trains data parallel only, and train() refuses those degrees
// with a ConfigError naming the key; expert parallelism needs experts, which a custom plan does
// not place; the keys about fsdpp-train's language models (model.init_from, distillation.*) are
// refused too.

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/dist/world.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/parallel/sequential_plan.h"
#include "fsdpp/train/batch_source.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/hooks.h"
#include "fsdpp/train/trainer.h"

namespace fsdpp::train {

struct CustomModel {
  std::string name = "custom";  // for the log and the checkpoints' model_config.json
  // Makes the module on the CPU. Called once per rank after torch::manual_seed(training.seed), so
  // that every rank draws the same initial weights (fsdp_sync_module_states also gives every
  // rank rank 0's). The trainer shards it in place.
  std::function<std::shared_ptr<torch::nn::Module>()> make;
  // The loss of one accumulation batch, a scalar: the mean over the batch's examples, so that the
  // ranks' average is the global batch's mean. Must run the module through fsdpp::forward (its
  // children that are units too, inside its forward), as any sharded module.
  std::function<at::Tensor(torch::nn::Module& module, const Batch& batch)> loss;
  // Class names of the module's repeated blocks (as module_class_name gives them): each
  // becomes an FSDP unit and, with training.gradient_checkpointing, a checkpointed block.
  // They replace fsdp_transformer_layer_cls_to_wrap when the config leaves it at its default
  // (fsdpp-train's TransformerBlock). Empty: give fsdp_auto_wrap_policy (NO_WRAP: the root unit
  // alone; SIZE_BASED_WRAP) or name the classes in the config.
  std::vector<std::string> blocks;
  // Optional: the plan of the module's layers, for tensor and pipeline parallelism. Called once
  // with the module make() returned, before anything is sharded. With a plan, the loss is the
  // plan's (ModelPlan::loss, and on a pipeline's last stage its stage loss): leave `loss` unset.
  std::function<std::shared_ptr<models::ModelPlan>(std::shared_ptr<torch::nn::Module> module)> plan;
};

// A chain of units: `make` builds the torch::nn::Sequential (on every rank, as
// CustomModel::make), and the plan is parallel::sequential_plan's with `options` (name, loss of
// the chain's output, tensor-parallel styles, block classes).
CustomModel sequential_model(std::function<torch::nn::Sequential()> make,
                             parallel::SequentialPlanOptions options);

// fsdpp-train's config (TrainConfig::from_yaml_string: YAML text, then "key=value" overrides in
// order, validated) for train(), which reads no data.path: none is needed.
TrainConfig custom_config(const std::string& yaml, const std::vector<std::string>& overrides = {});

// Trains `model` on `data` as fsdpp-train trains its models; every rank calls it. The config is
// fsdpp-train's (training:, parallelism:'s data-parallel degrees); the model: and data: sections
// are not read, and training.sample_tokens (a language model's sample) is ignored. Throws
// ConfigError for what a custom model cannot have (see above) before anything runs.
TrainResult train(TrainConfig config, std::shared_ptr<dist::World> world, CustomModel model,
                  TrainData data, TrainerHooks hooks = {});

}  // namespace fsdpp::train
