#include "fsdpp/models/llama_tp_plan.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "tensor_parallel_hooks.h"

namespace fsdpp::models {

using namespace fsdpp::tp;  // the plan is written in tp's vocabulary

void check_tensor_parallel(const LlamaConfig& cfg, int n) {
  FSDPP_CHECK_AS(ConfigError, cfg.n_heads % n == 0,
                 "[tp] Llama: n_heads={} is not divisible by the tensor-parallel degree {}; each "
                 "rank computes whole attention heads",
                 cfg.n_heads, n);
  FSDPP_CHECK_AS(ConfigError, cfg.kv_heads() >= n,
                 "[tp] Llama: n_kv_heads={} is smaller than the tensor-parallel degree {}; "
                 "grouped-query attention needs at least one kv head per rank (replicated kv "
                 "heads are not supported)",
                 cfg.kv_heads(), n);
  FSDPP_CHECK_AS(ConfigError, cfg.kv_heads() % n == 0,
                 "[tp] Llama: n_kv_heads={} is not divisible by the tensor-parallel degree {}; "
                 "each rank computes whole kv heads",
                 cfg.kv_heads(), n);
  FSDPP_CHECK_AS(ConfigError, cfg.vocab_size >= n,
                 "[tp] Llama: vocab_size={} is smaller than the tensor-parallel degree {}",
                 cfg.vocab_size, n);
  FSDPP_CHECK_AS(ConfigError, cfg.ffn_hidden_dim() >= n,
                 "[tp] Llama: the FFN hidden size {} is smaller than the tensor-parallel degree {}",
                 cfg.ffn_hidden_dim(), n);
}

ParallelPlan llama_plan(const models::LlamaConfig& cfg) {
  ParallelPlan plan{{"tok_embeddings", ParallelStyle::ROWWISE}};
  if (!cfg.tie_embeddings) plan["output"] = ParallelStyle::COLWISE;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const auto p = fmt::format("layers.{}.", i);
    for (const char* n : {"attention.wq", "attention.wk", "attention.wv", "feed_forward.w1",
                          "feed_forward.w3"}) {
      plan[p + n] = ParallelStyle::COLWISE;
    }
    plan[p + "attention.wo"] = ParallelStyle::ROWWISE;
    plan[p + "feed_forward.w2"] = ParallelStyle::ROWWISE;
  }
  return plan;
}

TensorParallel parallelize_llama(models::LlamaImpl& model, const GroupPtr& group,
                                 LlamaTensorParallelOptions options) {
  FSDPP_CHECK_AS(ConfigError, group != nullptr, "[tp] parallelize_llama: no group");
  const auto& cfg = model.config();
  const int n = group->size();
  check_tensor_parallel(cfg, n);
  FSDPP_CHECK_AS(ConfigError, model.parallel == nullptr,
                 "[tp] parallelize_llama: the model is already tensor-parallel");
  auto tp = parallelize_module(model, group, llama_plan(cfg));
  auto hooks = std::make_shared<detail::TensorParallelHooks>(
      group, options.sequence_parallel, tp.placement("tok_embeddings.weight").range.offset);
  model.parallel = hooks;
  model.norm->parallel = hooks;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    auto& block = *model.layers->ptr<models::TransformerBlockImpl>(i);
    block.attention->n_heads = cfg.n_heads / n;
    block.attention->n_kv_heads = cfg.kv_heads() / n;
    block.attention->parallel = hooks;
    block.feed_forward->parallel = hooks;
    block.attention_norm->parallel = hooks;
    block.ffn_norm->parallel = hooks;
  }
  return tp;
}

}  // namespace fsdpp::models
