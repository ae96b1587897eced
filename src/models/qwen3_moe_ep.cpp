// Expert parallelism for Qwen3-MoE: the slice, the hooks that dispatch tokens and sum the
// load-balancing statistics over the global batch, gradient sync, clipping and FSDP layout.
// See include/fsdpp/models/qwen3_moe_ep.h and docs/moe.md#expert-parallelism.
#include "fsdpp/models/qwen3_moe_ep.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/moe/clip.h"
#include "fsdpp/moe/dispatch.h"

namespace fsdpp::models {
namespace {

// ep null: the experts run here (the model-level hook of plain data parallelism).
class ExpertParallelHooks : public Qwen3MoeParallelHooks {
 public:
  ExpertParallelHooks(moe::GroupPtr ep, moe::GroupPtr batch, int64_t num_experts,
                      std::string name, std::shared_ptr<std::vector<int64_t>> load)
      : ep_(std::move(ep)), batch_(std::move(batch)), num_experts_(num_experts),
        name_(std::move(name)), load_(std::move(load)) {}

  at::Tensor experts(const at::Tensor& x, const at::Tensor& expert_ids, const at::Tensor& weights,
                     Qwen3MoeExperts& experts) override {
    if (!ep_) return fsdpp::forward(experts, x, expert_ids, weights);
    moe::ExpertDispatch d(x, expert_ids, num_experts_, ep_, name_);
    // Through fsdpp::forward: the experts may be an FSDP unit over their own mesh.
    auto y = fsdpp::forward(experts, d.tokens, d.tokens_per_expert);
    return d.combine(y, weights);
  }

  // transformers' load_balancing_loss_func over the global batch: the counts of top-k choices
  // (no gradient), the sums of router probabilities (with it) and the number of rows, summed
  // over the batch group by one differentiable all-reduce; then E * sum_e f_e * P_e as in
  // load_balancing_loss().
  at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits,
                                 int64_t num_experts, int64_t top_k) override {
    if (router_logits.empty()) return at::zeros({}, at::kFloat);
    const auto device = router_logits.front().device();
    auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    auto counts = at::zeros({num_experts}, f32);
    auto prob_sums = at::zeros({num_experts}, f32);
    int64_t rows = 0;
    for (const auto& logits : router_logits) {
      auto probs = at::softmax(logits.to(device), -1);  // in the logits' dtype, as transformers
      auto selected = std::get<1>(at::topk(probs, top_k, -1));
      counts = counts + at::bincount(selected.reshape({-1}), {}, num_experts).to(at::kFloat);
      prob_sums = prob_sums + probs.to(at::kFloat).sum(0);
      rows += probs.size(0);
    }
    auto f64 = f32.dtype(at::kDouble);
    auto local = at::cat({counts.to(at::kDouble), prob_sums.to(at::kDouble),
                          at::full({1}, static_cast<double>(rows), f64)});
    auto global = moe::sum_over_ranks(local, batch_, "load_balancing_loss");  // (2E+1)
    const double total_rows = global[2 * num_experts].item<double>();
    const auto global_counts = global.narrow(0, 0, num_experts).detach();
    {
      auto host = global_counts.to(at::kCPU);
      load_->assign(num_experts, 0);
      for (int64_t e = 0; e < num_experts; ++e) {
        (*load_)[e] = static_cast<int64_t>(std::llround(host[e].item<double>()));
      }
    }
    auto tokens_per_expert = global_counts.to(at::kFloat) / total_rows;
    auto prob_per_expert = global.narrow(0, num_experts, num_experts).to(at::kFloat) / total_rows;
    return (tokens_per_expert * prob_per_expert).sum() * static_cast<double>(num_experts);
  }

 private:
  moe::GroupPtr ep_, batch_;
  int64_t num_experts_;
  std::string name_;
  std::shared_ptr<std::vector<int64_t>> load_;
};

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
  FSDPP_CHECK_AS(ConfigError, !model.parallel && !sharded,
                 "[models] parallelize_qwen3_moe_experts: the model is already expert-parallel "
                 "or sharded; parallelize the whole model once, before fully_shard");
  Qwen3MoeExpertParallel ep;
  ep.ep_ = options.ep;
  ep.batch_ = options.batch ? options.batch : options.ep;
  ep.num_experts_ = cfg.num_experts;
  ep.load_ = std::make_shared<std::vector<int64_t>>();
  const int64_t per_rank = ep.experts_per_rank(), first = ep.first_expert();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& block = *model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    if (!block.moe) continue;
    auto& experts = *block.moe->experts;
    FSDPP_CHECK_AS(ConfigError, experts.gate_proj.size(0) == cfg.num_experts,
                   "[models] parallelize_qwen3_moe_experts: layers.{}.mlp.experts holds {} "
                   "experts; expected the whole model's num_experts={}",
                   i, experts.gate_proj.size(0), cfg.num_experts);
    for (at::Tensor* p : {&experts.gate_proj, &experts.up_proj, &experts.down_proj}) {
      // set_data keeps the registered parameter and the member one object.
      p->set_data(p->narrow(0, first, per_rank).clone());
    }
    experts.num_experts = per_rank;
    block.moe->parallel = std::make_shared<ExpertParallelHooks>(
        ep.ep_, ep.batch_, cfg.num_experts, fmt::format("layers.{}.mlp", i), ep.load_);
  }
  model.parallel = std::make_shared<ExpertParallelHooks>(ep.ep_, ep.batch_, cfg.num_experts,
                                                         "model", ep.load_);
  return ep;
}

std::shared_ptr<const std::vector<int64_t>> use_global_load_balancing_loss(
    Qwen3MoeImpl& model, const moe::GroupPtr& batch) {
  FSDPP_CHECK_AS(ConfigError, batch, "[models] use_global_load_balancing_loss: no batch group");
  FSDPP_CHECK_AS(ConfigError, !model.parallel,
                 "[models] use_global_load_balancing_loss: the model already has parallel hooks "
                 "(parallelize_qwen3_moe_experts computes the loss over its batch group itself)");
  auto load = std::make_shared<std::vector<int64_t>>();
  model.parallel = std::make_shared<ExpertParallelHooks>(nullptr, batch, model.config().num_experts,
                                                         "model", load);
  return load;
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

double clip_grad_norm_(Qwen3MoeImpl& model, const Qwen3MoeExpertParallel& ep, double max_norm,
                       const moe::GroupPtr& fsdp_group, const moe::GroupPtr& expert_fsdp_group) {
  moe::GradNormPart dense{{}, {fsdp_group}};
  moe::GradNormPart experts{{}, {expert_fsdp_group, ep.ep_group()}};
  for (auto& item : model.named_parameters()) {
    (Qwen3MoeExpertParallel::is_expert(item.key()) ? experts : dense).params.push_back(item.value());
  }
  return moe::clip_grad_norm_({dense, experts}, max_norm);
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
  experts.outer_layout = [group = ep.ep_group(), E = ep.num_experts()](const at::Tensor&) {
    OuterLayout layout;
    if (group->size() > 1) layout.placements.push_back(balanced_placement("ep", group, 0, E));
    return layout;
  };
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
