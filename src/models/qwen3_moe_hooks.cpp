#include "qwen3_moe_hooks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/moe/dispatch.h"
#include "fsdpp/tp/regions.h"

namespace fsdpp::models::detail {

at::Tensor MoeHooks::run_experts(Qwen3MoeSparseMoeBlockImpl& block, const at::Tensor& x,
                                 const Qwen3MoeRouting& routing) {
  if (!layout_.ep) return fsdpp::forward(block.experts, x, routing.expert_ids, routing.weights);
  moe::ExpertDispatch d(x, routing.expert_ids, layout_.num_experts, layout_.ep, name_);
  // Through fsdpp::forward: the experts may be an FSDP unit over their own mesh.
  auto y = fsdpp::forward(block.experts, d.tokens, d.tokens_per_expert);
  return d.combine(y, routing.weights);
}

Qwen3MoeLayerOutput MoeHooks::sparse_block(Qwen3MoeSparseMoeBlockImpl& block, const at::Tensor& x) {
  const auto& tp = layout_.tp;
  const int64_t D = x.size(-1);
  if (!layout_.tensor_parallel()) {
    const auto flat = x.reshape({-1, D});
    auto routing = block.route(flat, block.gate->weight);
    return {run_experts(block, flat, routing).view(x.sizes()), routing.logits};
  }
  const std::string what = name_;
  if (layout_.split_experts && !layout_.sequence_parallel) {
    // Every tp rank routes the same tokens; its experts' slices give partial outputs. The
    // routing weights multiply those partials, so their gradient is summed over tp too.
    const auto flat = x.reshape({-1, D});
    auto routing = block.route(flat, block.gate->weight);
    auto weights = tp::copy_to_region(routing.weights, tp, what);
    auto xe = tp::copy_to_region(flat, tp, what);
    auto y = fsdpp::forward(block.experts, xe, routing.expert_ids, weights);
    return {tp::reduce_from_region(y, tp, what).view(x.sizes()), routing.logits};
  }
  if (layout_.split_experts) {
    // Sequence parallel: route this rank's chunk, then every rank computes its slices over the
    // whole sequence and keeps its chunk of the sum.
    const int64_t B = x.size(0), chunk = x.size(1);
    auto routing = block.route(x.reshape({-1, D}), tp::copy_to_region(block.gate->weight, tp, what));
    const int64_t k = routing.expert_ids.size(1);
    at::Tensor ids;
    {
      at::NoGradGuard no_grad;
      ids = tp::whole_of_chunks(routing.expert_ids.view({B, chunk, k}), tp, 1, what).reshape({-1, k});
    }
    auto weights = tp::gather_from_sequence(routing.weights.view({B, chunk, k}), tp, 1, what);
    auto whole = tp::gather_from_sequence(x, tp, 1, what);  // (B,T,D)
    auto y = fsdpp::forward(block.experts, whole.reshape({-1, D}), ids, weights.reshape({-1, k}));
    return {tp::scatter_to_sequence(y.view(whole.sizes()), tp, 1, what), routing.logits};
  }
  // Whole experts: each tp rank routes and computes its own chunk of the tokens.
  const auto mine = layout_.sequence_parallel ? x : tp::chunk_of_whole(x, tp, 1, what);
  const auto flat = mine.reshape({-1, D});
  auto routing = block.route(flat, tp::copy_to_region(block.gate->weight, tp, what));
  auto y = run_experts(block, flat, routing).view(mine.sizes());
  return {layout_.sequence_parallel ? y : tp::whole_of_chunks(y, tp, 1, what), routing.logits};
}

at::Tensor MoeHooks::global_statistics(const at::Tensor& local) {
  at::Tensor s = local;
  // Each tp rank's tokens are its own: summed (their gradient is each rank's own, as the loss
  // is the same on every tp rank and gradients are not averaged over tp).
  if (layout_.routes_own_tokens()) s = tp::reduce_from_region(s, layout_.tp, "load_balancing_loss");
  if (layout_.batch && layout_.batch->size() > 1) {
    // In double, so that the sum over ranks rounds once.
    s = moe::sum_over_ranks(s.to(at::kDouble), layout_.batch, "load_balancing_loss").to(at::kFloat);
  }
  const int64_t E = layout_.num_experts;
  auto host = s.narrow(0, 0, E).detach().to(at::kCPU);
  load_->assign(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e) (*load_)[static_cast<size_t>(e)] = std::llround(host[e].item<double>());
  return s;
}

MoeLayout moe_layout_of(Qwen3MoeImpl& model) {
  if (auto* h = dynamic_cast<MoeHooks*>(model.parallel.get())) return h->layout();
  MoeLayout layout;
  layout.num_experts = model.config().num_experts;
  return layout;
}

std::shared_ptr<std::vector<int64_t>> install_moe_hooks(Qwen3MoeImpl& model, const MoeLayout& layout) {
  auto* old = dynamic_cast<MoeHooks*>(model.parallel.get());
  auto load = old ? old->load() : std::make_shared<std::vector<int64_t>>();
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& layer = *model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    if (layer.moe) {
      layer.moe->parallel = std::make_shared<MoeHooks>(layout, fmt::format("layers.{}.mlp", i), load);
    }
  }
  model.parallel = std::make_shared<MoeHooks>(layout, "model", load);
  return load;
}

}  // namespace fsdpp::models::detail
