#pragma once
// The tests' small Llama and Qwen3-MoE configs, each written once; a test sets what it needs
// beyond them (a seed, a sequence length, an uneven size) on the copy it gets.

#include <cstdint>

#include "fsdpp/models/llama.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::test {

// A Llama of 64 tokens, width 32 and 4 heads of 8 (Llama's FFN rule: 96).
inline models::LlamaConfig tiny_llama(int64_t n_layers, int64_t max_seq_len, uint64_t seed,
                                      int64_t dim = 32) {
  models::LlamaConfig c;
  c.vocab_size = 64;
  c.dim = dim;
  c.n_layers = n_layers;
  c.n_heads = 4;
  c.max_seq_len = max_seq_len;
  c.seed = seed;
  return c;
}

// Uneven everywhere: 61 vocabulary rows, an FFN of 90, 8 query and 4 kv heads of 4, so that no
// split (FSDP over 3 ranks, TP over 2 or 4, their rows) divides every parameter.
inline models::LlamaConfig uneven_llama(int64_t n_layers, int64_t max_seq_len, uint64_t seed) {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.dim = 32;
  c.n_layers = n_layers;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.ffn_hidden = 90;
  c.max_seq_len = max_seq_len;
  c.seed = seed;
  return c;
}

// A Qwen3-MoE of 64 tokens, width 32, 4 heads of 8 over 2 kv heads, dense MLPs of 48 and
// experts of 16, top-2.
inline models::Qwen3MoeConfig tiny_moe(int64_t n_layers, int64_t num_experts, uint64_t seed) {
  models::Qwen3MoeConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.moe_intermediate_size = 16;
  c.num_hidden_layers = n_layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.num_experts = num_experts;
  c.num_experts_per_tok = 2;
  c.seed = seed;
  return c;
}

// Narrower still, for the model's own tests: 40 tokens, width 16, three layers of which the middle
// one is dense, 4 experts of 8 with renormalised top-2, router logits spread (0.2).
inline models::Qwen3MoeConfig narrow_moe() {
  return models::Qwen3MoeConfig{.vocab_size = 40, .hidden_size = 16, .intermediate_size = 24,
                                .moe_intermediate_size = 8, .num_hidden_layers = 3,
                                .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 8,
                                .num_experts = 4, .num_experts_per_tok = 2, .norm_topk_prob = true,
                                .decoder_sparse_step = 1, .mlp_only_layers = {1},
                                .initializer_range = 0.2};
}

// The expert-parallel tests' model: 2 sparse layers of 8 experts, renormalised top-2, a router
// that the load-balancing loss moves and whose logits are spread well apart (a rounding
// difference of a split batch never flips a top-k choice).
inline models::Qwen3MoeConfig routed_moe(uint64_t seed) {
  auto c = tiny_moe(/*n_layers=*/2, /*num_experts=*/8, seed);
  c.norm_topk_prob = true;
  c.router_aux_loss_coef = 0.01;
  c.initializer_range = 0.1;
  return c;
}

// The memory-estimate tests' Llama: 97 vocabulary rows (padding over 2 or 4 ranks), width 48,
// 3 layers of 4 heads over kv heads.
inline models::LlamaConfig small_llama_config(bool tie, int64_t kv) {
  models::LlamaConfig c;
  c.vocab_size = 97;
  c.dim = 48;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = kv;
  c.max_seq_len = 32;
  c.tie_embeddings = tie;
  return c;
}

// The small Qwen3-MoE the memory-estimate tests measure: 4 experts (top 2) in two sparse layers
// around a dense one, narrow enough to build and step in a unit test.
inline models::Qwen3MoeConfig small_moe_config() {
  models::Qwen3MoeConfig c;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 64;
  c.moe_intermediate_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.norm_topk_prob = true;
  c.mlp_only_layers = {1};  // a dense layer between two sparse ones
  c.max_position_embeddings = 32;
  return c;
}

}  // namespace fsdpp::test
