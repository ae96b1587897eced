#pragma once
// Qwen3-MoE cut into pipeline stages by layers, as the Llama is (fsdpp/models/llama_stages.h):
// the embedding and the head count as layers, so a model of L decoder layers has L + 2 units,
// and a stage shares its modules (the very same parameters, under the model's names).
//
//   Qwen3Moe model(cfg);                                    // whole, from cfg.seed
//   auto stages = split_qwen3_moe(model, even_units_per_stage(qwen3_moe_pipeline_units(cfg), 4));
//
// The load-balancing loss is over every sparse layer of the whole model (transformers' sums over
// layers before the product), so stages carry its statistics (router_statistics) forward with
// the hidden states: a stage's output is the hidden state (B,T,D) with k = ceil((2E+2)/D) more
// positions holding the statistics in batch row 0 (float32, or float64 for float64 hidden
// states; the hidden state's dtype travels with them and is restored). The last stage adds
// router_aux_loss_coef times the loss of the statistics summed over the global batch (the model's
// parallel hooks) to the cross entropy, as Qwen3MoeImpl::forward(tokens, targets, true) does,
// and its gradient reaches every stage's routers through the same positions.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/token_loss.h"

namespace fsdpp::models {

// L + 2: the embedding, the decoder layers, the head.
int64_t qwen3_moe_pipeline_units(const Qwen3MoeConfig& cfg);

class Qwen3MoeStageImpl : public torch::nn::Module {
 public:
  // Units [first_unit, first_unit + num_units) of `model`, sharing its modules and its parallel
  // hooks (apply tensor and expert parallelism to the model before cutting it).
  Qwen3MoeStageImpl(Qwen3MoeImpl& model, int64_t first_unit, int64_t num_units);

  // The first stage takes tokens (B,T) int64; the others what the previous one returned; the
  // last returns logits (B,T,V) (this rank's vocabulary columns under tensor parallelism).
  at::Tensor forward(const at::Tensor& x);
  // The same with document masking: the microbatch's token positions (B,T) int64, which every
  // stage is given (Qwen3MoeImpl::forward's positions; undefined: forward(x)).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions);
  // The last stage: the mean cross entropy of its logits plus router_aux_loss_coef times the
  // load-balancing loss of the forward just run (it must be the last forward of this stage).
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets);
  // The same with `token_loss` of (logits, targets) in place of the cross entropy (empty: the
  // cross entropy).
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets, const TokenLoss& token_loss);
  // The load-balancing loss of the last forward (unscaled, detached: a value), on the last stage.
  const at::Tensor& last_aux_loss() const { return aux_; }

  bool has_embedding() const { return !embed_tokens.is_empty(); }
  bool has_head() const { return !norm.is_empty(); }
  int64_t first_unit() const { return first_unit_; }
  int64_t num_units() const { return num_units_; }

  torch::nn::Embedding embed_tokens{nullptr};  // first stage only
  std::vector<Qwen3MoeDecoderLayer> layers;     // registered as "layers.<global index>"
  RMSNorm norm{nullptr};                        // last stage only, with lm_head
  torch::nn::Linear lm_head{nullptr};

 private:
  Qwen3MoeConfig cfg_;
  std::shared_ptr<Qwen3MoeParallelHooks> parallel_;
  std::shared_ptr<LlamaParallelHooks> tensor_parallel_;
  int64_t first_unit_ = 0;
  int64_t num_units_ = 0;
  at::Tensor statistics_;  // the last forward's, on the last stage
  at::Tensor aux_;
};
TORCH_MODULE(Qwen3MoeStage);

// One stage per count, in order; the counts must add up to qwen3_moe_pipeline_units(config).
// Tied word embeddings are refused (the table would live on the first and the last stage).
std::vector<Qwen3MoeStage> split_qwen3_moe(Qwen3Moe& model, const std::vector<int>& units_per_stage);

}  // namespace fsdpp::models
