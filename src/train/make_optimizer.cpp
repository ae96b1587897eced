// make_optimizer (phases.h): AdamW over the shards, the fp16 loss scaler, the optimizer state's
// disk offload, the number of steps and the learning-rate schedule.
#include <algorithm>
#include <cmath>
#include <memory>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/fused_adamw.h"
#include "phases.h"

namespace fsdpp::train::detail {
namespace {

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

void make_optimizer(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  torch::nn::Module& model = s.lm->module();
  // Pipelined: this rank's stages only (the rest of the model it built is not trained here).
  auto params = s.parallel ? s.parallel->parameters() : model.parameters();
  const auto options = torch::optim::AdamWOptions(t.learning_rate)
                           .betas({t.adam_beta1, t.adam_beta2})
                           .eps(t.adam_epsilon)
                           .weight_decay(t.weight_decay);
  // training.optim: one fused kernel per device and dtype (the default on a GPU), or LibTorch's.
  const bool fused = t.optim.empty() ? !world.device().is_cpu() : t.optim == "adamw_torch_fused";
  if (fused) {
    s.opt = std::make_unique<optim::FusedAdamW>(params, options);
  } else {
    s.opt = std::make_unique<torch::optim::AdamW>(params, options);
  }
  auto& opt = *s.opt;
  add_layer_projections(s);
  // fsdp_offload_optimizer_state_dir: the AdamW state lives in a per-rank memory-mapped file.
  // fp16: the sharded dynamic loss scaler (disabled, it is a pass-through for other dtypes).
  GradScalerOptions scaler_options;
  scaler_options.enabled = t.fp16;
  // Its skip agreed over every dim of the mesh, every stage's gradients unscaled.
  s.scaler = s.parallel ? s.parallel->grad_scaler(scaler_options)
                        : std::make_unique<ShardedGradScaler>(model, scaler_options);
  auto& offload = s.offload;
  if (!t.fsdp_config.offload_optimizer_state_dir.empty()) {
    DiskOffloadOptions oo;
    oo.dir = t.fsdp_config.offload_optimizer_state_dir;
    oo.rank = world.rank();
    offload = std::make_unique<DiskOffloadedOptimizer>(opt, oo);
    s.say(fmt::format("[train] optimizer state offloaded to memory-mapped files in {}",
                      oo.dir.string()));
  }
  const int64_t B = s.B = t.per_device_train_batch_size;
  const int64_t accum = s.accum = t.gradient_accumulation_steps;
  int64_t& total_steps = s.total_steps = t.max_steps;
  if (total_steps <= 0) {
    const int64_t per_epoch = std::max<int64_t>(1, s.batches->per_rank() / (B * accum));
    total_steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(t.num_train_epochs * per_epoch)));
  }
  s.schedule = cfg.lr_schedule(total_steps);
  const int64_t dp = s.dims.dp();  // the ranks of a tp group train on the same tokens
  // tokens_per_s counts examples for train()'s data, whose examples are not tokens.
  const int64_t per_example = std::max<int64_t>(1, s.tokens_per_example);
  const int64_t tokens_per_step = s.tokens_per_step = B * accum * per_example * dp;
  const std::string batch = s.tokens_per_example > 0
      ? fmt::format("{} sequences x {} tokens ({} tokens per step)", B * accum * dp,
                    s.tokens_per_example, tokens_per_step)
      : fmt::format("{} examples", B * accum * dp);
  s.say(fmt::format("[train] {} steps of {}, AdamW lr {} {} warmup {}", total_steps, batch,
                    t.learning_rate, t.lr_scheduler_type, s.schedule.warmup_steps));
}

}  // namespace fsdpp::train::detail
