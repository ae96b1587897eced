#pragma once
// What autograd keeps of fsdpp's Llama blocks, tensor by tensor, as the estimator's ledger sees
// them (private to src/estimate/): the forward of src/models/llama.cpp op by op, and the
// gradients that are alive together in its backward. Sizes in bytes.

#include <cstdint>
#include <vector>

#include "ledger.h"

namespace fsdpp::estimate_detail {


// The saved tensors of one TransformerBlock (forward of src/models/llama.cpp, as autograd keeps
// them) and the ones that are freed before the block ends. Sizes in bytes.
// Under tensor parallelism Q, K, F, V and H are this rank's share (the largest one), and S is
// the positions of the residual stream this rank holds: BT, or BT / tp under sequence
// parallelism (norms and residuals split along the sequence).
struct Dims {
  int64_t BT, B, T, C, Q, K, F, V, H, rep;
  int64_t e;  // activation (compute) element bytes: param_dtype
  bool mp;    // e < 4: RMSNorm and rotary maths run in an fp32 copy
  int64_t S = 0;   // residual-stream positions on this rank (BT without SP)
  int64_t tp = 1;  // tensor-parallel degree
  bool sp = false;
  // On a GPU (models/llama.cpp): LibTorch's fused RMSNorm, no temporaries; RoPE as one complex
  // multiply (models/decoder_parts.h).
  bool gpu = false;
};

// Tensor parallelism's forward regions (src/tp/regions.cpp) on a tensor already in the ledger:
// `enter` before a column-parallel layer (SP: the all-gather along the sequence, whose result
// replaces `x`; without SP a view), `exit` after a row-parallel one (the all-reduce's clone, or
// the reduce-scatter's (S, C) output). Both return the id that replaces `x`.
Id tp_enter(Ledger& l, const Dims& d, Id x);
Id tp_exit(Ledger& l, const Dims& d, Id x);
// Their backwards on a gradient: of `exit` (SP: all-gather S -> BT; else the same tensor) and of
// `enter` (a clone all-reduced, or a reduce-scatter BT -> S).
Id tp_exit_backward(Ledger& l, const Dims& d, Id g);
Id tp_enter_backward(Ledger& l, const Dims& d, Id g);
// tp_enter of the norm output at saved.back() for n_linears column-parallel linears; returns the
// buffer to free when the sub-layer returns (or -1). See decoder_activations.cpp.
Id enter_linears(Ledger& l, const Dims& d, std::vector<Id>& saved, int n_linears);

struct BlockSaved {
  std::vector<Id> attn;  // freed as the attention half's backward runs
  std::vector<Id> ffn;   // freed as the feed-forward half's backward runs
  Id x = -1;             // the block's input (saved by attention_norm)
  Id h = -1;             // the residual after attention (saved by ffn_norm)
  Id out = -1;           // the block's output: the next block's x
};

// Gradients of one block's parameters appear one by one in backward (the unsharded gradients).
struct GradAlloc {
  Ledger* l;
  int64_t bytes_per_elem;
  std::vector<Id>* ids;
  void operator()(int64_t numel) const { ids->push_back(l->alloc(kGradWork, numel * bytes_per_elem)); }
};

// RMSNorm of an input that is already in the ledger: pow's temporary, rsqrt (saved), the
// normalised fp32 tensor (saved by the multiply with weight) and the output (saved by the next
// linear); with mixed precision the fp32 copy of the input is saved too.
void norm_forward(Ledger& l, const Dims& d, std::vector<Id>& saved);

// Rotary embedding of x (BT x width): four half-size products, their difference and sum, the
// stacked result; the input itself is not saved (the multiplies save cos and sin).
Id rope_forward(Ledger& l, const Dims& d, Id x, int64_t width);

BlockSaved block_forward(Ledger& l, const Dims& d, Id x);

// RMSNorm's backward: the gradients of normed, of the input through the multiply, and of the
// input through mean and pow are alive together with the incoming gradient (4 x BT x C at most);
// leaves the input's gradient.
Id norm_backward(Ledger& l, const Dims& d, Id grad_in);

// Backward of one block from the gradient of its output; returns the gradient of its input.
Id block_backward(Ledger& l, const Dims& d, BlockSaved& s, Id g, const GradAlloc& grad);

// The parts both architectures' layers share (Llama's TransformerBlock, Qwen3-MoE's decoder layer):
// The attention after its rotary embeddings: repeat_kv (kv heads copied up to the query heads),
// SDPA with its logsumexp, the output projection and the residual; fills s.attn (rq kk vv y lse
// last) and s.h, and frees `gathered` (enter_linears').
void sdpa_forward(Ledger& l, const Dims& d, BlockSaved& s, Id gathered, Id rq, Id rk, Id v);
// A dense SwiGLU MLP after its norm (whose output is s.ffn.back()): w1 x, silu, w3 x and their
// product saved, w2 and the residual; fills s.out.
void swiglu_forward(Ledger& l, const Dims& d, BlockSaved& s);
// Its backward from the output's gradient g (s.ffn's last four freed): returns the gradient of its
// input, before tensor parallelism's enter backward.
Id swiglu_backward(Ledger& l, const Dims& d, const std::vector<Id>& ffn, Id g, const GradAlloc& grad);
// The backward of the attention's output projection and SDPA from the residual's gradient ghh:
// the gradients of q, k and v (k and v back to the kv heads); frees the last five of `attn`.
struct SdpaGrads {
  Id q, k, v;
};
SdpaGrads sdpa_backward(Ledger& l, const Dims& d, const std::vector<Id>& attn, Id ghh, const GradAlloc& grad);
// A sub-layer's norm backward from its output's gradient gn, then the residual: frees `saved`,
// the sub-layer's input and the incoming gradient g; returns the gradient of the input.
Id norm_residual_backward(Ledger& l, const Dims& d, Id gn, const GradAlloc& grad, std::vector<Id>& saved, Id input,
                          Id g);
void free_all(Ledger& l, std::vector<Id>& ids);

}  // namespace fsdpp::estimate_detail
