#pragma once
// The small Qwen3-MoE the memory-estimate tests measure: 4 experts (top 2) in two sparse layers
// around a dense one, narrow enough to build and step in a unit test.

#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::test {

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
