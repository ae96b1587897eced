#pragma once
// A decoder's layers in the estimator's ledger, whichever the architecture (private to
// src/estimate/): the sizes of one rank's batch, a layer's forward, its re-computation under
// activation checkpointing and its backward, with Llama's TransformerBlock
// (decoder_activations.h) or Qwen3-MoE's attention and MLP halves (qwen3_activations.h) behind
// them; and the embedding, the output head and the loss that both share.

#include <functional>
#include <vector>

#include "decoder_activations.h"
#include "qwen3_activations.h"

namespace fsdpp::estimate_detail {

// One rank's sizes for `batch` sequences of o.seq_len tokens: its tp shares of the heads, the
// FFN width and the vocabulary, in o.param_dtype.
Dims decoder_dims(const DecoderShape& shape, const EstimateOptions& o, int64_t batch);

struct DecoderLayers {
  const DecoderShape* shape;
  const Dims* d;
  const MoeDims* md;

  bool qwen3() const { return shape->qk_norm; }
  bool sparse(size_t layer) const { return shape->moe && shape->moe->sparse[layer]; }
  // Qwen3 makes its rotary tables (cos, sin in fp32) in each forward; -1 for a Llama, whose
  // tables are buffers.
  Id rope_tables(Ledger& l) const;
  // Layer `layer`'s forward from its input x; the router's logits go to `router_logits`, the
  // hooks gather and free the experts' unit around the MLP (Qwen3-MoE).
  BlockSaved forward(Ledger& l, size_t layer, Id x, std::vector<Id>& router_logits,
                     const ExpertUnitHooks& hooks) const;
  // Its forward again from its saved input (activation checkpointing): what backward needs.
  BlockSaved recompute(Ledger& l, size_t layer, Id x, const ExpertUnitHooks& hooks) const;
  // Its backward from the gradient of its output; returns the gradient of its input.
  // `between_halves` runs after the MLP's backward and before the attention's (Qwen3-MoE).
  Id backward(Ledger& l, size_t layer, BlockSaved& s, Id g, const GradAlloc& grad, const GradAlloc& expert_grad,
              const ExpertUnitHooks& hooks, const std::function<void()>& between_halves = {}) const;
};

// What activation checkpointing keeps of a layer: its input alone.
void drop_for_checkpointing(Ledger& l, BlockSaved& s);

// The embedding's output: the lookup, or under tensor parallelism this rank's rows, masked, then
// summed over tp (vocab-parallel).
Id embedding_forward(Ledger& l, const Dims& d);
// The final norm (its saved tensors to `head`) and the output layer; returns the logits.
Id logits_forward(Ledger& l, const Dims& d, std::vector<Id>& head);
// Cross entropy's log_softmax (fp32, saved); under tensor parallelism
// tp::vocab_parallel_cross_entropy's shifted logits and their exp live while it is made.
Id cross_entropy_forward(Ledger& l, const Dims& d);
// Its backward (nll_loss's, then log_softmax's) down to the logits' gradient (fp32, returned);
// frees the log_softmax.
Id cross_entropy_backward(Ledger& l, const Dims& d, Id log_softmax);
// The output layer's and the final norm's backward from the logits' gradient (freed here);
// frees `head` and the last layer's output x; returns the gradient flowing into the layers.
Id head_backward(Ledger& l, const Dims& d, std::vector<Id>& head, Id logits_grad, Id x, const GradAlloc& grad);

}  // namespace fsdpp::estimate_detail
