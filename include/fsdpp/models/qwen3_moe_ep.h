#pragma once
// Expert parallelism for fsdpp's Qwen3-MoE: each rank of an `ep` group keeps E/ep experts of
// every sparse layer, and tokens travel to their experts and back by all-to-all
// (fsdpp/moe/dispatch.h). Everything else in the model is replicated over the group, and the
// ranks are data parallel: each takes its own part of the global batch, as torchtitan carves
// ep out of the data-parallel ranks.
//
//   models::Qwen3Moe model(cfg);                   // built whole from cfg.seed on every rank
//   auto ep = models::parallelize_qwen3_moe_experts(*model, {.ep = mesh->group("ep")});
//   auto out = model->forward(my_tokens, my_targets, /*output_router_logits=*/true);
//   out.loss.backward();                            // all-to-alls backward too
//   models::sync_expert_parallel_gradients(*model, ep);   // without FSDP: average over ranks
//   fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, ep.model_layout(*model)), 1.0);
//   opt.step();
//
// With FSDP (EP x FSDP, torchtitan's separate expert mesh): the experts of each layer are an
// FSDP unit of their own, sharded over the ranks that hold the same experts, the rest of the
// model over all the data-parallel ranks:
//
//   auto mesh = world->init_device_mesh({2, 2}, {"efsdp", "ep"});   // 4 ranks
//   auto ep = models::parallelize_qwen3_moe_experts(*model, {.ep = mesh->group("ep"),
//                                                            .batch = world->group()});
//   FullyShardOptions dense;  dense.mesh = world->mesh();
//   models::fully_shard_qwen3_moe(*model, ep, dense, mesh->sub({"efsdp"}));
//   ...  out.loss.backward();                      // FSDP reduces every gradient
//   fsdpp::clip_grad_norm_(*model, 1.0);           // the placements the units recorded
//
// The slice is taken from the whole model, so an EP run starts exactly where one process does.
// The load-balancing loss is computed over the global batch (the routing statistics of every
// rank of `batch` summed, one all-reduce of 2E+1 numbers), so it and its gradient equal the
// single process's whatever the layout (megablocks#85). Errors ([models] ConfigError):
// num_experts not divisible by the degree (naming both), a model already parallelized or sharded.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/dist/device_mesh.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/moe/all_to_all.h"

namespace fsdpp::models {

struct Qwen3MoeExpertParallelOptions {
  moe::GroupPtr ep;     // the ranks that split the experts (required)
  // The data-parallel ranks whose batches make the global batch: the load-balancing statistics
  // are summed over them and gradients averaged. Null: the ep group.
  moe::GroupPtr batch;
};

// What parallelize_qwen3_moe_experts did, for gradient sync, clipping and gathering.
class Qwen3MoeExpertParallel {
 public:
  const moe::GroupPtr& ep_group() const { return ep_; }
  const moe::GroupPtr& batch_group() const { return batch_; }
  int64_t num_experts() const { return num_experts_; }
  int64_t experts_per_rank() const { return num_experts_ / ep_->size(); }
  int64_t first_expert() const { return ep_->rank() * experts_per_rank(); }
  // Whether a parameter name (from the model's root) is one of the stacked expert tensors
  // ("layers.1.mlp.experts.gate_proj").
  static bool is_expert(const std::string& fqn);
  // The top-k choices each expert received over the global batch and all sparse layers in the
  // last forward that computed the load-balancing loss (output_router_logits); empty before.
  std::vector<int64_t> last_expert_load() const;
  // The experts' placement before FSDP (FullyShardOptions::outer_layout of their units): dim 0
  // over the ep group, balanced, E/ep rows per rank; nothing for a group of one rank.
  OuterLayoutOf outer_layout() const;
  // Every parameter of `model` (the one this split) without FSDP: the experts placed as
  // outer_layout() places them, the rest replicated over the batch group; for
  // fsdpp::placed_params, whose views fsdpp::clip_grad_norm_ reads (each expert counted once).
  OuterLayoutOf model_layout(const Qwen3MoeImpl& model) const;

 private:
  friend Qwen3MoeExpertParallel parallelize_qwen3_moe_experts(Qwen3MoeImpl&,
                                                             const Qwen3MoeExpertParallelOptions&);
  moe::GroupPtr ep_, batch_;
  int64_t num_experts_ = 0;
  std::shared_ptr<std::vector<int64_t>> load_;  // written by the model's hook
};

// num_experts not divisible by `degree` is a ConfigError naming both (the check
// parallelize_qwen3_moe_experts makes first, for a caller that checks before building).
void check_expert_parallel(const Qwen3MoeConfig& cfg, int degree);

// Checks num_experts against the degree, replaces each sparse layer's stacked experts by this
// rank's slice [r*E/ep, (r+1)*E/ep) (the same parameter objects, resized) and installs the
// dispatch and the global load-balancing loss. Call before fully_shard and before making the
// optimizer.
Qwen3MoeExpertParallel parallelize_qwen3_moe_experts(Qwen3MoeImpl& model,
                                                     const Qwen3MoeExpertParallelOptions& options);

// Plain data parallelism (every rank all experts, e.g. FSDP over ranks that each take part of
// the batch): the load-balancing loss over the global batch, as parallelize_qwen3_moe_experts
// computes it, so that it and the router's gradient do not change with the layout (a per-rank
// loss averaged over ranks does: megablocks#85). Returns the top-k choices per expert over the
// global batch, rewritten by every forward that computes the loss. Call once, before sharding.
std::shared_ptr<const std::vector<int64_t>> use_global_load_balancing_loss(
    Qwen3MoeImpl& model, const moe::GroupPtr& batch);

// How evenly a step's top-k choices spread over the experts (the metrics' load per expert):
// the fewest and most choices an expert received and the coefficient of variation (population
// standard deviation over mean; 0 when perfectly even, 0 for no choices at all).
struct ExpertLoadSummary {
  int64_t min = 0;
  int64_t max = 0;
  double cv = 0;
};
ExpertLoadSummary summarize_expert_load(const std::vector<int64_t>& load);

// Expert parallelism without FSDP, after backward: the replicated parameters' gradients
// averaged over the batch group (one flat all-reduce), the experts' divided by its size (the
// all-to-all's backward already summed what every rank's tokens gave them). The batch group
// must be the ep group (ConfigError otherwise: with more data-parallel ranks use FSDP).
void sync_expert_parallel_gradients(Qwen3MoeImpl& model, const Qwen3MoeExpertParallel& ep);

// fully_shard for an expert-parallel model: every sparse layer's experts a unit over
// expert_mesh (1-D: the ranks that hold the same experts; gradients divided by the batch
// group's size, since their sum already covers the ep ranks' tokens; their outer layout the ep
// placement, so state dicts see and write whole (E, ...) tensors and an EP x FSDP checkpoint
// loads into any other layout), then every decoder layer and the root with `dense` (whose
// mesh should span the batch group).
void fully_shard_qwen3_moe(Qwen3MoeImpl& model, const Qwen3MoeExpertParallel& ep,
                           const FullyShardOptions& dense,
                           std::shared_ptr<dist::DeviceMesh> expert_mesh);

// Whole tensors from EP-local ones: the expert tensors of `local` (name -> this rank's (E/ep,
// ...) slice, e.g. model->named_parameters() or fsdpp::full_parameters(model)) all-gathered over
// the ep group to (E, ...); the others, and expert tensors already whole (fsdpp::full_parameters
// of a model sharded by fully_shard_qwen3_moe), returned as they are. Collective over the ep
// group.
std::map<std::string, at::Tensor> gather_experts(
    const std::vector<std::pair<std::string, at::Tensor>>& local, const Qwen3MoeExpertParallel& ep);

}  // namespace fsdpp::models
