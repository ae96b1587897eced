#pragma once
// What a model tells fsdpp::parallel::parallelize (fsdpp/parallel/parallelize.h): its plan. The
// composition (which parallelism first, over which mesh, FSDP's units and options, the record
// that clipping and checkpoints read) is parallelize's, once for every model; a model supplies
// only what only it knows: how to cut itself into pipeline stages, its tensor-parallel plan, its
// experts, and the class of its blocks. A third model needs a plan, not a new path.
//
//   auto plan = models::plan_of(models::Qwen3Moe(cfg));
//   auto p = parallel::parallelize(plan, world, dims, options);

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/token_loss.h"
#include "fsdpp/moe/all_to_all.h"
#include "fsdpp/tp/plan.h"

namespace fsdpp::models {

// A microbatch's training loss on the last stage: what backward starts from, and the model's
// load-balancing loss in it (MoE, unscaled; undefined for dense models).
struct StageLoss {
  at::Tensor loss;
  at::Tensor aux_loss;
};

// One pipeline stage: a module sharing the model's, its forward from one tensor to one tensor
// (through fsdpp::forward, so that a fully_shard-ed stage gathers), and on the last stage the
// training loss of a microbatch's output: `token_loss` (empty: the cross entropy) plus the
// model's own terms, as the whole model's forward(tokens, targets) adds them.
struct ModelStage {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  // A language model's stages: the forward with the microbatch's token positions (B,T) int64,
  // which every stage is given (document masking; undefined: forward). Unset for other models.
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& positions)> forward_positions;
  std::function<StageLoss(const at::Tensor& output, const at::Tensor& targets,
                          const TokenLoss& token_loss)>
      loss;  // last stage only
};

struct TensorParallelSpec {
  tp::GroupPtr group;
  bool sequence_parallel = false;
  // Models with experts: split each expert over the group (true), or keep experts whole and let
  // each rank route its own tokens (false; required with expert parallelism).
  bool split_experts = true;
};

struct ExpertParallelSpec {
  moe::GroupPtr ep;     // the ranks that split the experts (size 1: every expert here)
  moe::GroupPtr batch;  // the data-parallel ranks whose batches make the global batch
};

class ModelPlan {
 public:
  virtual ~ModelPlan() = default;

  virtual torch::nn::Module& module() = 0;  // the whole model
  virtual std::string name() const = 0;     // "Llama", "Qwen3-MoE": for messages
  // A language model as fsdpp-train drives it (forward with its loss, sampling, config); null for
  // a model that is not one (sequential_plan.h, train()'s custom models), which has its loss.
  virtual CausalLM* causal_lm() { return nullptr; }
  // The whole (not pipelined) model's training loss of a batch: a scalar, the mean over its rows,
  // through fsdpp::forward, and the load-balancing loss in it (models with experts). Default:
  // the language model's (MoE: with its load-balancing term).
  virtual StageLoss loss(const at::Tensor& inputs, const at::Tensor& targets);

  // Pipeline: how many units it cuts into (the embedding, every block, the head), and the cut
  // itself, after tensor and expert parallelism were applied to the whole model.
  virtual int64_t pipeline_units() const = 0;
  // What those units are, for the messages of a cut that does not fit: "the embedding, 4 blocks
  // and the head", "the children of sequential_plan 'mlp'".
  virtual std::string describe_pipeline_units() const = 0;
  virtual std::vector<ModelStage> split(const std::vector<int>& units_per_stage) = 0;

  // The blocks' class names: what activation checkpointing marks and FSDP makes units.
  virtual std::vector<std::string> block_classes() const = 0;

  // Tensor parallelism on the whole model: the parameters it split (their placements along the
  // group), the rest replicated over it. ConfigError when the model's shape does not divide.
  virtual tp::TensorParallel apply_tensor_parallel(const TensorParallelSpec& spec) = 0;
  // What apply_tensor_parallel would split, read without a group or a change: each parameter's
  // name under module() and the dimension it is split along (evenly over the tp group,
  // tp::shard_range), for an estimate of a model it has no shape of
  // (estimate/plan_description.h). nullopt: the plan does not say (fsdpp's language models,
  // whose estimate reads their shape).
  virtual std::optional<std::map<std::string, int64_t>> tensor_parallel_splits() const {
    return std::nullopt;
  }

  // Models with experts (has_experts): the data-parallel batch their load-balancing statistics
  // are summed over, and expert parallelism when spec.ep has more than one rank. Returns the
  // experts' placement over ep (empty without expert parallelism). Called once, after tensor
  // parallelism, on every model with experts.
  virtual bool has_experts() const { return false; }
  virtual OuterLayoutOf apply_experts(const ExpertParallelSpec& spec);
  // The modules under `root` (the model or a stage of it) that hold the experts, for FSDP units
  // of their own over the experts' mesh.
  virtual std::vector<torch::nn::Module*> expert_modules(torch::nn::Module& root);
  // The top-k choices per expert over the global batch in the last load-balancing loss.
  virtual std::vector<int64_t> expert_load() const { return {}; }
  // The weight of the load-balancing loss in the training loss (router_aux_loss_coef): what a
  // step adds to an objective in place of the cross entropy (parallel::MicrobatchObjective).
  virtual double aux_loss_coef() const { return 0.0; }
};

// The plan of fsdpp's own models (models/llama_plan.cpp, models/qwen3_moe_plan.cpp).
std::shared_ptr<ModelPlan> plan_of(Llama model);
std::shared_ptr<ModelPlan> plan_of(Qwen3Moe model);
// The plan of the model inside `lm` (ConfigError for an architecture without one).
std::shared_ptr<ModelPlan> plan_of(std::shared_ptr<CausalLM> lm);

}  // namespace fsdpp::models
