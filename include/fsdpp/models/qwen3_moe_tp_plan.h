#pragma once
// The built-in tensor-parallel plan for fsdpp's Qwen3-MoE: attention as the Llama's (q/k/v
// column-wise and o row-wise, each rank computing whole heads; q_norm and k_norm stay whole, and
// since every rank normalises other heads their weight's gradient is summed over the group),
// dense MLPs column/row-wise, the embedding and lm_head split along the vocabulary with the
// vocab-parallel loss (logits are never gathered), norms and residuals on sequence shards with
// sequence parallelism. The experts one of two ways (torchtitan's MOE_SHARDING.md):
//
//   split_experts = true   each expert's hidden size split over the group (gate_proj and up_proj
//                          along dim 1, down_proj along dim 2): every rank computes its slice of
//                          every expert for the same tokens and the partial outputs are summed
//                          (Megatron's expert tensor parallelism). Memory: E experts / tp.
//   split_experts = false  the experts whole, on every rank of the group or placed over an ep
//                          group by models::parallelize_qwen3_moe_experts afterwards: each rank
//                          routes and computes its own chunk of the sequence (its sequence
//                          shard, or a chunk of the replicated activations, gathered back after)
//                          so that no token is computed twice. Needed with expert parallelism.
//
//   models::Qwen3Moe model(cfg);                                 // built whole from cfg.seed
//   auto tp = models::parallelize_qwen3_moe(*model, mesh->group("tp"), {.sequence_parallel = true});
//   auto out = model->forward(tokens, targets, /*output_router_logits=*/true);
//   out.loss.backward();                      // the same loss on every rank of the group
//   fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tp.outer_layout(*model)), 1.0);
//
// Every rank of the group must get the same tokens. Errors ([tp] ConfigError), checked before
// anything is changed: num_attention_heads or num_key_value_heads not divisible by the degree;
// vocab_size, intermediate_size or (split experts) moe_intermediate_size smaller than the degree;
// a model already parallel. Under sequence parallelism, or with whole experts, the sequence
// length must divide by the degree (an error at the first forward naming the length).

#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/tp/plan.h"

namespace fsdpp::models {

struct Qwen3MoeTensorParallelOptions {
  bool sequence_parallel = false;
  bool split_experts = true;
};

// The plan of the Linear and Embedding modules by name ("layers.0.self_attn.q_proj": COLWISE,
// ...); the experts' stacked tensors are split by parallelize_qwen3_moe itself.
tp::ParallelPlan qwen3_moe_plan(const Qwen3MoeConfig& cfg);

// Checks the config against the group's size, reshards the parameters, sets each attention's
// local head counts and installs the communication hooks (the sparse blocks' included). The
// returned placements cover the split experts too.
tp::TensorParallel parallelize_qwen3_moe(Qwen3MoeImpl& model, const tp::GroupPtr& group,
                                         Qwen3MoeTensorParallelOptions options = {});

}  // namespace fsdpp::models
