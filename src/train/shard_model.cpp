// shard_model (phases.h): the process's allocator setting for FSDP's buffers, the device mesh,
// fully_shard's options and wrap policy from the config, activation checkpointing and
// fully_shard; and comm_split, the units' bytes per kind of link.
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/parallel/parallelize.h"
#include "phases.h"

namespace fsdpp::train::detail {

// fsdp_sync_module_states: rank 0's parameters and buffers on every rank, once, over the world
// before any unit exists (every tensor is then whole on every rank). Done here rather than by
// each fully_shard call: fully_shard's broadcast on the root unit also covers the parameters of
// the units below it, which are already shards by then, and would replace each rank's shard
// with rank 0's (measured: the losses of a 2-rank run moved by 5e-4).
void sync_module_states(TrainSession& s, torch::nn::Module& model) {
  auto& world = s.world;
  if (world.size() == 1) return;
  if (deferred_init(s.cfg)) {
    return;  // the model has no values yet: materialize_model draws rank 0's (model_init.cpp)
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  for (auto& p : model.parameters()) tensors.push_back(p);
  for (auto& b : model.buffers()) tensors.push_back(b);
  for (auto& t : tensors) {
    auto c = t.contiguous();
    world.group()->broadcast(c, 0, {"sync_module_states"});
    if (!c.is_same(t)) t.copy_(c);
  }
}

namespace {

// The parallelize options of the config: FSDP's, the wrap policy and activation checkpointing's
// classes, sequence parallelism, the pipeline's schedule and microbatches (one stage's: the
// accumulation batches).
parallel::ParallelizeOptions parallelize_options(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  const auto& p = cfg.parallelism;
  parallel::ParallelizeOptions o;
  o.fsdp = cfg.fully_shard_options(nullptr);
  o.fsdp.sync_module_states = false;  // sync_module_states did it, on the whole model
  o.wrap = cfg.wrap_policy();
  o.keep_ends_gathered = t.fsdp_config.keep_ends_gathered;
  o.sequence_parallel = s.cfg.parallelism.enable_sequence_parallel;
  // The run model's dtype of the root's outputs (FSDP2's MixedPrecisionPolicy(output_dtype)):
  // train()'s float32, for the user's loss and targets.
  if (o.fsdp.mp_policy.param_dtype) o.root_output_dtype = s.run_model.root_output_dtype();
  o.float8 = {t.fp8, t.fp8_filter};
  if (t.gradient_checkpointing) {
    o.checkpoint_every = static_cast<int>(t.gradient_checkpointing_every);
    o.checkpoint_selective = t.gradient_checkpointing_mode == CheckpointingMode::SELECTIVE;
    o.checkpoint_classes = t.fsdp_config.transformer_layer_cls_to_wrap;
  }
  if (s.dims.pipeline_parallel()) {
    o.schedule = p.pipeline_parallel_schedule.name();
    o.layers_per_stage = static_cast<int>(p.pipeline_parallel_layers_per_stage);
    o.microbatches = pipeline_microbatches(cfg, s.dims, parallel::pipeline_units_of(*s.plan));
    o.runtime.store = s.world.store();
  } else {
    // One stage: its microbatches are the accumulation batches (train_step).
    o.microbatches = static_cast<int>(cfg.training.gradient_accumulation_steps);
  }
  return o;
}

}  // namespace

void shard_model(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  auto& init = s.init;
  torch::nn::Module& model = s.lm->module();
  // FSDP frees and re-allocates unit-sized buffers every step (gathered parameters, reduce
  // inputs), and glibc's dynamic mmap threshold then keeps them in its heap: measured, a 2-rank
  // FULL_SHARD run peaked 35% above its working set, above NO_SHARD. A fixed threshold hands
  // large blocks back to the system at once, for page faults on the next allocation.
  // Process-wide, which the trainer's process may decide (docs/fully-shard.md#memory).
  if (t.malloc_mmap_threshold > 0) {
    FSDPP_CHECK(mallopt(M_MMAP_THRESHOLD, static_cast<int>(t.malloc_mmap_threshold)) == 1,
                "[train] glibc refused training.malloc_mmap_threshold={}",
                t.malloc_mmap_threshold);
  }
  // Built on the CPU (the same weights as a CPU run), computed on the rank's device; a model on
  // the meta device (model.deferred_init) gets its storage there after sharding instead.
  if (!world.device().is_cpu() && !deferred_init(s.cfg)) model.to(world.device());
  s.hybrid = traits_of(t.fsdp).hybrid;
  const ParallelDims& dims = s.dims;
  const std::string layout = layout_line(dims, cfg.parallelism.enable_sequence_parallel);
  // The loss lives inside the stages' microbatches: there is no loss of the step to hand over.
  FSDPP_CHECK_AS(ConfigError, !dims.pipeline_parallel() || !s.hooks.after_loss,
                 "[train] TrainerHooks::after_loss is not called under pipeline parallelism "
                 "(parallelism.pipeline_parallel_degree={}): each microbatch's loss is computed "
                 "inside the last stage; unset the hook or the pipeline",
                 dims.pp);
  if (cfg.training.fsdp_config.sync_module_states) sync_module_states(s, model);
  // Every parallelism in its order over one mesh (docs/parallelize.md): the model's plan, this
  // rank's stages (the whole model without a pipeline), each FSDP-sharded.
  auto options = parallelize_options(s);
  options.materialize = [&s](const std::vector<torch::nn::Module*>& roots) {
    materialize_model(s, roots);
  };
  try {
    s.parallel = parallel::parallelize(s.plan, world, dims, options);  // build_model's plan
  } catch (const ConfigError& e) {
    FSDPP_THROW(ConfigError, "[config] parallelism: {} ({}): {}", layout,
                to_string(t.fsdp), e.what());
  }
  auto& p = *s.parallel;
  s.fopts = options.fsdp;  // what every unit was made with (the sample reads its dtype, offload)
  const auto roots = p.roots();
  if (init) {
    init->load_after_sharding(roots, world.group());
    s.say(fmt::format("[train] weights from {} (model.init_from); optimizer, schedule and data "
                      "start afresh at step 1",
                      init->dir().string()));
  }
  if (p.model().has_experts()) {
    // The top-k choices per expert over the global batch: the metrics' expert load.
    s.expert_load = [&p] { return p.expert_load(); };  // collective over pp when pipelined
  }
  if (dims.tensor_parallel()) {
    s.say(fmt::format("[train] tensor parallel: {} (the {} plan, docs/tensor-parallel.md)",
                      layout, p.model().name()));
  }
  if (t.fp8 != Float8Recipe::OFF) {
    const auto& names = p.float8_projections();
    s.say(fmt::format("[train] float8 ({}, filter {}): {} projections{}", t.fp8.name(),
                      t.fp8_filter.name(), names.size(),
                      names.empty() ? "; the filter took none (training.fp8_filter=all takes "
                                      "every one whose dims are multiples of 16)"
                                    : fmt::format(", e.g. {}", names.front())));
  }
  if (t.gradient_checkpointing && !dims.pipeline_parallel()) {
    s.say(fmt::format("[train] activation checkpointing ({}): {} of {} blocks",
                      t.gradient_checkpointing_mode.name(), p.num_checkpointed(),
                      s.lm->num_layers()));
  }
  if (dims.expert_parallel()) {
    const int64_t experts = cfg.model.num_experts;
    s.say(fmt::format("[train] expert parallel: {} experts over ep {} x efsdp {} ({} per rank)",
                      experts, dims.ep, p.dims().efsdp(), experts / dims.ep));
  }
  if (dims.pipeline_parallel()) {
    int64_t held = 0;
    for (const auto& t : p.parameters()) held += t.numel();
    s.say(fmt::format("[train] pipeline parallel: {}; {}", layout, p.cut().describe()));
    s.say(fmt::format("[train] fsdp: {} over dp_shard {} per stage, {} on rank 0, {:.2f} M "
                      "parameters held by rank 0",
                      to_string(t.fsdp), dims.dp_shard, count_of(static_cast<int64_t>(p.num_units()), "unit"),
                      held / 1e6));
  } else {
    s.say(fmt::format("[train] mesh: {}; fsdp: {} over {}, {} ({}), {:.2f} M parameters held per "
                      "rank",
                      layout, to_string(t.fsdp),
                      s.hybrid ? fmt::format("dp_replicate {} x dp_shard {}", dims.dp_replicate,
                                             dims.dp_shard)
                               : fmt::format("dp_shard {}", dims.dp_shard),
                      count_of(static_cast<int64_t>(p.num_units()), "unit"),
                      t.fsdp_config.auto_wrap_policy, models::num_parameters(model) / 1e6));
  }
  if (cfg.distillation.enabled()) {
    const auto& d = cfg.distillation;
    s.distiller = std::make_unique<distill::Distiller>(d, cfg.distill_run(s.vocab), world, *s.lm);
    if (dims.tensor_parallel()) s.distiller->shard_vocabulary(p.mesh().group("tp"));  // vocab-parallel logits
    s.say(fmt::format("[train] distillation: {} ({}, FULL_SHARD, frozen); loss {}{}, "
                      "temperature {}, kd_ratio {}{}",
                      s.distiller->describe(), d.teacher_dtype, d.loss,
                      d.loss == distill::DistillLossType::GENERALIZED_JSD ? fmt::format(" beta {}", d.beta)
                                                                 : "",
                      d.temperature, d.kd_ratio,
                      d.top_k > 0 ? fmt::format(", top {} tokens", d.top_k) : ""));
  }
}

// metrics.jsonl's comm_bytes_intra / comm_bytes_inter: the bytes over the shard groups (a
// node under HYBRID_SHARD) and over the replicas (across nodes); a pipeline's all of it, intra.
std::pair<uint64_t, uint64_t> comm_split(TrainSession& s) {
  const auto& t = s.cfg.training;
  torch::nn::Module& model = s.lm->module();
  if (s.parallel && s.parallel->pipelined()) return {s.parallel->comm_counters().total_bytes(), 0};
  if (s.hybrid) {
    const auto& mesh = s.parallel->mesh().dense();
    return {mesh->counters("dp_shard").total_bytes(), mesh->counters("dp_replicate").total_bytes()};
  }
  if (!traits_of(t.fsdp).shards) return {0, comm_counters(model).total_bytes()};
  return {comm_counters(model).total_bytes(), 0};
}

}  // namespace fsdpp::train::detail
