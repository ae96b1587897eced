#include "qwen3_activations.h"

namespace fsdpp::estimate_detail {
namespace {

// RMSNorm over each head (q_norm, k_norm) of a projection (BT x width) already in the ledger:
// the projection itself stays (saved by pow and mul), with rsqrt per head and the normalised
// tensor (saved by the weight's multiply); returns the output, which nothing saves (the rotary
// multiplies save cos and sin).
Id head_norm_forward(Ledger& l, const Dims& d, int64_t width, int64_t heads, std::vector<Id>& saved) {
  const int64_t f = 4;
  if (d.mp) saved.push_back(l.alloc(kActs, f * d.BT * width));
  l.touch(kActs, f * d.BT * width);                 // pow(2)
  saved.push_back(l.alloc(kActs, f * d.BT * heads));  // rsqrt
  saved.push_back(l.alloc(kActs, d.e * d.BT * width));  // normed
  return l.alloc(kActs, d.e * d.BT * width);
}

// transformers' rotary: x * cos + rotate_half(x) * sin; rotate_half is a negated half and a
// concatenation. Frees x, returns the result.
Id rotate_half_rope(Ledger& l, const Dims& d, Id x, int64_t width) {
  const int64_t full = d.e * d.BT * width;
  Id xc = l.alloc(kActs, full);
  Id neg = l.alloc(kActs, full / 2);
  Id cat = l.alloc(kActs, full);
  l.free(neg);
  Id xs = l.alloc(kActs, full);
  l.free(cat);
  Id out = l.alloc(kActs, full);
  l.free(xc);
  l.free(xs);
  l.free(x);
  return out;
}

// Balanced routing: `rows` split over `n` experts (the first rows % n one more).
std::vector<int64_t> split_rows(int64_t rows, int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n), rows / n);
  for (int64_t i = 0; i < rows % n; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

// The experts' sum (`out`, expert_rows x C) back to the residual stream: under tp summed over
// the group (split experts: all-reduce, or reduce-scatter under SP) or gathered from every rank's
// chunk (whole experts without SP); then h + it.
void finish_sparse(Ledger& l, const Dims& d, const MoeDims& m, BlockSaved& s, Id out, Id chunk, Id whole_in) {
  if (m.tp > 1 && m.split) {
    out = tp_exit(l, d, out);
  } else if (m.tp > 1 && !m.sp) {
    Id gathered = l.alloc(kActs, d.e * d.BT * d.C);
    l.free(out);
    out = gathered;
  }
  l.free(chunk);
  l.free(whole_in);
  s.out = l.alloc(kActs, d.e * d.S * d.C);  // h + experts
  l.free(out);
}

// SwiGLU of `rows` rows through one expert: gate and up outputs, silu, their product (saved,
// each rows x I), and the down projection's output (rows x C), returned.
Id expert_forward(Ledger& l, const Dims& d, const MoeDims& m, int64_t rows, std::vector<Id>& saved) {
  for (int i = 0; i < 4; ++i) saved.push_back(l.alloc(kActs, d.e * rows * m.I));
  return l.alloc(kActs, d.e * rows * d.C);
}

// Its backward from the output's gradient (rows x C, freed by the caller): the product's
// gradient, silu's and up's, gate's; each stacked weight's gradient is a whole (E', ...) tensor
// (select_backward), the first one kept as the unit's unsharded gradient, the others added into
// it. Frees the saved four; leaves the input's gradient (rows x C), from up and gate summed.
Id expert_backward(Ledger& l, const Dims& d, const MoeDims& m, int64_t rows, std::vector<Id>& saved,
                   const GradAlloc& expert_grad, bool first, int64_t local_experts) {
  const int64_t whole = local_experts * m.I * d.C;
  auto weight_grad = [&] {
    if (first) {
      expert_grad(whole);
    } else {
      l.touch(kGradWork, whole * expert_grad.bytes_per_elem);
    }
  };
  Id gh = l.alloc(kActs, d.e * rows * m.I);  // down's input gradient
  weight_grad();
  l.free(saved[3]);
  Id gs = l.alloc(kActs, d.e * rows * m.I), gu = l.alloc(kActs, d.e * rows * m.I);
  l.free(gh);
  l.free(saved[2]);
  Id gx = l.alloc(kActs, d.e * rows * d.C);  // up's input gradient
  weight_grad();
  l.free(gu);
  Id gg = l.alloc(kActs, d.e * rows * m.I);  // silu backward
  l.free(gs);
  l.free(saved[1]);
  l.free(saved[0]);
  l.touch(kActs, d.e * rows * d.C);  // gate's input gradient, added into gx
  weight_grad();
  l.free(gg);
  saved.clear();
  return gx;
}

}  // namespace

MoeDims moe_dims(const DecoderShape& sh, int tp, int ep, bool split_experts, bool sequence_parallel) {
  MoeDims md;
  md.hd = sh.head_dim();
  md.Hkv = sh.n_kv_heads / tp;
  md.ep = ep;
  md.tp = tp;
  md.split = split_experts;
  md.sp = sequence_parallel;
  if (sh.moe) {
    md.E = sh.moe->num_experts;
    md.k = sh.moe->top_k;
    md.I = split_experts ? (sh.moe->moe_intermediate + tp - 1) / tp : sh.moe->moe_intermediate;
    md.router_logits = sh.moe->router_logits;
  }
  return md;
}

BlockSaved qwen3_attention_forward(Ledger& l, const Dims& d, const MoeDims& m, Id x) {
  BlockSaved s;
  s.x = x;
  norm_forward(l, d, s.attn);  // input_layernorm; its output saved by q, k and v
  const Id gathered = enter_linears(l, d, s.attn, 3);
  const int64_t H = d.H, Hkv = m.Hkv;
  Id q = l.alloc(kActs, d.e * d.BT * d.Q);
  s.attn.push_back(q);
  Id qn = head_norm_forward(l, d, d.Q, H, s.attn);
  Id rq = rotate_half_rope(l, d, qn, d.Q);
  Id k = l.alloc(kActs, d.e * d.BT * d.K);
  s.attn.push_back(k);
  Id kn = head_norm_forward(l, d, d.K, Hkv, s.attn);
  Id rk = rotate_half_rope(l, d, kn, d.K);
  Id v = l.alloc(kActs, d.e * d.BT * d.K);
  sdpa_forward(l, d, s, gathered, rq, rk, v);
  return s;
}

void qwen3_mlp_forward(Ledger& l, const Dims& d, const MoeDims& m, bool sparse, BlockSaved& s,
                       std::vector<Id>& router_logits, const ExpertUnitHooks& hooks) {
  norm_forward(l, d, s.ffn);  // post_attention_layernorm; output saved by the router / gate and up
  const int64_t C = d.C;
  if (!sparse) {
    swiglu_forward(l, d, s);
    return;
  }
  // Under tp: the rows this rank routes (whole experts without SP: a copy of its chunk), and the
  // rows its experts see (split experts under SP: the whole sequence gathered).
  const int64_t N = m.route_rows(d.BT), NE = m.expert_rows(d.BT);
  Id chunk = m.tp > 1 && !m.split && !m.sp ? l.alloc(kActs, d.e * N * C) : -1;
  Id whole_in = m.tp > 1 && m.split && m.sp ? l.alloc(kActs, d.e * NE * C) : -1;
  const int64_t k = m.k, Nk = NE * k;
  // Router: logits (kept for the load-balancing loss), fp32 softmax (saved), top-k values and
  // indices (saved), renormalised weights (the division saves both sides), cast to the dtype.
  Id logits = l.alloc(kActs, d.e * N * m.E);
  if (m.router_logits) {
    router_logits.push_back(logits);
  }
  s.ffn.push_back(l.alloc(kActs, 4 * N * m.E));
  s.ffn.push_back(l.alloc(kActs, (4 + 8 + 4 + 4) * N * k + 4 * N));
  Id weights = l.alloc(kActs, d.e * Nk);
  if (!m.router_logits) l.free(logits);
  // The (token, choice) pairs sorted by expert: order and token ids (int64, kept by the
  // index_add / index_select backward), and the sorted weights (saved by the multiply).
  s.ffn.push_back(l.alloc(kActs, 8 * Nk * 2 + d.e * Nk));
  if (m.ep <= 1) {
    if (hooks.before_forward) hooks.before_forward();
    Id out = l.alloc(kActs, d.e * NE * C);  // zeros, then index_add per expert (a new tensor each)
    for (int64_t rows : split_rows(Nk, m.E)) {
      if (rows == 0) continue;
      s.ffn.push_back(l.alloc(kActs, d.e * rows * C));  // index_select: the expert's input
      Id y = expert_forward(l, d, m, rows, s.ffn);
      s.ffn.push_back(y);                                // saved by the weights' multiply
      // Weighted, then added into a new (N, C) sum; index_add's backward keeps its source.
      s.ffn.push_back(l.alloc(kActs, d.e * rows * C));
      Id next = l.alloc(kActs, d.e * NE * C);
      l.free(out);
      out = next;
    }
    if (hooks.after_forward) hooks.after_forward();
    finish_sparse(l, d, m, s, out, chunk, whole_in);
    l.free(weights);
    return;
  }
  // Expert parallelism (moe::ExpertDispatch): each pair's token row, all-to-all to the experts'
  // ranks (M rows arrive; balanced routing: M = N k), sorted expert-major; the local experts;
  // back by all-to-all, weighted, summed per token.
  const int64_t M = Nk, local = m.E / m.ep;
  Id rows = l.alloc(kActs, d.e * Nk * C);
  Id received = l.alloc(kActs, d.e * M * C);
  Id tokens = l.alloc(kActs, d.e * M * C);  // saved: the experts' inputs are its narrow views
  l.free(received);
  l.free(rows);
  s.ffn.push_back(tokens);
  if (hooks.before_forward) hooks.before_forward();
  std::vector<Id> outs;
  for (int64_t r : split_rows(M, local)) {
    if (r == 0) continue;
    outs.push_back(expert_forward(l, d, m, r, s.ffn));
  }
  Id y = l.alloc(kActs, d.e * M * C);  // cat
  for (Id o : outs) l.free(o);
  if (hooks.after_forward) hooks.after_forward();
  Id yi = l.alloc(kActs, d.e * M * C);  // rank-major again
  l.free(y);
  Id back = l.alloc(kActs, d.e * Nk * C);  // the all-to-all back; saved by the multiply
  l.free(yi);
  s.ffn.push_back(back);
  Id weighted = l.alloc(kActs, d.e * Nk * C);  // kept by index_add's backward (its source)
  s.ffn.push_back(weighted);
  Id zeros = l.alloc(kActs, d.e * NE * C);
  Id out = l.alloc(kActs, d.e * NE * C);
  l.free(zeros);
  finish_sparse(l, d, m, s, out, chunk, whole_in);
  l.free(weights);
}

std::vector<Id> load_balancing_forward(Ledger& l, const Dims& d, const MoeDims& m, int64_t sparse_layers) {
  std::vector<Id> saved;
  if (!m.router_logits) return saved;
  for (int64_t i = 0; i < sparse_layers; ++i) {
    const int64_t N = m.route_rows(d.BT);
    saved.push_back(l.alloc(kActs, d.e * N * m.E));  // softmax in the logits' dtype (saved)
    l.touch(kActs, 4 * N * m.E + 8 * N * m.k);  // its fp32 copy summed; top-k indices
  }
  return saved;
}

namespace {

// The experts' backward on this rank (no expert parallelism), per expert, last first: the
// output's gradient rows (index_add backward), times the weight, the SwiGLU backward, the input
// rows scattered back into an (N, C) zeros. Returns the experts' input gradient, summed.
Id local_experts_backward(Ledger& l, const Dims& d, const MoeDims& m, const std::vector<Id>& experts,
                          const GradAlloc& expert_grad) {
  const int64_t C = d.C, NE = m.expert_rows(d.BT), Nk = NE * m.k;
  Id gsum = -1;
  const auto split = split_rows(Nk, m.E);
  size_t pos = experts.size();
  bool first = true;
  for (auto it = split.rbegin(); it != split.rend(); ++it) {
    const int64_t rows = *it;
    if (rows == 0) continue;
    pos -= 7;  // xe, four SwiGLU tensors, y, y weighted
    std::vector<Id> sw(experts.begin() + static_cast<long>(pos) + 1, experts.begin() + static_cast<long>(pos) + 5);
    Id gy = l.alloc(kActs, d.e * rows * C);
    l.free(experts[pos + 6]);
    Id gd = l.alloc(kActs, d.e * rows * C);
    l.free(gy);
    l.free(experts[pos + 5]);
    Id gx = expert_backward(l, d, m, rows, sw, expert_grad, first, m.E);
    first = false;
    l.free(gd);
    l.free(experts[pos]);
    Id scattered = l.alloc(kActs, d.e * NE * C);  // index_select backward: zeros + index_add
    l.free(gx);
    if (gsum < 0) {
      gsum = scattered;
    } else {
      l.free(scattered);  // added into gsum
    }
  }
  return gsum;
}

// The local experts' backward on the rows the all-to-all brought (expert parallelism), last
// first; returns the gradient of the whole received input (narrow's backward, summed).
Id received_rows_backward(Ledger& l, const Dims& d, const MoeDims& m, const std::vector<Id>& experts,
                          const GradAlloc& expert_grad) {
  const int64_t C = d.C, M = m.expert_rows(d.BT) * m.k, local = m.E / m.ep;
  const auto split = split_rows(M, local);
  size_t pos = experts.size() - 2;
  Id gtokens = -1;
  bool first = true;
  for (auto it = split.rbegin(); it != split.rend(); ++it) {
    const int64_t rows = *it;
    if (rows == 0) continue;
    pos -= 4;
    std::vector<Id> sw(experts.begin() + static_cast<long>(pos), experts.begin() + static_cast<long>(pos) + 4);
    Id gx = expert_backward(l, d, m, rows, sw, expert_grad, first, local);
    first = false;
    Id whole = l.alloc(kActs, d.e * M * C);  // narrow backward: zeros of the whole input
    l.free(gx);
    if (gtokens < 0) {
      gtokens = whole;
    } else {
      l.free(whole);
    }
  }
  return gtokens;
}

// Under expert parallelism (moe::ExpertDispatch's backward): the weighted sum's and the
// all-to-all's backward, the local experts', and back to the token rows. Returns the experts'
// input gradient.
Id dispatched_experts_backward(Ledger& l, const Dims& d, const MoeDims& m, const std::vector<Id>& experts,
                               const GradAlloc& expert_grad) {
  const int64_t C = d.C, NE = m.expert_rows(d.BT), Nk = NE * m.k, M = Nk;
  const Id tokens = experts[0], back = experts[experts.size() - 2];
  Id gw = l.alloc(kActs, d.e * Nk * C);     // index_add backward
  l.free(experts.back());
  Id gback = l.alloc(kActs, d.e * Nk * C);  // times the weights
  l.free(gw);
  l.free(back);
  Id gyi = l.alloc(kActs, d.e * M * C);     // the all-to-all's backward
  l.free(gback);
  Id gy = l.alloc(kActs, d.e * M * C);      // index_select backward: zeros + index_add
  l.free(gyi);
  Id gtokens = received_rows_backward(l, d, m, experts, expert_grad);
  l.free(gy);
  l.free(tokens);
  Id grecv = l.alloc(kActs, d.e * M * C);  // permutation's index_select backward
  l.free(gtokens);
  Id grows = l.alloc(kActs, d.e * Nk * C);  // the all-to-all's backward
  l.free(grecv);
  Id gsum = l.alloc(kActs, d.e * NE * C);  // token rows' index_select backward
  l.free(grows);
  return gsum;
}

// A sparse layer's MLP backward down to the gradient of post_attention_layernorm's output: the
// experts' (their unit gathered and reduced around them by the hooks), then the router's.
Id sparse_mlp_backward(Ledger& l, const Dims& d, const MoeDims& m, BlockSaved& s, const GradAlloc& grad,
                       const GradAlloc& expert_grad, const ExpertUnitHooks& hooks) {
  const int64_t C = d.C, N = m.route_rows(d.BT), NE = m.expert_rows(d.BT);
  // Under tp with whole experts and no SP the experts' gradient is this rank's chunk of g.
  Id gchunk = m.tp > 1 && !m.split && !m.sp ? l.alloc(kActs, d.e * NE * C) : -1;
  // s.ffn: [xc?] rsqrt normed n | probs topk weights_sorted | experts' tensors ...
  const size_t base = (d.mp ? 4 : 3) + 3;  // the norm's tensors, then probs, top-k, sorted pairs
  std::vector<Id> experts(s.ffn.begin() + static_cast<long>(base), s.ffn.end());
  if (hooks.before_backward) hooks.before_backward();
  // The gradient of the experts' input (N x C), summed over experts.
  Id gsum = m.ep <= 1 ? local_experts_backward(l, d, m, experts, expert_grad)
                      : dispatched_experts_backward(l, d, m, experts, expert_grad);
  if (hooks.after_backward) hooks.after_backward();
  l.free(gchunk);
  if (m.tp > 1 && (m.split || !m.sp)) {
    // Split: the experts' input gradient summed over tp (all-reduce's clone, or SP's
    // reduce-scatter); whole: every rank's chunk gathered back (chunk_of_whole's backward).
    Id whole = m.split ? tp_enter_backward(l, d, gsum) : l.alloc(kActs, d.e * d.BT * C);
    if (!m.split) l.free(gsum);
    gsum = whole;
  }
  // The router: the gradients of the weights and of the fp32 probabilities, of the logits; its
  // input's gradient and weight's.
  l.touch(kActs, 4 * N * m.E * 2 + d.e * N * m.E);
  Id gn = l.alloc(kActs, d.e * N * C);
  grad(m.E * C);
  if (m.tp > 1 && !m.sp && !m.split) {  // the router's input gradient: this rank's chunk, gathered
    Id whole = l.alloc(kActs, d.e * d.BT * C);
    l.free(gn);
    gn = whole;
  }
  l.free(gsum);  // added into gn
  return gn;
}

}  // namespace

Id qwen3_mlp_backward(Ledger& l, const Dims& d, const MoeDims& m, bool sparse, BlockSaved& s, Id g,
                      const GradAlloc& grad, const GradAlloc& expert_grad, const ExpertUnitHooks& hooks) {
  // The gradient of post_attention_layernorm's output.
  const Id gn = sparse ? sparse_mlp_backward(l, d, m, s, grad, expert_grad, hooks)
                       : tp_enter_backward(l, d, swiglu_backward(l, d, s.ffn, g, grad));
  free_all(l, s.ffn);
  std::vector<Id> none;
  return norm_residual_backward(l, d, gn, grad, none, s.h, g);
}

Id qwen3_attention_backward(Ledger& l, const Dims& d, const MoeDims& m, BlockSaved& s, Id ghh,
                            const GradAlloc& grad) {
  const int64_t C = d.C;
  const auto [gq, gk, gv] = sdpa_backward(l, d, s.attn, ghh, grad);
  // Rotary backward (the multiplies, cat and neg), then the head norm's backward, then the
  // projection; for q, then k; v's projection last.
  auto qk = [&](Id gr, int64_t width) {
    l.touch(kActs, 3 * d.e * d.BT * width);
    Id gnorm = l.alloc(kActs, d.e * d.BT * width);
    l.free(gr);
    Id t = l.alloc(kActs, 3 * 4 * d.BT * width);
    Id gp = l.alloc(kActs, d.e * d.BT * width);
    l.free(t);
    l.free(gnorm);
    grad(m.hd);
    Id gin = l.alloc(kActs, d.e * d.BT * C);
    grad(C * width);
    l.free(gp);
    return gin;
  };
  Id gn1 = qk(gq, d.Q);
  Id gk_in = qk(gk, d.K);
  l.free(gk_in);  // added into gn1
  l.touch(kActs, d.e * d.BT * C);
  grad(C * d.K);
  l.free(gv);
  gn1 = tp_enter_backward(l, d, gn1);
  return norm_residual_backward(l, d, gn1, grad, s.attn, s.x, ghh);
}

}  // namespace fsdpp::estimate_detail
