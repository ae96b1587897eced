#pragma once
// What fsdpp-train needs of a decoder-only language model, whatever its architecture: the
// module to shard, checkpoint and optimize, a forward with its training loss, sampling, and its
// config as a checkpoint's model_config.json records it.
//
//   std::unique_ptr<models::CausalLM> lm = models::causal_lm(models::Qwen3Moe(cfg));
//   fsdpp::apply_fully_shard(lm->module(), policy, options);
//   auto out = lm->forward(tokens, targets);  // out.loss: what backward runs on
//   out.aux_loss;                             // MoE: the load-balancing loss (unscaled)

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "fsdpp/models/generate.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::models {

struct CausalLMOutput {
  at::Tensor logits;    // (B,T,V), or this rank's vocabulary columns under tensor parallelism
  at::Tensor loss;      // () mean cross entropy, plus router_aux_loss_coef * aux_loss for MoE
  at::Tensor aux_loss;  // () MoE's load-balancing loss, unscaled; undefined for dense models
  std::vector<at::Tensor> hidden_states;  // (B,T,hidden) of the layers forward_features asked for
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual torch::nn::Module& module() = 0;
  virtual const char* architecture() const = 0;  // model.architecture: "llama", "qwen3_moe"
  // Through fsdpp::forward: a sharded model works when every rank calls it. positions (B,T)
  // int64, when defined: document masking (each document's positions restart at 0; it attends
  // within itself and rotates by its own positions: LlamaImpl::forward).
  virtual CausalLMOutput forward(const at::Tensor& tokens, const at::Tensor& targets,
                                 const at::Tensor& positions = {}) = 0;
  // What a distillation loss needs, without the cross-entropy: the logits, a MoE's
  // load-balancing loss when `aux_loss` (as forward with targets computes it), and the outputs
  // of the decoder layers `hidden_layers` in hidden_states, in that order. Through
  // fsdpp::forward.
  virtual CausalLMOutput forward_features(const at::Tensor& tokens, bool aux_loss,
                                          const std::vector<int64_t>& hidden_layers,
                                          const at::Tensor& positions = {}) = 0;
  // The cross entropy of its logits (forward_features', this rank's vocabulary columns under
  // tensor parallelism) against targets, as forward computes it: the mean over the loss-bearing
  // tokens (targets != -100), or with divisor > 0 their sum over divisor (token_cross_entropy).
  at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, double divisor = 0);
  virtual at::Tensor generate(const at::Tensor& prompt, const GenerateOptions& options) = 0;
  virtual std::string describe() const = 0;  // one line for the log
  virtual int64_t vocab_size() const = 0;
  // Tensor parallelism's hooks, null without it: each rank's logits are then its vocabulary
  // columns (whole_logits gathers them) and sequence parallelism needs lengths its degree
  // divides (sequence_multiple).
  virtual LlamaParallelHooks* tensor_parallel() { return nullptr; }
  // How its weights are drawn from its seed (fsdpp/fsdp/deferred_init.h): for a model made on
  // the meta device and sharded, init_exact or init_per_shard give it its values.
  virtual const InitPlan& init_plan() const = 0;
  virtual int64_t hidden_size() const = 0;  // the width of hidden_states
  virtual int64_t num_layers() const = 0;   // decoder layers
  // model_config.json of its checkpoints (fsdpp-ckpt export-hf and fsdpp-generate read it).
  virtual std::string config_json() const = 0;
  // Throws ConfigError when a checkpoint's model_config.json (`saved`, read from `source`)
  // describes weights that mean something else in this model though their shapes fit (rope
  // theta, heads, experts per token, ...), naming the key and both values.
  virtual void check_same_model(const std::string& saved, const std::string& source) const = 0;
};

std::unique_ptr<CausalLM> causal_lm(Llama model);
std::unique_ptr<CausalLM> causal_lm(Qwen3Moe model);

// The Llama inside, or null: tensor parallelism, model.init_from's Hugging Face Llama and the
// memory estimate know this architecture only.
Llama* as_llama(CausalLM& lm);
Qwen3Moe* as_qwen3_moe(CausalLM& lm);

}  // namespace fsdpp::models
