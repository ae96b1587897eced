// The architectures fsdpp-train trains, behind models::CausalLM. See
// include/fsdpp/models/causal_lm.h.
#include "fsdpp/models/causal_lm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/models/hf_llama.h"
#include "fsdpp/models/hf_qwen3_moe.h"

namespace fsdpp::models {
namespace {

// A key whose value differs between a checkpoint's config and the model: its weights were
// trained for another computation.
template <typename T>
void same(const char* key, const T& saved, const T& now, const std::string& source) {
  FSDPP_CHECK_AS(ConfigError, saved == now,
                 "[train] model.{}={} differs from the checkpoint's {} ({}): its weights were "
                 "trained under {}={}. Resume with model.{}={}, or start a new run (without "
                 "training.resume_from_checkpoint) to train another model",
                 key, now, saved, source, key, saved, key, saved);
}

class LlamaLM final : public CausalLM {
 public:
  explicit LlamaLM(Llama model) : model_(std::move(model)) {}
  torch::nn::Module& module() override { return *model_; }
  const char* architecture() const override { return "llama"; }
  CausalLMOutput forward(const at::Tensor& tokens, const at::Tensor& targets,
                         const at::Tensor& positions = {}) override {
    if (positions.defined()) {
      auto out = fsdpp::forward(model_, tokens, targets, std::vector<int64_t>{}, positions);
      return {out.logits, out.loss, at::Tensor(), {}};
    }
    // No targets (a distillation teacher): the logits alone.
    if (!targets.defined()) return {fsdpp::forward(model_, tokens), at::Tensor(), at::Tensor(), {}};
    auto out = fsdpp::forward(model_, tokens, targets);
    return {out.logits, out.loss, at::Tensor(), {}};
  }
  CausalLMOutput forward_features(const at::Tensor& tokens, bool /*aux_loss*/,
                                  const std::vector<int64_t>& hidden_layers,
                                  const at::Tensor& positions = {}) override {
    auto out = positions.defined()
                   ? fsdpp::forward(model_, tokens, at::Tensor(), hidden_layers, positions)
                   : fsdpp::forward(model_, tokens, at::Tensor(), hidden_layers);
    return {out.logits, at::Tensor(), at::Tensor(), std::move(out.hidden_states)};
  }
  at::Tensor generate(const at::Tensor& prompt, const GenerateOptions& options) override {
    return models::generate(model_, prompt, options);
  }
  std::string describe() const override {
    const auto& c = model_->config();
    return fmt::format("Llama dim {} x {} layers, {} heads ({} kv), vocab {}", c.dim, c.n_layers,
                       c.n_heads, c.kv_heads(), c.vocab_size);
  }
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  LlamaParallelHooks* tensor_parallel() override { return model_->parallel.get(); }
  const InitPlan& init_plan() const override { return model_->init_plan(); }
  int64_t hidden_size() const override { return model_->config().dim; }
  int64_t num_layers() const override { return model_->config().n_layers; }
  std::string config_json() const override { return llama_config_to_json(model_->config()); }
  void check_same_model(const std::string& saved_json, const std::string& source) const override {
    const auto saved = llama_config_from_json(saved_json, source);
    const auto& now = model_->config();
    same("rope_theta", saved.rope_theta, now.rope_theta, source);
    same("norm_eps", saved.norm_eps, now.norm_eps, source);
    same("n_heads", saved.n_heads, now.n_heads, source);
    same("n_kv_heads", saved.kv_heads(), now.kv_heads(), source);
  }
  Llama& llama() { return model_; }

 private:
  Llama model_;
};

class Qwen3MoeLM final : public CausalLM {
 public:
  explicit Qwen3MoeLM(Qwen3Moe model) : model_(std::move(model)) {}
  torch::nn::Module& module() override { return *model_; }
  const char* architecture() const override { return "qwen3_moe"; }
  CausalLMOutput forward(const at::Tensor& tokens, const at::Tensor& targets,
                         const at::Tensor& positions = {}) override {
    // The router logits are asked for in training: transformers adds the load-balancing loss
    // then (output_router_logits), and the metrics report it.
    auto out = positions.defined()
                   ? fsdpp::forward(model_, tokens, targets, targets.defined(),
                                    std::vector<int64_t>{}, positions)
                   : fsdpp::forward(model_, tokens, targets,
                                    /*output_router_logits=*/targets.defined());
    return {out.logits, out.loss, out.aux_loss, {}};
  }
  CausalLMOutput forward_features(const at::Tensor& tokens, bool aux_loss,
                                  const std::vector<int64_t>& hidden_layers,
                                  const at::Tensor& positions = {}) override {
    auto out = positions.defined()
                   ? fsdpp::forward(model_, tokens, at::Tensor(), aux_loss, hidden_layers,
                                    positions)
                   : fsdpp::forward(model_, tokens, at::Tensor(), aux_loss, hidden_layers);
    return {out.logits, at::Tensor(), out.aux_loss, std::move(out.hidden_states)};
  }
  at::Tensor generate(const at::Tensor& prompt, const GenerateOptions& options) override {
    auto last_logits = cached_last_logits(
        [&](const at::Tensor& tokens, KVCache& cache) { return fsdpp::forward(model_, tokens, cache); },
        model_->layers->size());
    const auto& c = model_->config();
    return sample_tokens(last_logits, {c.max_position_embeddings, c.vocab_size},
                         prompt.to(model_->embed_tokens->weight.device(), at::kLong), options);
  }
  std::string describe() const override {
    const auto& c = model_->config();
    int64_t sparse = 0;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) sparse += c.is_sparse_layer(i) ? 1 : 0;
    return fmt::format("Qwen3-MoE hidden {} x {} layers ({} sparse: {} experts, top {}), {} "
                       "heads ({} kv) of {}, vocab {}",
                       c.hidden_size, c.num_hidden_layers, sparse, c.num_experts,
                       c.num_experts_per_tok, c.num_attention_heads, c.num_key_value_heads,
                       c.head_dim, c.vocab_size);
  }
  int64_t vocab_size() const override { return model_->config().vocab_size; }
  LlamaParallelHooks* tensor_parallel() override { return model_->tensor_parallel.get(); }
  const InitPlan& init_plan() const override { return model_->init_plan(); }
  int64_t hidden_size() const override { return model_->config().hidden_size; }
  int64_t num_layers() const override { return model_->config().num_hidden_layers; }
  std::string config_json() const override { return qwen3_moe_config_to_hf(model_->config()); }
  void check_same_model(const std::string& saved_json, const std::string& source) const override {
    const auto saved = qwen3_moe_config_from_hf(saved_json, source);
    const auto& now = model_->config();
    same("rope_theta", saved.rope_theta, now.rope_theta, source);
    same("rms_norm_eps", saved.rms_norm_eps, now.rms_norm_eps, source);
    same("num_attention_heads", saved.num_attention_heads, now.num_attention_heads, source);
    same("num_key_value_heads", saved.num_key_value_heads, now.num_key_value_heads, source);
    same("num_experts_per_tok", saved.num_experts_per_tok, now.num_experts_per_tok, source);
    same("norm_topk_prob", saved.norm_topk_prob, now.norm_topk_prob, source);
    same("decoder_sparse_step", saved.decoder_sparse_step, now.decoder_sparse_step, source);
    same("mlp_only_layers", fmt::format("[{}]", fmt::join(saved.mlp_only_layers, ", ")),
         fmt::format("[{}]", fmt::join(now.mlp_only_layers, ", ")), source);
  }
  Qwen3Moe& qwen3_moe() { return model_; }

 private:
  Qwen3Moe model_;
};

}  // namespace

at::Tensor CausalLM::cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                   double divisor) {
  auto* tp = tensor_parallel();
  return tp ? tp->loss(logits, targets, divisor) : token_cross_entropy(logits, targets, divisor);
}

std::unique_ptr<CausalLM> causal_lm(Llama model) { return std::make_unique<LlamaLM>(std::move(model)); }
std::unique_ptr<CausalLM> causal_lm(Qwen3Moe model) {
  return std::make_unique<Qwen3MoeLM>(std::move(model));
}

Llama* as_llama(CausalLM& lm) {
  auto* l = dynamic_cast<LlamaLM*>(&lm);
  return l ? &l->llama() : nullptr;
}

Qwen3Moe* as_qwen3_moe(CausalLM& lm) {
  auto* q = dynamic_cast<Qwen3MoeLM*>(&lm);
  return q ? &q->qwen3_moe() : nullptr;
}

}  // namespace fsdpp::models
