#pragma once
// Where tensor parallelism communicates inside a decoder (fsdpp's Llama and Qwen3-MoE).
// fsdpp::models::parallelize_llama (fsdpp/models/llama_tp_plan.h) and parallelize_qwen3_moe
// (fsdpp/models/qwen3_moe_tp_plan.h) install one on the modules that take it; null, the default,
// runs the model whole. Abstract so that the models know nothing of process groups.

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fsdpp::models {

class LlamaParallelHooks {
 public:
  virtual ~LlamaParallelHooks() = default;
  // Before the projections that read an activation (wq/wk/wv, w1/w3, the output head).
  virtual at::Tensor enter(const at::Tensor& x, const char* where) = 0;
  // After a projection whose outputs are partial sums (wo, w2).
  virtual at::Tensor exit(const at::Tensor& y, const char* where) = 0;
  // tokens (B,T) -> the embedding through `table`.
  virtual at::Tensor embed(const at::Tensor& tokens, const at::Tensor& table) = 0;
  // A norm's weight as the forward uses it.
  virtual at::Tensor norm_weight(const at::Tensor& weight) = 0;
  // The cross entropy of the logits the head produced: the mean (divisor 0) or the sum over
  // divisor, as token_cross_entropy.
  virtual at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets, double divisor) = 0;
  // The logits over the whole vocabulary from what the head produced (for sampling, which
  // needs every token's probability; training never gathers them). Collective.
  virtual at::Tensor whole_logits(const at::Tensor& logits) = 0;
  // What the sequence length must be a multiple of (sequence parallelism splits it evenly).
  virtual int64_t sequence_multiple() const = 0;
};

}  // namespace fsdpp::models
