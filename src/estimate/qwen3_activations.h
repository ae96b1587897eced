#pragma once
// What autograd keeps of fsdpp's Qwen3-MoE decoder layers (src/models/qwen3_moe.cpp, and the
// expert-parallel dispatch of src/moe/dispatch.cpp), tensor by tensor, as the estimator's ledger
// sees them (private to src/estimate/); docs/estimate.md#mixture-of-experts lists them.

#include <functional>

#include "decoder_activations.h"
#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp::estimate_detail {

// The MoE sizes beside Dims (whose Q and K are n_heads and n_kv_heads times head_dim, and whose
// F is the dense layers' SwiGLU width).
struct MoeDims {
  int64_t E = 0;    // experts of a sparse layer (all of them: the router's width)
  int64_t k = 0;    // top-k
  int64_t I = 0;    // an expert's SwiGLU width
  int64_t hd = 0;   // head_dim
  int64_t Hkv = 0;  // kv heads
  int ep = 1;       // expert-parallel degree: E / ep experts here, rows sent by all-to-all
  bool router_logits = true;  // kept for the load-balancing loss until the step's end
  // Tensor parallelism (models/qwen3_moe_hooks.cpp): experts split over tp (I is this rank's
  // width; every rank computes its slices for the same tokens and the partial outputs are
  // summed), or whole, each tp rank routing its own chunk of the tokens (gathered back after).
  int tp = 1;
  bool split = true;
  bool sp = false;
  // Rows this rank routes (its chunk under whole experts, its sequence shard under SP) and rows
  // whose k copies its experts compute, of the d.BT tokens of its batch.
  int64_t route_rows(int64_t BT) const { return tp > 1 && (sp || !split) ? BT / tp : BT; }
  int64_t expert_rows(int64_t BT) const { return tp > 1 && !split ? BT / tp : BT; }
};

// The MoE sizes of a shape on this rank (zeros but head_dim and kv heads for a dense model).
MoeDims moe_dims(const DecoderShape& shape, int tp, int ep, bool split_experts, bool sequence_parallel);

// Where the experts' FSDP unit gathers, reduces and frees (expert parallelism makes it a unit of
// its own); no-ops when the experts are part of the layer's unit.
struct ExpertUnitHooks {
  std::function<void()> before_forward, after_forward, before_backward, after_backward;
};

// Qwen3 attention half of a layer: input_layernorm, q/k/v, per-head q_norm and k_norm, rotary
// (rotate-half), repeat_kv, SDPA, o_proj and the residual. Fills s.x, s.attn and s.h.
BlockSaved qwen3_attention_forward(Ledger& l, const Dims& d, const MoeDims& m, Id x);
// post_attention_layernorm and the MLP: a dense SwiGLU of width d.F, or the router and the
// experts (each token's k rows). Fills s.ffn and s.out; the router's logits go to `router_logits`
// (the caller's, kept until the step's end when m.router_logits).
void qwen3_mlp_forward(Ledger& l, const Dims& d, const MoeDims& m, bool sparse, BlockSaved& s,
                       std::vector<Id>& router_logits, const ExpertUnitHooks& hooks);
// The load-balancing loss over the sparse layers' router logits: softmax (fp32) saved per layer.
std::vector<Id> load_balancing_forward(Ledger& l, const Dims& d, const MoeDims& m, int64_t sparse_layers);

// Backward of the MLP half from the block output's gradient g; returns the gradient of h (the
// residual after attention, g plus the norm's), frees s.ffn and s.h. `grad` takes the layer
// unit's gradients, `expert_grad` the experts' (the same unit's without expert parallelism).
Id qwen3_mlp_backward(Ledger& l, const Dims& d, const MoeDims& m, bool sparse, BlockSaved& s, Id g,
                      const GradAlloc& grad, const GradAlloc& expert_grad, const ExpertUnitHooks& hooks);
// Backward of the attention half from the gradient of h; returns the gradient of the layer's
// input, frees s.attn and s.x.
Id qwen3_attention_backward(Ledger& l, const Dims& d, const MoeDims& m, BlockSaved& s, Id ghh,
                            const GradAlloc& grad);

}  // namespace fsdpp::estimate_detail
