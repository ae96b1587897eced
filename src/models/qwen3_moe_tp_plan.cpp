// Qwen3-MoE's tensor-parallel plan. See include/fsdpp/models/qwen3_moe_tp_plan.h and
// docs/tensor-parallel.md#qwen3-moe.
#include "fsdpp/models/qwen3_moe_tp_plan.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "fsdpp/tp/linear.h"
#include "qwen3_moe_hooks.h"
#include "tensor_parallel_hooks.h"

namespace fsdpp::models {

using namespace fsdpp::tp;  // the plan is written in tp's vocabulary
namespace {

void check_config(const Qwen3MoeConfig& cfg, int n, bool split_experts) {
  FSDPP_CHECK_AS(ConfigError, cfg.num_attention_heads % n == 0,
                 "[tp] Qwen3Moe: num_attention_heads={} is not divisible by the tensor-parallel "
                 "degree {}; each rank computes whole attention heads",
                 cfg.num_attention_heads, n);
  FSDPP_CHECK_AS(ConfigError, cfg.num_key_value_heads >= n && cfg.num_key_value_heads % n == 0,
                 "[tp] Qwen3Moe: num_key_value_heads={} is not a multiple of the tensor-parallel "
                 "degree {}; each rank computes whole kv heads (replicated kv heads are not "
                 "supported)",
                 cfg.num_key_value_heads, n);
  FSDPP_CHECK_AS(ConfigError, cfg.vocab_size >= n && cfg.intermediate_size >= n,
                 "[tp] Qwen3Moe: vocab_size={} and intermediate_size={} must be at least the "
                 "tensor-parallel degree {}",
                 cfg.vocab_size, cfg.intermediate_size, n);
  FSDPP_CHECK_AS(ConfigError, !split_experts || cfg.moe_intermediate_size >= n,
                 "[tp] Qwen3Moe: moe_intermediate_size={} is smaller than the tensor-parallel "
                 "degree {}; keep the experts whole (split_experts=false)",
                 cfg.moe_intermediate_size, n);
}

// Replaces the expert tensor's values by this rank's slice along `dim` (the same parameter
// object) and returns its placement.
Placement split_expert(at::Tensor& param, int64_t dim, const std::string& what, const GroupPtr& group) {
  Placement p;
  p.sharded = true;
  p.dim = dim;
  p.full_size = param.size(dim);
  p.range = checked_shard(what, "moe_intermediate_size", p.full_size, group);
  at::NoGradGuard no_grad;
  param.set_data(param.narrow(dim, p.range.offset, p.range.size).clone());
  return p;
}

}  // namespace

ParallelPlan qwen3_moe_plan(const Qwen3MoeConfig& cfg) {
  ParallelPlan plan{{"embed_tokens", ParallelStyle::ROWWISE}};
  if (!cfg.tie_word_embeddings) plan["lm_head"] = ParallelStyle::COLWISE;
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const auto p = fmt::format("layers.{}.", i);
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}) {
      plan[p + n] = ParallelStyle::COLWISE;
    }
    plan[p + "self_attn.o_proj"] = ParallelStyle::ROWWISE;
    if (!cfg.is_sparse_layer(i)) {
      plan[p + "mlp.gate_proj"] = ParallelStyle::COLWISE;
      plan[p + "mlp.up_proj"] = ParallelStyle::COLWISE;
      plan[p + "mlp.down_proj"] = ParallelStyle::ROWWISE;
    }
  }
  return plan;
}

TensorParallel parallelize_qwen3_moe(Qwen3MoeImpl& model, const GroupPtr& group,
                                     Qwen3MoeTensorParallelOptions options) {
  FSDPP_CHECK_AS(ConfigError, group != nullptr, "[tp] parallelize_qwen3_moe: no group");
  const auto& cfg = model.config();
  const int n = group->size();
  check_config(cfg, n, options.split_experts);
  auto layout = detail::moe_layout_of(model);
  FSDPP_CHECK_AS(ConfigError, model.tensor_parallel == nullptr && !layout.tp && !layout.ep,
                 "[tp] parallelize_qwen3_moe: the model is already tensor- or expert-parallel; "
                 "apply tensor parallelism first, then expert parallelism");
  auto placed = parallelize_module(model, group, qwen3_moe_plan(cfg));
  auto placements = placed.sharded();
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& layer = *model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    if (!layer.moe || !options.split_experts) continue;
    auto& e = *layer.moe->experts;
    const auto p = fmt::format("layers.{}.mlp.experts.", i);
    placements[p + "gate_proj"] = split_expert(e.gate_proj, 1, p + "gate_proj", group);
    placements[p + "up_proj"] = split_expert(e.up_proj, 1, p + "up_proj", group);
    placements[p + "down_proj"] = split_expert(e.down_proj, 2, p + "down_proj", group);
  }
  const int64_t vocab_offset = placed.placement("embed_tokens.weight").range.offset;
  auto hooks = std::make_shared<detail::TensorParallelHooks>(group, options.sequence_parallel,
                                                             vocab_offset);
  auto per_head = std::make_shared<detail::TensorParallelHooks>(
      group, options.sequence_parallel, vocab_offset, /*per_head=*/true);
  model.tensor_parallel = hooks;
  model.norm->parallel = hooks;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& layer = *model.layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
    auto& attn = *layer.self_attn;
    attn.n_heads = cfg.num_attention_heads / n;
    attn.n_kv_heads = cfg.num_key_value_heads / n;
    attn.parallel = hooks;
    attn.q_norm->parallel = per_head;
    attn.k_norm->parallel = per_head;
    layer.input_layernorm->parallel = hooks;
    layer.post_attention_layernorm->parallel = hooks;
    if (layer.dense) layer.dense->parallel = hooks;
  }
  layout.tp = group;
  layout.sequence_parallel = options.sequence_parallel;
  layout.split_experts = options.split_experts;
  detail::install_moe_hooks(model, layout);
  return TensorParallel(group, std::move(placements));
}

}  // namespace fsdpp::models
