// shard_model (phases.h): the process's allocator setting for FSDP's buffers, the device mesh,
// fully_shard's options and wrap policy from the config, activation checkpointing and
// fully_shard; and comm_split, the units' bytes per kind of link.
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "phases.h"

namespace fsdpp::train::detail {
namespace {

// fsdp_transformer_layer_cls_to_wrap names classes of the model (as Accelerate requires): a name
// no module has would leave the whole model one unit, or nothing checkpointed, without a word.
// The guide's Qwen3MoeDecoderLayer on the Llama that fsdpp-train builds is the usual case.
void check_layer_classes(const TrainConfig& cfg, torch::nn::Module& model) {
  const auto& fc = cfg.training.fsdp_config;
  if (fc.auto_wrap_policy != AutoWrapPolicy::TRANSFORMER_BASED_WRAP &&
      !cfg.training.gradient_checkpointing) {
    return;
  }
  std::set<std::string> classes;
  for (const auto& m : model.modules(/*include_self=*/true)) classes.insert(module_class_name(*m));
  for (const auto& name : fc.transformer_layer_cls_to_wrap) {
    if (classes.count(name)) continue;
    std::string have;
    for (const auto& c : classes) have += (have.empty() ? "" : ", ") + c;
    // The model built, not the YAML: model.init_from may have made it another architecture.
    const auto arch = cfg.model.architecture;
    FSDPP_THROW(ConfigError,
                "[train] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap names '{}', "
                "which is not a module class of the model fsdpp-train builds ({}: {}){}; "
                "expected its decoder layer's class, [{}]{}",
                name, module_class_name(model), have,
                arch == ModelArchitecture::LLAMA && name == decoder_layer_class(ModelArchitecture::QWEN3_MOE)
                    ? " (Qwen3MoeDecoderLayer is the Qwen3-MoE model's layer: set "
                      "model.architecture=qwen3_moe)"
                    : "",
                decoder_layer_class(arch),
                cfg.model.init_from.empty()
                    ? ""
                    : fmt::format(" (model.init_from='{}' made the model {})", cfg.model.init_from,
                                  cfg.model.architecture.name()));
  }
}

}  // namespace

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
  // Pipeline parallelism: stages fully_shard-ed over the dp ranks instead (pipeline_step.cpp).
  if (s.dims.pipeline_parallel()) return shard_pipeline(s);
  const bool hybrid = s.hybrid = traits_of(t.fsdp).hybrid;
  const ParallelDims& dims = s.dims;
  std::shared_ptr<dist::DeviceMesh> mesh = world.mesh();
  if (dims.tensor_parallel()) {
    // TP first, then FSDP over what each rank holds (torchtitan's order), over the dp dims.
    s.tp_mesh = dims.build_mesh(world);
    mesh = s.tp_mesh->sub(hybrid ? std::vector<std::string>{"replicate", "shard"}
                                 : std::vector<std::string>{"shard"});
  } else if (hybrid) {
    // Shard inside a node (fast links), replicate across nodes: fsdp-run lays ranks out node by
    // node, so the mesh's rows of LOCAL_WORLD_SIZE ranks are the nodes.
    const int shard = dims.dp_replicate > 1 ? dims.dp_shard
                                            : cfg.hybrid_shard_group_size(world.env().local_world_size);
    FSDPP_CHECK_AS(ConfigError, shard <= world.size() && world.size() % shard == 0,
                   "[train] training.fsdp={} shards over groups of {} ranks ({}), which must "
                   "divide the world size {}",
                   to_string(t.fsdp), shard,
                   t.fsdp_config.hybrid_shard_group_size > 0
                       ? "training.fsdp_config.fsdp_hybrid_shard_group_size"
                       : "LOCAL_WORLD_SIZE",
                   world.size());
    mesh = world.init_device_mesh({world.size() / shard, shard}, {"replicate", "shard"});
  }
  FullyShardOptions& fopts = s.fopts = cfg.fully_shard_options(mesh);
  if (fopts.sync_module_states) {
    sync_module_states(s, model);
    fopts.sync_module_states = false;  // done, for the whole model
  }
  const WrapPolicy policy = cfg.wrap_policy();
  const auto& fc = t.fsdp_config;
  check_layer_classes(cfg, model);
  if (dims.tensor_parallel()) {
    // Each rank keeps its slice of the weights every rank built from the seed (or loaded from
    // model.init_from), so the run starts where one process would.
    s.tp = models::parallelize_llama(*s.llama, s.tp_mesh->group("tp"),
                                     {.sequence_parallel = dims.sequence_parallel});
    fopts.outer_layout = s.tp->outer_layout(model);
    s.say(fmt::format("[train] tensor parallel: {} (the Llama plan, docs/tensor-parallel.md)",
                      dims.describe()));
  }
  if (t.gradient_checkpointing) {
    const auto marked = apply_activation_checkpointing(
        model, fc.transformer_layer_cls_to_wrap, static_cast<int>(t.gradient_checkpointing_every));
    s.say(fmt::format("[train] activation checkpointing: {} of {} blocks", marked.size(),
                      s.lm->num_layers()));
  }
  size_t units = 0;
  if (dims.expert_parallel()) {
    // Experts split over ep, each layer's a unit over the ranks holding the same ones; the rest
    // of the model FSDP over the world, as every rank takes its own batches
    // (docs/moe.md#expert-parallelism). The load-balancing loss is over the global batch.
    auto& moe = *models::as_qwen3_moe(*s.lm);
    s.ep_mesh = dims.build_expert_mesh(world);
    s.ep = models::parallelize_qwen3_moe_experts(
        *moe, {.ep = s.ep_mesh->group("ep"), .batch = world.group()});
    s.expert_load = [&ep = *s.ep] { return ep.last_expert_load(); };
    models::fully_shard_qwen3_moe(*moe, *s.ep, fopts, s.ep_mesh->sub({"efsdp"}));
    units = inspect_units(model).size();
    s.say(fmt::format("[train] expert parallel: {} experts over ep {} x efsdp {} ({} per rank)",
                      s.ep->num_experts(), dims.ep, world.size() / dims.ep,
                      s.ep->experts_per_rank()));
  } else {
    if (auto* moe = models::as_qwen3_moe(*s.lm)) {
      // The load-balancing loss over the global batch, as one process computes it whatever
      // the layout (megablocks#85); its per-expert counts are the metrics' expert load.
      auto load = models::use_global_load_balancing_loss(**moe, world.group());
      s.expert_load = [load] { return *load; };
    }
    // train()'s module returns float32 from its root under mixed precision (FSDP2's
    // MixedPrecisionPolicy(output_dtype=float32) on the root), for the user's loss and targets;
    // fsdpp-train's models cast their logits themselves.
    FullyShardOptions root = fopts;
    if (s.custom && fopts.mp_policy.param_dtype) root.mp_policy.output_dtype = at::kFloat;
    const auto made = s.custom ? apply_fully_shard(model, policy, fopts, root)
                               : apply_fully_shard(model, policy, fopts);
    units = made.size();
    if (fc.keep_ends_gathered) keep_ends_gathered(model, made);
  }
  materialize_model(s, {&model});
  if (init) {
    init->load_after_sharding(*s.lm, world.group());
    s.say(fmt::format("[train] weights from {} (model.init_from); optimizer, schedule and data "
                      "start afresh at step 1",
                      init->dir().string()));
  }
  // The mesh as it is: a HYBRID strategy without a replicate degree takes its shard groups
  // from fsdp_hybrid_shard_group_size (or the node), which the degrees do not say.
  ParallelDims mesh_dims = dims;
  if (hybrid && dims.dp_replicate == 1) {
    mesh_dims.dp_replicate = static_cast<int>(fopts.mesh->size(0));
    mesh_dims.dp_shard = static_cast<int>(fopts.mesh->size(1));
  }
  s.say(fmt::format("[train] mesh: {}; fsdp: {} over {}, {} ({}), {:.2f} M parameters held per "
                    "rank",
                    mesh_dims.describe(), to_string(t.fsdp),
                    hybrid ? fmt::format("dp_replicate {} x dp_shard {}", mesh_dims.dp_replicate,
                                         mesh_dims.dp_shard)
                           : fmt::format("dp_shard {}", mesh_dims.dp_shard),
                    count_of(static_cast<int64_t>(units), "unit"), fc.auto_wrap_policy,
                    models::num_parameters(model) / 1e6));
  if (cfg.distillation.enabled()) {
    const auto& d = cfg.distillation;
    s.distiller = std::make_unique<Distiller>(cfg, world, s.vocab, *s.lm);
    if (s.tp) s.distiller->shard_vocabulary(s.tp_mesh->group("tp"));  // vocab-parallel logits
    s.say(fmt::format("[train] distillation: {} ({}, FULL_SHARD, frozen); loss {}{}, "
                      "temperature {}, kd_ratio {}{}",
                      s.distiller->describe(), d.teacher_dtype, d.loss,
                      d.loss == DistillLossType::GENERALIZED_JSD ? fmt::format(" beta {}", d.beta)
                                                                 : "",
                      d.temperature, d.kd_ratio,
                      d.top_k > 0 ? fmt::format(", top {} tokens", d.top_k) : ""));
  }
}

// metrics.jsonl's comm_bytes_intra / comm_bytes_inter.
std::pair<uint64_t, uint64_t> comm_split(TrainSession& s) {
  const auto& t = s.cfg.training;
  const bool hybrid = s.hybrid;
  const auto& fopts = s.fopts;
  torch::nn::Module& model = s.lm->module();
  std::pair<uint64_t, uint64_t> intra_inter{0, 0};
  if (s.pipeline) return {pipeline_comm_counters(*s.pipeline).total_bytes(), 0};
  if (hybrid) {
    intra_inter = {fopts.mesh->counters("shard").total_bytes(),
                   fopts.mesh->counters("replicate").total_bytes()};
  } else if (!traits_of(t.fsdp).shards) {
    intra_inter.second = comm_counters(model).total_bytes();
  } else {
    intra_inter.first = comm_counters(model).total_bytes();
  }
  return intra_inter;
}

}  // namespace fsdpp::train::detail
