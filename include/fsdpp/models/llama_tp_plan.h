#pragma once
// The built-in tensor-parallel plan for fsdpp's Llama (torchtitan's): wq/wk/wv and w1/w3
// column-wise, wo and w2 row-wise, the embedding and the output head split along the
// vocabulary with the vocab-parallel loss (logits are never gathered), and, with sequence
// parallelism, norms and residuals on sequence shards.
//
//   models::Llama model(cfg);                                  // built whole from cfg.seed
//   auto tp = models::parallelize_llama(*model, mesh->group("tp"), {.sequence_parallel = true});
//   auto out = model->forward(tokens, targets);   // out.logits: this rank's vocab columns
//   out.loss.backward();                          // the same loss on every rank of the group
//   fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tp.outer_layout(*model)), 1.0);
//
// Every rank of the group must get the same tokens. Errors ([tp] ConfigError), checked before
// anything is changed: n_heads or n_kv_heads not divisible by the degree (each rank computes
// whole heads; grouped-query attention with fewer kv heads than ranks names n_kv_heads and the
// degree); vocab_size or the FFN hidden size smaller than the degree. Uneven vocab and FFN
// sizes are split unevenly and stay exact. Under sequence parallelism the sequence length
// must divide by the degree (an error at the first forward naming the length).

#include "fsdpp/models/llama.h"
#include "fsdpp/tp/plan.h"

// In models, beside the model it splits, as torchtitan keeps its plans: tp/ knows no model.

namespace fsdpp::models {

struct LlamaTensorParallelOptions {
  bool sequence_parallel = false;
};

// The errors above that need only the config and the degree, for a caller that checks before it
// builds anything (fsdpp-train's config check names its keys in front of them).
void check_tensor_parallel(const LlamaConfig& cfg, int degree);

// The plan by parameter-owning module names ("layers.0.attention.wq": COLWISE, ...).
tp::ParallelPlan llama_plan(const LlamaConfig& cfg);

// Checks the config against the group's size, reshards the parameters by llama_plan, sets each
// attention's local head counts and installs the communication hooks.
tp::TensorParallel parallelize_llama(LlamaImpl& model, const tp::GroupPtr& group,
                                 LlamaTensorParallelOptions options = {});

}  // namespace fsdpp::models
