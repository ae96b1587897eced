#pragma once
// A Llama cut into pipeline stages by layers (docs/pipeline.md#stages). The embedding and the
// head (final norm and output projection) count as layers, as torchtitan counts them, so a model
// with L blocks has L + 2 units to place: [tok_embeddings, layers.0, ..., layers.L-1, head].
//
//   Llama model(cfg);                                          // whole, from cfg.seed
//   auto stages = split_llama(model, even_units_per_stage(llama_pipeline_units(cfg), 4));
//   stages[1]->named_parameters();   // "layers.1.attention.wq.weight", ...: the model's names
//
// A stage shares its modules with the model it was cut from: the very same parameter tensors,
// registered under the same names, so a stage is exactly its slice of the model built whole
// from the seed (every rank builds the whole model and keeps its stages; the rest is freed
// with the model). The models layer knows nothing of the pipeline runtime: a stage is a module
// with at::Tensor forward(at::Tensor), which fsdpp::pipeline::make_stage wraps.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdpp/models/llama.h"

namespace fsdpp::models {

// L + 2: the embedding, the blocks, the head.
int64_t llama_pipeline_units(const LlamaConfig& cfg);
// What those units are, for messages (Llama's and Qwen3-MoE's): "the embedding, 4 blocks and the
// head".
std::string language_model_units(int64_t n_layers);

// `units` split into `num_stages` counts as even as can be, the earlier stages taking one more
// when they do not divide (each at least 1; ConfigError when units < num_stages).
std::vector<int> even_units_per_stage(int64_t units, int num_stages);

// torchtitan's pipeline_parallel_layers_per_stage: ceil(units / layers_per_stage) stages of
// layers_per_stage units, the last one taking what is left.
std::vector<int> units_per_stage(int64_t units, int layers_per_stage);

class LlamaStageImpl : public torch::nn::Module {
 public:
  // Units [first_unit, first_unit + num_units) of `model`, sharing its modules.
  LlamaStageImpl(LlamaImpl& model, int64_t first_unit, int64_t num_units);

  // The first stage takes tokens (B,T) int64, the others hidden states (B,T,C); the last
  // returns logits (B,T,V), the others hidden states (B,T,C).
  at::Tensor forward(const at::Tensor& x);
  // The same with document masking: the microbatch's token positions (B,T) int64, which every
  // stage is given (LlamaImpl::forward's positions; undefined: forward(x)).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& positions);
  // The mean cross entropy of the last stage's logits, as LlamaImpl::forward(tokens, targets).
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets) const;

  bool has_embedding() const { return !tok_embeddings.is_empty(); }
  bool has_head() const { return !norm.is_empty(); }
  int64_t first_unit() const { return first_unit_; }
  int64_t num_units() const { return num_units_; }

  torch::nn::Embedding tok_embeddings{nullptr};  // first stage only
  std::vector<TransformerBlock> blocks;          // registered as "layers.<global index>"
  RMSNorm norm{nullptr};                         // last stage only, with output
  torch::nn::Linear output{nullptr};
  std::shared_ptr<LlamaParallelHooks> parallel;  // the model's (tensor parallelism), or null

 private:
  int64_t first_unit_ = 0;
  int64_t num_units_ = 0;
  int64_t max_seq_len_ = 0;
};
TORCH_MODULE(LlamaStage);

// One stage per count, in order; the counts must add up to llama_pipeline_units(config).
// A model with tied embeddings is refused (its table would live on the first and last stage).
std::vector<LlamaStage> split_llama(Llama& model, const std::vector<int>& units_per_stage);

}  // namespace fsdpp::models
