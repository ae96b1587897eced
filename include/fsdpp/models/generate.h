#pragma once
// Autoregressive sampling for any causal language model given as the logits of a context's last
// position: fsdpp's Llama (models::generate in llama.h) and every models::CausalLM use it, with
// a KV cache (cached_last_logits) where the model has one.
//
//   auto ids = models::sample_tokens([&](const at::Tensor& ctx) { return last_logits(ctx); },
//                                    {.max_seq_len = 2048, .vocab_size = 256}, prompt, options);
//   auto fast = models::cached_last_logits(
//       [&](const at::Tensor& t, models::KVCache& c) { return fsdpp::forward(model, t, c); }, L);

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "fsdpp/models/kv_cache.h"

namespace fsdpp::models {

// Hugging Face generate()'s sampling knobs.
struct GenerateOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  double top_p = 1.0;        // nucleus: the fewest tokens whose probabilities sum to >= top_p
  // > 0: only ids below it are drawn, greedy or sampled (the tokenizer's vocabulary, when the
  // model has more embedding rows than the tokenizer has tokens: those ids decode to nothing).
  int64_t allowed_vocab = 0;
  std::optional<at::Generator> generator;
  // One per row of a (B, T0) prompt: row b's tokens are drawn with its own generator, so that
  // they depend on its seed alone, not on the other rows or the batch (sampling in training,
  // where each rank holds other rows). Empty: `generator` for the whole batch.
  std::vector<at::Generator> row_generators;
  // Called with the (B, T) tokens after each new one; returning true stops (stop strings).
  std::function<bool(const at::Tensor&)> stop;
};

struct SampledModel {
  int64_t max_seq_len = 1;  // the context is cropped to its last max_seq_len tokens
  int64_t vocab_size = 1;
};

// Appends up to max_new_tokens tokens to prompt (T0) or (B,T0) (on the prompt's device) and
// returns (B, T0 + n) (or (T0 + n) for a 1-D prompt). last_logits(context (B,t) int64) returns
// the (B,V) logits of the context's last position over the whole vocabulary. Every rank of a
// sharded model calls it with the same prompt and an identically seeded generator, so all
// sample the same tokens. ConfigError for a bad prompt or option.
at::Tensor sample_tokens(const std::function<at::Tensor(const at::Tensor&)>& last_logits,
                         const SampledModel& model, const at::Tensor& prompt,
                         const GenerateOptions& options);

// A last_logits for sample_tokens that keeps a KV cache of `n_layers` layers: each call whose
// context is the previous one plus one token runs that token alone through
// forward(tokens (B,t), cache) -> logits (B,t,V); any other context (the first, or one cropped
// to max_seq_len, whose positions moved) starts the cache again from the whole context.
std::function<at::Tensor(const at::Tensor&)> cached_last_logits(
    std::function<at::Tensor(const at::Tensor&, KVCache&)> forward, size_t n_layers);

}  // namespace fsdpp::models
