#pragma once
// One parallelize: every parallelism applied to any model that supplies a plan
// (fsdpp/models/model_plan.h), in one fixed order, over one mesh, for every combination
// (docs/parallelize.md):
//
//   auto plan = models::plan_of(models::Qwen3Moe(cfg));       // built whole from cfg.seed
//   parallel::ParallelizeOptions o;
//   o.fsdp.strategy = ShardingStrategy::HYBRID_SHARD;
//   o.sequence_parallel = true;
//   o.schedule = "Interleaved1F1B";
//   o.microbatches = 4;
//   auto p = parallel::parallelize(plan, *world, {.pp = 2, .dp_replicate = 2, .tp = 2, .ep = 2}, o);
//   torch::optim::AdamW opt(p->parameters(), ...);
//   auto step = p->forward_backward(tokens, targets);   // this data-parallel rank's rows
//   p->clip_grad_norm_(1.0);                             // the whole model's norm, once
//   opt.step(); opt.zero_grad();
//   state::save_state_dict(dir, p->roots(), &opt, world->group());   // loads into any layout
//
// The order, per torchtitan's parallelize and Megatron:
//   1. the pipeline cut is decided (which units each stage holds, checked against the schedule's
//      traits) before anything changes;
//   2. tensor parallelism (+ sequence parallelism) on the model's plan;
//   3. float8 GEMMs for the projections the filter takes (models/float8_convert.h), then
//      activation checkpointing of every checkpoint_every-th block;
//   4. expert parallelism (experts over ep, the load-balancing statistics over the global batch);
//   5. the cut is made: this rank keeps its stages (a stage shares the model's modules, so steps
//      2-4 applied to the whole model are applied to every stage; a non-pipelined run is one
//      stage, the whole model);
//   6. FSDP / HSDP on every stage: each block a unit, the stage the root; experts that live
//      apart from the dense weights (expert parallelism, or whole experts under tensor
//      parallelism) units of their own over the sparse mesh's efsdp (and dp_replicate);
//   7. the pipeline runtime over the stages.
// Then every parameter's placements are recorded once (record()): the groups that split it and
// those that hold copies of it. Clipping reads that record; so do checkpoints (through the same
// placements, fsdpp/fsdp/sharded_param.h) and what reports bytes per mesh dim.
//
// What is refused, with the reason (ConfigError): ep > 1 for a model without experts; ep > 1
// with split_experts (experts are either split over tp or placed over ep); dp_replicate > 1
// without a HYBRID strategy; sequence parallelism without tp > 1; tied embeddings with pp > 1
// (the table would be on the first and the last stage; untie it); degrees the model's shape or
// the world does not divide (naming them).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/dist/trace.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/grad_scaler.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/float8_convert.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/parallel/parallel_dims.h"
#include "fsdpp/parallel/pipeline_cut.h"
#include "fsdpp/pipeline/runtime.h"

namespace fsdpp::parallel {

struct ParallelizeOptions {
  // fully_shard's options for every stage: the strategy (HYBRID ones over dp_replicate x
  // dp_shard), mixed precision, offload, prefetch, ... Its mesh and outer_layout are
  // parallelize's to set.
  FullyShardOptions fsdp;
  bool sequence_parallel = false;
  // Models with experts, under tensor parallelism: split each expert over tp (true), or keep
  // them whole, each tp rank routing its own tokens (false). Default: split without expert
  // parallelism, whole with it.
  std::optional<bool> split_experts;
  int checkpoint_every = 0;  // activation checkpointing of every k-th block; 0: none
  // Selective: the blocks' projection products are kept and only the rest is recomputed
  // (CheckpointOptions::keep_products, fsdp/activation_checkpoint.h).
  bool checkpoint_selective = false;
  // Float8 GEMMs for the decoders' projections (recipe OFF: none). Not with tp > 1 yet: a
  // tensorwise scale would need the amax over the tp group's shards.
  models::Float8Options float8;
  // The classes activation checkpointing marks; empty: the plan's block classes.
  std::vector<std::string> checkpoint_classes;
  // FSDP's units on every stage: each block of the plan's classes (unset), or this policy
  // (fsdpp-train's fsdp_auto_wrap_policy: transformer classes, size based or none).
  std::optional<WrapPolicy> wrap;
  // A one-stage model: its root and last unit stay gathered between forward and backward
  // (keep_ends_gathered of fsdp/wrap_policy.h).
  bool keep_ends_gathered = false;
  // The dtype each stage's root unit hands back under mixed precision (FSDP2's output_dtype on
  // the root): train()'s float32, for a loss the user computes on the root's output.
  std::optional<at::ScalarType> root_output_dtype;
  // Microbatches per step: the pipeline's (pp > 1), or gradient accumulation (pp == 1); the
  // rows forward_backward gets must divide by it.
  int microbatches = 1;
  // pp > 1: the schedule (pipeline/schedule_traits.h) and the cut.
  std::string schedule = "1F1B";
  int layers_per_stage = 0;  // 0: the units as even as can be over the schedule's stages
  pipeline::RuntimeOptions runtime;
  // Called with the roots once they are sharded, before the pipeline runtime is made: a model
  // made on the meta device gets its storage and values here (deferred initialisation,
  // fsdp/deferred_init.h), so that the runtime sees the device it computes on.
  std::function<void(const std::vector<torch::nn::Module*>& roots)> materialize;
};

// What one parameter is, across the mesh: its sharded view (placements outermost first, the
// groups of its copies) and those groups named by their mesh dims.
struct ParamRecord {
  ShardedParam view;
  int stage = 0;  // the pipeline stage that holds it (0 without a pipeline)
  // Mesh dims whose ranks hold disjoint pieces of it: "pp" first when pipelined, then its
  // placements' ("tp", "ep", "dp_shard", "efsdp").
  std::vector<std::string> split_over;
  // Mesh dims whose ranks hold the same piece ("dp_replicate" under HSDP, "tp" for what tensor
  // parallelism leaves whole, "dp_shard" under NO_SHARD).
  std::vector<std::string> replicated_over;
};

struct StepLoss {
  // This rank's share of the step's loss, the one its backward started from: its mean over the
  // data-parallel ranks (what FSDP's averaging of the gradients makes of it) is the step's loss.
  // For a language model that is the sum of the token losses over every loss-bearing token
  // (targets != -100) of the global batch (all microbatches, all data-parallel ranks) divided by
  // their number, as one process computes it over the whole batch; plus, for MoE,
  // router_aux_loss_coef times the mean over the microbatches of the load-balancing loss. For
  // other models (sequential_plan, train()'s custom ones) the mean over the microbatches of
  // their loss. On every rank of the pp group.
  double loss = 0;
  // The mean over the microbatches of the load-balancing loss (MoE, unscaled; 0 for dense
  // models), on every rank of the pp group.
  double aux_loss = 0;
  // A language model's loss-bearing tokens in the global batch (0 for other models, and on the
  // ranks of a pipeline without its last stage).
  int64_t loss_tokens = 0;
};

// A language model's token losses of one microbatch are summed and divided by `divisor` =
// N / (dp x microbatches), N the loss-bearing tokens of the global batch (counted from the
// targets with one all-reduce over dp before the forward): the microbatch's mean when every
// microbatch of every data-parallel rank holds as many, and in every case the losses that,
// averaged over the microbatches and the data-parallel ranks, give the global batch's mean over
// its tokens (transformers' num_items_in_batch). 1 when the global batch has no loss token.
double token_loss_divisor(int64_t loss_tokens, int64_t dp, int microbatches);

// The token loss of microbatch `microbatch` of a step (0 .. microbatches - 1) in place of the
// model's cross entropy: of its logits (this rank's vocabulary columns under tp) and targets, and
// without a pipeline (the one stage) the outputs of the decoder layers MicrobatchCalls::
// hidden_layers names (models::CausalLM::forward_features'; empty with a pipeline). The model's
// own terms (MoE's load-balancing loss) are still added. E.g. the distillation objective against
// the teacher's rows of that microbatch. `divisor`: the step's token_loss_divisor, which a sum
// over the microbatch's loss-bearing tokens is divided by to be part of the global batch's
// token mean (the model's own cross entropy is); an objective that returns a mean over its
// microbatch may ignore it.
using MicrobatchObjective = std::function<at::Tensor(
    const at::Tensor& logits, const at::Tensor& targets, int microbatch,
    const std::vector<at::Tensor>& hidden_states, double divisor)>;

// What forward_backward calls for each microbatch besides the model; every member optional.
struct MicrobatchCalls {
  // Each microbatch's token loss on the last stage instead of the cross entropy.
  MicrobatchObjective objective;
  // Without a pipeline: the decoder layers whose outputs the objective reads (a language
  // model's plan, ModelPlan::causal_lm). ConfigError with a pipeline (a stage has some layers).
  std::vector<int64_t> hidden_layers;
  // Without a pipeline: after microbatch k's loss, before its backward; may replace the loss
  // (the backward and StepLoss::loss then use the replacement). ConfigError with a pipeline:
  // its loss is computed inside the last stage, microbatch by microbatch.
  std::function<void(int microbatch, at::Tensor& loss)> after_loss;
  // Without a pipeline: each microbatch's "forward" and "backward" spans (a pipeline's runtime
  // has its own, pipeline::RuntimeOptions).
  dist::TraceRecorder* trace = nullptr;
};

class Parallelized {
 public:
  const ParallelDims& dims() const { return mesh_->dims(); }
  ParallelMesh& mesh() { return *mesh_; }
  models::ModelPlan& model() { return *model_; }

  // The modules this rank holds, each the root of its FSDP units: the whole model, or this
  // rank's pipeline stages in stage order. What checkpoints save and load
  // (state::save_state_dict's parts) and what the optimizer steps (parameters()).
  std::vector<torch::nn::Module*> roots() const;
  std::vector<at::Tensor> parameters() const;
  std::vector<int> stages() const { return stage_index_; }  // their numbers

  // Every parameter of roots(), once.
  const std::vector<ParamRecord>& record() const { return record_; }

  bool pipelined() const { return runtime_ != nullptr; }
  const PipelineCut& cut() const { return cut_; }
  pipeline::PipelineRuntime& runtime();

  // Forward and backward of this data-parallel rank's rows (inputs, targets: one example per row
  // of dim 0; a language model's (B,T) int64), in options.microbatches equal microbatches:
  // gradient accumulation over the one stage (a language model's forward_features and its cross
  // entropy, or the objective; another model's plan loss()), or the pipeline's step. A language
  // model's loss is the global batch's token mean (StepLoss::loss, token_loss_divisor), its
  // gradients those of one process over the whole batch. loss_scale multiplies the loss that
  // backward starts from (a gradient scaler's). `calls`: each microbatch's objective, hook and
  // trace spans.
  StepLoss forward_backward(const at::Tensor& inputs, const at::Tensor& targets,
                            double loss_scale = 1.0, const MicrobatchCalls& calls = {});
  // The same with document masking (a language model's packed rows): positions (B,T) int64, each
  // document's positions restarting at 0 (models::LlamaImpl::forward), split into the
  // microbatches with the rows; with a pipeline every stage gets its microbatch's. Undefined:
  // the overload above. ConfigError for a model that is not a language model.
  StepLoss forward_backward(const at::Tensor& inputs, const at::Tensor& targets,
                            const at::Tensor& positions, double loss_scale = 1.0,
                            const MicrobatchCalls& calls = {});

  // The whole model's gradient norm: fsdpp::clip_grad_norm_ (fsdp/clip.h) over the record's
  // placements, across pp; clips to max_norm; returns the norm before clipping.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // A float16 loss scaler over roots(), its skip agreed over every dim of the mesh.
  std::unique_ptr<ShardedGradScaler> grad_scaler(GradScalerOptions options = {}) const;

  // Forward only, for evaluation and sampling: this rank's stages in order, the activations
  // passed along pp; the last stage's output (logits) on the ranks that hold it, undefined on
  // the others (every rank without a pipeline). positions: document masking, every stage given
  // them (as forward_backward's). Collective over pp.
  at::Tensor forward_stages(const at::Tensor& tokens, const at::Tensor& positions = {});
  // The rank of the pp group that holds the last stage (0 without a pipeline).
  int last_stage_rank() const;
  // models::ModelPlan::expert_load of the last loss computed: pipelined, the last stage's (the
  // whole model's routing, carried through the stages), on every rank of the pp group.
  // Collective over pp when pipelined; empty for a model without experts.
  std::vector<int64_t> expert_load();
  // The mean loss of (inputs, targets) without gradients, on every rank of the pp group (the
  // model's training loss: MoE's includes its load-balancing term; a language model's cross
  // entropy the mean over these rows' loss-bearing tokens). positions: document masking.
  // Collective over pp.
  double eval_loss(const at::Tensor& inputs, const at::Tensor& targets,
                   const at::Tensor& positions = {});
  // The traffic of every dim of the mesh (both meshes), summed: the bytes the run moved.
  dist::CommCounters comm_counters() const;
  // FSDP units made on this rank's stages.
  size_t num_units() const { return num_units_; }
  // Blocks activation checkpointing marked (of the whole model).
  size_t num_checkpointed() const { return num_checkpointed_; }
  // The projections that run float8 GEMMs (ParallelizeOptions::float8), by name.
  const std::vector<std::string>& float8_projections() const { return float8_projections_; }

 private:
  friend std::unique_ptr<Parallelized> parallelize(std::shared_ptr<models::ModelPlan>, dist::World&,
                                                   const ParallelDims&, const ParallelizeOptions&);
  Parallelized() = default;
  void make_record();
  // The last stage's model loss, when this rank holds it (else null).
  const models::ModelStage* last_stage() const;
  // `value` from the rank of the pp group that holds the last stage to every rank of it.
  void from_last_stage(at::Tensor& value, const char* what);
  // forward_backward without a pipeline: microbatch by microbatch over the one stage; with a
  // pipeline, its step. divisor: token_loss_divisor of the step (language models).
  StepLoss one_stage_step(const at::Tensor& inputs, const at::Tensor& targets,
                          const at::Tensor& positions, double divisor, double loss_scale,
                          const MicrobatchCalls& calls);
  StepLoss pipeline_step(const at::Tensor& inputs, const at::Tensor& targets,
                         const at::Tensor& positions, double divisor, double loss_scale,
                         const MicrobatchCalls& calls);
  // One microbatch's loss on the one stage: a language model's cross entropy over divisor, or
  // the objective's, and the model's own terms, on its features; another model's plan loss.
  models::StageLoss one_stage_loss(const at::Tensor& inputs, const at::Tensor& targets,
                                   const at::Tensor& positions, double divisor, int k,
                                   const MicrobatchCalls& calls);
  // The global batch's loss-bearing tokens (an all-reduce over dp): 0 for a model that is not a
  // language model and on the ranks of a pipeline without its last stage.
  int64_t count_loss_tokens(const at::Tensor& targets);

  std::shared_ptr<models::ModelPlan> model_;
  std::unique_ptr<ParallelMesh> mesh_;
  ParallelizeOptions options_;
  PipelineCut cut_;
  std::vector<std::shared_ptr<torch::nn::Module>> roots_;
  std::vector<int> stage_index_;
  std::vector<models::ModelStage> stages_;  // this rank's, pipelined only
  std::unique_ptr<pipeline::PipelineRuntime> runtime_;
  std::vector<ParamRecord> record_;
  size_t num_units_ = 0;
  size_t num_checkpointed_ = 0;
  std::vector<std::string> float8_projections_;
};

// Collective over the world. `model` must be whole (built from its seed, or loaded) and not yet
// parallel or sharded; it is changed in place (its parameters become this rank's pieces).
std::unique_ptr<Parallelized> parallelize(std::shared_ptr<models::ModelPlan> model,
                                          dist::World& world, const ParallelDims& dims,
                                          const ParallelizeOptions& options = {});

}  // namespace fsdpp::parallel
