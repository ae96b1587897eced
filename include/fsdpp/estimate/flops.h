#pragma once
// The arithmetic of a training step, for model FLOPs utilisation (MFU): what the metrics, the
// GPU benchmark and docs/gpus.md divide by the device's measured matrix-multiply rate.
//
//   const double f = fsdpp::training_flops_per_token(model, seq_len);   // 6N + attention
//   const double mfu = f * tokens_per_s / (ranks * peak_flops_per_rank);

#include <cstdint>

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp {

// Forward and backward FLOPs per token (a multiply-add counted as 2), as PaLM's appendix B and
// torchtitan count them: 6 x the parameters a token's forward multiplies with (the token
// embedding is a lookup and is left out; an untied output layer counts; MoE: top_k experts
// per sparse layer) plus 12 x layers x heads x head_dim x seq_len for the attention scores
// and values (the causal mask's skipped half counted, as they do). Activation checkpointing's
// recomputed forward is not counted: MFU counts the model's FLOPs, not the hardware's.
// ConfigError for a model without a shape (described by its parameter count alone).
double training_flops_per_token(const ModelDescription& model, int64_t seq_len);

}  // namespace fsdpp
