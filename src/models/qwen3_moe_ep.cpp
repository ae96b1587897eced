// Expert parallelism for Qwen3-MoE: the slice, the hooks that dispatch tokens and sum the
// load-balancing statistics over the global batch, gradient sync and the experts' placements.
// See include/fsdpp/models/qwen3_moe_ep.h and docs/moe.md#expert-parallelism.
#include "fsdpp/models/qwen3_moe_ep.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "qwen3_moe_hooks.h"

namespace fsdpp::models {
namespace {

std::vector<Qwen3MoeSparseMoeBlockImpl*> sparse_blocks(Qwen3MoeImpl& model) {
  std::vector<Qwen3MoeSparseMoeBlockImpl*> out;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& layer = *model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    if (layer.moe) out.push_back(layer.moe.get());
  }
  return out;
}

}  // namespace

bool Qwen3MoeExpertParallel::is_expert(const std::string& fqn) {
  for (const char* t : {".experts.gate_proj", ".experts.up_proj", ".experts.down_proj"}) {
    const std::string tail(t);
    if (fqn.size() >= tail.size() && fqn.compare(fqn.size() - tail.size(), tail.size(), tail) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<int64_t> Qwen3MoeExpertParallel::last_expert_load() const {
  return load_ ? *load_ : std::vector<int64_t>{};
}

OuterLayoutOf Qwen3MoeExpertParallel::outer_layout() const {
  return [group = ep_, E = num_experts_](const at::Tensor&) {
    OuterLayout layout;
    if (group->size() > 1) layout.placements.push_back(balanced_placement("ep", group, 0, E));
    return layout;
  };
}

OuterLayoutOf Qwen3MoeExpertParallel::model_layout(const Qwen3MoeImpl& model) const {
  std::unordered_set<const void*> experts;
  for (const auto& item : model.named_parameters()) {
    if (is_expert(item.key())) experts.insert(item.value().unsafeGetTensorImpl());
  }
  auto expert = outer_layout();
  return [experts = std::move(experts), expert, batch = batch_](const at::Tensor& p) {
    if (experts.count(p.unsafeGetTensorImpl())) return expert(p);
    OuterLayout layout;
    if (batch->size() > 1) layout.replicas.push_back(batch);
    return layout;
  };
}

void check_expert_parallel(const Qwen3MoeConfig& cfg, int degree) {
  FSDPP_CHECK_AS(ConfigError, cfg.num_experts > 0 && cfg.num_experts % degree == 0,
                 "[models] Qwen3MoeConfig.num_experts={} is not divisible by the expert-parallel "
                 "degree {}; each rank holds an equal number of experts",
                 cfg.num_experts, degree);
}

Qwen3MoeExpertParallel parallelize_qwen3_moe_experts(Qwen3MoeImpl& model,
                                                     const Qwen3MoeExpertParallelOptions& options) {
  FSDPP_CHECK_AS(ConfigError, options.ep, "[models] parallelize_qwen3_moe_experts: no ep group");
  const auto& cfg = model.config();
  check_expert_parallel(cfg, options.ep->size());
  bool sharded = false;
  for (const auto& m : model.modules(/*include_self=*/true)) {
    sharded = sharded || fsdpp::detail::unit_of(*m) != nullptr;
  }
  auto layout = detail::moe_layout_of(model);
  FSDPP_CHECK_AS(ConfigError, !layout.ep && !layout.split_experts && !sharded,
                 "[models] parallelize_qwen3_moe_experts: the model is already expert-parallel, "
                 "its experts split by tensor parallelism, or sharded; parallelize the whole "
                 "model once, before fully_shard");
  Qwen3MoeExpertParallel ep;
  ep.ep_ = options.ep;
  ep.batch_ = options.batch ? options.batch : options.ep;
  ep.num_experts_ = cfg.num_experts;
  const int64_t per_rank = ep.experts_per_rank(), first = ep.first_expert();
  at::NoGradGuard no_grad;
  for (auto* block : sparse_blocks(model)) {
    auto& experts = *block->experts;
    FSDPP_CHECK_AS(ConfigError, experts.gate_proj.size(0) == cfg.num_experts,
                   "[models] parallelize_qwen3_moe_experts: a sparse layer's experts hold {} "
                   "experts; expected the whole model's num_experts={}",
                   experts.gate_proj.size(0), cfg.num_experts);
    for (at::Tensor* p : {&experts.gate_proj, &experts.up_proj, &experts.down_proj}) {
      // set_data keeps the registered parameter and the member one object.
      p->set_data(p->narrow(0, first, per_rank).clone());
    }
    experts.num_experts = per_rank;
  }
  // Added to what tensor parallelism installed (its tp group), if anything.
  layout.ep = ep.ep_;
  layout.batch = ep.batch_;
  ep.load_ = detail::install_moe_hooks(model, layout);
  return ep;
}

std::shared_ptr<const std::vector<int64_t>> use_global_load_balancing_loss(
    Qwen3MoeImpl& model, const moe::GroupPtr& batch) {
  FSDPP_CHECK_AS(ConfigError, batch, "[models] use_global_load_balancing_loss: no batch group");
  auto layout = detail::moe_layout_of(model);
  FSDPP_CHECK_AS(ConfigError, !layout.ep && !layout.batch,
                 "[models] use_global_load_balancing_loss: the model already sums its "
                 "load-balancing statistics over a batch group (parallelize_qwen3_moe_experts "
                 "does it over its own)");
  layout.batch = batch;
  return detail::install_moe_hooks(model, layout);
}

ExpertLoadSummary summarize_expert_load(const std::vector<int64_t>& load) {
  ExpertLoadSummary out;
  if (load.empty()) return out;
  out.min = *std::min_element(load.begin(), load.end());
  out.max = *std::max_element(load.begin(), load.end());
  double sum = 0, squares = 0;
  for (auto n : load) sum += static_cast<double>(n);
  const double mean = sum / static_cast<double>(load.size());
  for (auto n : load) squares += (static_cast<double>(n) - mean) * (static_cast<double>(n) - mean);
  if (mean > 0) out.cv = std::sqrt(squares / static_cast<double>(load.size())) / mean;
  return out;
}

void sync_expert_parallel_gradients(Qwen3MoeImpl& model, const Qwen3MoeExpertParallel& ep) {
  const auto& batch = ep.batch_group();
  FSDPP_CHECK_AS(ConfigError, batch->global_ranks() == ep.ep_group()->global_ranks(),
                 "[models] sync_expert_parallel_gradients: the batch group ({} ranks) is not the "
                 "ep group ({} ranks); with more data-parallel ranks than the expert-parallel "
                 "degree shard the model with fully_shard_qwen3_moe",
                 batch->size(), ep.ep_group()->size());
  const int n = batch->size();
  if (n == 1) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> replicated;
  for (auto& item : model.named_parameters()) {
    auto& p = item.value();
    if (!p.requires_grad()) continue;
    if (Qwen3MoeExpertParallel::is_expert(item.key())) {
      // Already the sum over every rank's tokens (the all-to-all's backward): the average.
      if (p.grad().defined()) p.mutable_grad().div_(n);
      continue;
    }
    // A gradient missing here may exist elsewhere: zeros keep the ranks' buffers alike.
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    replicated.push_back(p.grad());
  }
  if (replicated.empty()) return;
  std::vector<at::Tensor> flat;
  for (const auto& g : replicated) flat.push_back(g.reshape({-1}));
  auto buffer = at::cat(flat);  // one all-reduce, not one per parameter
  batch->all_reduce(buffer, dist::ReduceOp::AVG, {"sync_expert_parallel_gradients"});
  int64_t offset = 0;
  for (auto& g : replicated) {
    g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

void fully_shard_qwen3_moe(Qwen3MoeImpl& model, const Qwen3MoeExpertParallel& ep,
                           const FullyShardOptions& dense,
                           std::shared_ptr<dist::DeviceMesh> expert_mesh) {
  FSDPP_CHECK_AS(ConfigError, expert_mesh && expert_mesh->ndim() == 1,
                 "[models] fully_shard_qwen3_moe: the expert mesh must be a 1-D mesh (the ranks "
                 "that hold the same experts)");
  FullyShardOptions experts = dense;
  experts.mesh = std::move(expert_mesh);
  // Each expert's gradient is already summed over the ep ranks' tokens; summed again over the
  // expert mesh it covers the whole batch, which the dense units average over.
  experts.gradient_divide_factor = dense.gradient_divide_factor > 0
                                       ? dense.gradient_divide_factor
                                       : static_cast<double>(ep.batch_group()->size());
  // The expert units hold this rank's E/ep experts: state dicts and gather_full see (E, ...).
  experts.outer_layout = ep.outer_layout();
  for (auto* block : sparse_blocks(model)) fully_shard(*block->experts, experts);
  for (size_t i = 0; i < model.layers->size(); ++i) {
    fully_shard(*model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i), dense);
  }
  fully_shard(model, dense);
}

std::map<std::string, at::Tensor> gather_experts(
    const std::vector<std::pair<std::string, at::Tensor>>& local, const Qwen3MoeExpertParallel& ep) {
  std::map<std::string, at::Tensor> out;
  const auto& g = ep.ep_group();
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : local) {
    // Whole already (fsdpp::full_parameters of units that know the ep placement): as it is.
    if (!Qwen3MoeExpertParallel::is_expert(name) || g->size() == 1 ||
        t.size(0) == ep.num_experts()) {
      out[name] = t;
      continue;
    }
    auto in = t.contiguous();
    auto sizes = in.sizes().vec();
    sizes[0] *= g->size();
    auto whole = at::empty(sizes, in.options());
    g->all_gather_into_tensor(whole, in, {name});
    out[name] = whole;
  }
  return out;
}

}  // namespace fsdpp::models
