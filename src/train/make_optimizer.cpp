// make_optimizer (phases.h): AdamW over the shards, the fp16 loss scaler, the optimizer state's
// disk offload, each built from training:'s keys over what this rank trains; then the plan of the
// run's steps and the learning-rate schedule over them.
#include <algorithm>
#include <cmath>
#include <memory>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/fused_adamw.h"
#include "phases.h"

namespace fsdpp::train::detail {
namespace {

// AdamW over `params` with training:'s learning rate, betas, epsilon and weight decay;
// training.optim: one fused kernel per device and dtype (the default on a GPU), or LibTorch's.
std::unique_ptr<torch::optim::AdamW> make_adamw(const TrainingSection& t,
                                                std::vector<at::Tensor> params,
                                                const at::Device& device) {
  const auto options = torch::optim::AdamWOptions(t.learning_rate)
                           .betas({t.adam_beta1, t.adam_beta2})
                           .eps(t.adam_epsilon)
                           .weight_decay(t.weight_decay);
  const bool fused = t.optim.empty() ? !device.is_cpu() : t.optim == "adamw_torch_fused";
  if (fused) return std::make_unique<optim::FusedAdamW>(std::move(params), options);
  return std::make_unique<torch::optim::AdamW>(std::move(params), options);
}

// fsdp_offload_optimizer_state_dir: the AdamW state of `rank` in a memory-mapped file there;
// null without it (the state stays in memory).
std::unique_ptr<DiskOffloadedOptimizer> make_offload(const FsdpSection& fc,
                                                     torch::optim::Optimizer& opt, int rank) {
  if (fc.offload_optimizer_state_dir.empty()) return nullptr;
  DiskOffloadOptions oo;
  oo.dir = fc.offload_optimizer_state_dir;
  oo.rank = rank;
  return std::make_unique<DiskOffloadedOptimizer>(opt, oo);
}

// distillation.layer_projection's learned maps (layer_projection.h): a param group of their
// own with the run's options, so that every step and the schedule's learning rate reach them.
void add_layer_projections(TrainSession& s) {
  const auto* projections = s.distiller ? s.distiller->projections() : nullptr;
  const auto params = projections ? projections->parameters() : std::vector<at::Tensor>{};
  if (params.empty()) return;
  const auto& t = s.cfg.training;
  // The loss scaler unscales and checks the student's gradients, disk offload holds the
  // student's state: neither knows parameters outside the model.
  FSDPP_CHECK_AS(ConfigError, !t.fp16 && t.fsdp_config.offload_optimizer_state_dir.empty(),
                 "[config] distillation.layer_projection: the learned projections ({}) do not "
                 "combine with {}; use training.bf16, or distillation.layer_projection=none "
                 "with layers of the same width",
                 projections->describe(),
                 t.fp16 ? "training.fp16 (the loss scaler knows the student's gradients only)"
                        : "fsdp_config.offload_optimizer_state_dir");
  auto options = s.opt->param_groups().front().options().clone();
  s.opt->add_param_group(torch::optim::OptimizerParamGroup(params, std::move(options)));
  s.say(fmt::format("[train] distillation.layer_projection: {} learned projection(s) {} trained "
                    "with the student (AdamW, replicated on every rank)",
                    params.size(), projections->describe()));
}

}  // namespace

StepPlan plan_steps(const TrainingSection& t, int64_t examples_per_rank,
                    int64_t tokens_per_example, int64_t dp) {
  StepPlan p;
  p.batch_size = t.per_device_train_batch_size;
  p.accumulation_steps = t.gradient_accumulation_steps;
  p.steps_per_epoch = std::max<int64_t>(1, examples_per_rank / (p.batch_size * p.accumulation_steps));
  p.total_steps = t.max_steps;
  if (p.total_steps <= 0) {
    p.total_steps = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(t.num_train_epochs * static_cast<double>(p.steps_per_epoch))));
  }
  // tokens_per_s counts examples for train()'s data, whose examples are not tokens.
  p.tokens_per_step = p.batch_size * p.accumulation_steps * std::max<int64_t>(1, tokens_per_example) * dp;
  return p;
}

void make_optimizer(TrainSession& s) {
  const auto& t = s.cfg.training;
  torch::nn::Module& model = s.lm->module();
  // Pipelined: this rank's stages only (the rest of the model it built is not trained here).
  s.opt = make_adamw(t, s.parallel ? s.parallel->parameters() : model.parameters(), s.world.device());
  add_layer_projections(s);
  // fp16: the sharded dynamic loss scaler (disabled, it is a pass-through for other dtypes); its
  // skip agreed over every dim of the mesh, every stage's gradients unscaled.
  GradScalerOptions scaler_options;
  scaler_options.enabled = t.fp16;
  s.scaler = s.parallel ? s.parallel->grad_scaler(scaler_options)
                        : std::make_unique<ShardedGradScaler>(model, scaler_options);
  s.offload = make_offload(t.fsdp_config, *s.opt, s.world.rank());
  if (s.offload) {
    s.say(fmt::format("[train] optimizer state offloaded to memory-mapped files in {}",
                      t.fsdp_config.offload_optimizer_state_dir));
  }
  const int64_t dp = s.dims.dp();  // the ranks of a tp group train on the same tokens
  const StepPlan& steps = s.steps = plan_steps(t, s.batches->per_rank(), s.tokens_per_example, dp);
  s.lr_schedule = make_lr_schedule(t, steps.total_steps);
  const int64_t sequences = steps.batch_size * steps.accumulation_steps * dp;
  const std::string batch = s.tokens_per_example > 0
      ? fmt::format("{} sequences x {} tokens ({} tokens per step)", sequences,
                    s.tokens_per_example, steps.tokens_per_step)
      : fmt::format("{} examples", sequences);
  s.say(fmt::format("[train] {} steps of {}, AdamW lr {} {} warmup {}", steps.total_steps, batch,
                    t.learning_rate, t.lr_scheduler_type, s.lr_schedule.warmup_steps));
}

}  // namespace fsdpp::train::detail
