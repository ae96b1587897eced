#pragma once
// The keys and values each attention layer computed for the tokens so far (Hugging Face's
// DynamicCache), so that sampling runs each new token alone through the model instead of the
// whole context again. fsdpp's Llama and Qwen3-MoE take one in forward(tokens, cache).
//
//   models::KVCache cache(n_layers);
//   auto logits = fsdpp::forward(model, prompt, cache);      // (B,T0,V); cache.length == T0
//   logits = fsdpp::forward(model, next_token, cache);       // (B,1,V): position T0
//
// Under FSDP every rank runs the same forwards (the units gather as in any forward); the cache
// holds this rank's activations only, never parameters.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdpp::models {

struct KVCache {
  struct Layer {
    at::Tensor k, v;  // (B, Hkv, t, head_dim) after RoPE; undefined while empty
  };
  explicit KVCache(size_t n_layers = 0) : layers(n_layers) {}
  // Forgets every cached token (the next forward starts at position 0).
  void reset() {
    for (auto& l : layers) l = {};
    length = 0;
  }

  std::vector<Layer> layers;
  int64_t length = 0;  // tokens cached: the position of the next token fed
};

// Attention of q (B, H, t, D) over the cached keys and values plus k, v (B, Hkv, t, D), which
// are appended to `cache` first: causal, the t new queries at positions L - t .. L - 1 of the
// L = cached + t keys. Grouped-query heads: kv head j serves query heads j*n_rep .. (j+1)*n_rep-1
// (H = Hkv * n_rep). SDPA's default scale (head_dim^-0.5). Returns (B, H, t, D).
at::Tensor cached_attention(KVCache::Layer& cache, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v);

}  // namespace fsdpp::models
