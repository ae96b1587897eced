#include "decoder_activations.h"

namespace fsdpp::estimate_detail {

// All-gather / reduce-scatter along the sequence move it to dim 0 first (a contiguous copy of
// the input); an all-reduce runs on a clone.
Id tp_enter(Ledger& l, const Dims& d, Id x) {
  if (d.tp == 1 || !d.sp) return x;
  l.touch(kActs, d.e * d.S * d.C);
  Id out = l.alloc(kActs, d.e * d.BT * d.C);
  l.free(x);
  return out;
}

Id tp_exit(Ledger& l, const Dims& d, Id x) {
  if (d.tp == 1) return x;
  Id out = -1;
  if (d.sp) {
    l.touch(kActs, d.e * d.BT * d.C);
    out = l.alloc(kActs, d.e * d.S * d.C);
  } else {
    out = l.alloc(kActs, d.e * d.BT * d.C);
  }
  l.free(x);
  return out;
}

Id tp_exit_backward(Ledger& l, const Dims& d, Id g) {
  if (d.tp == 1 || !d.sp) return g;
  l.touch(kActs, d.e * d.S * d.C);
  return l.alloc(kActs, d.e * d.BT * d.C);  // the caller frees it with g
}

Id tp_enter_backward(Ledger& l, const Dims& d, Id g) {
  if (d.tp == 1) return g;
  Id out = -1;
  if (d.sp) {
    l.touch(kActs, d.e * d.BT * d.C);
    out = l.alloc(kActs, d.e * d.S * d.C);
  } else {
    out = l.alloc(kActs, d.e * d.BT * d.C);
  }
  l.free(g);
  return out;
}

// RMSNorm of an input that is already in the ledger: pow's temporary, rsqrt (saved), the
// normalised fp32 tensor (saved by the multiply with weight) and the output (saved by the next
// linear); with mixed precision the fp32 copy of the input is saved too. The fused kernel saves
// its input (in the ledger already) and rsqrt alone.
void norm_forward(Ledger& l, const Dims& d, std::vector<Id>& saved) {
  const int64_t f = 4;
  if (d.gpu) {
    saved.push_back(l.alloc(kActs, f * d.S));          // rsqrt(mean + eps)
    saved.push_back(l.alloc(kActs, d.e * d.S * d.C));  // the output
    return;
  }
  if (d.mp) saved.push_back(l.alloc(kActs, f * d.S * d.C));  // xc = x.to(float)
  l.touch(kActs, f * d.S * d.C);                              // xc.pow(2)
  saved.push_back(l.alloc(kActs, f * d.S));                   // rsqrt(mean + eps)
  if (d.mp) l.touch(kActs, f * d.S * d.C);                    // normed in fp32, then cast
  saved.push_back(l.alloc(kActs, d.e * d.S * d.C));           // normed
  saved.push_back(l.alloc(kActs, d.e * d.S * d.C));           // normed * weight
}

// Rotary embedding of x (BT x width): four half-size products, their difference and sum, the
// stacked result; the input itself is not saved (the multiplies save cos and sin).
// On a GPU one complex multiply: the fp32 copy, the product, its cast back.
Id rope_forward(Ledger& l, const Dims& d, Id x, int64_t width) {
  const int64_t f = 4, half = f * d.BT * width / 2;
  Id xc = d.mp ? l.alloc(kActs, f * d.BT * width) : -1;
  if (d.gpu) {
    Id out = l.alloc(kActs, f * d.BT * width);
    if (d.mp) {
      Id product = out;
      out = l.alloc(kActs, d.e * d.BT * width);
      l.free(product);
      l.free(xc);
    }
    l.free(x);
    return out;
  }
  Id p1 = l.alloc(kActs, half), p2 = l.alloc(kActs, half), dd = l.alloc(kActs, half);
  l.free(p1);
  l.free(p2);
  Id p3 = l.alloc(kActs, half), p4 = l.alloc(kActs, half), ee = l.alloc(kActs, half);
  l.free(p3);
  l.free(p4);
  Id st = l.alloc(kActs, f * d.BT * width);
  l.free(dd);
  l.free(ee);
  Id out = st;
  if (d.mp) {
    out = l.alloc(kActs, d.e * d.BT * width);
    l.free(st);
    l.free(xc);
  }
  l.free(x);
  return out;
}

// Under SP the gathered input (B,T,C) is a view of a (T,B,C) buffer: each column-parallel
// linear's matmul folds it into rows with a copy (when B > 1), and saves that copy; the gathered
// buffer itself lives until the sub-layer returns. Replaces `saved.back()` (the norm's output)
// by the linears' saved inputs and returns the gathered buffer (-1 when it is what they save).
Id enter_linears(Ledger& l, const Dims& d, std::vector<Id>& saved, int n_linears) {
  Id gathered = tp_enter(l, d, saved.back());
  saved.back() = gathered;
  if (!(d.tp > 1 && d.sp && d.B > 1)) return -1;
  saved.back() = l.alloc(kActs, d.e * d.BT * d.C);
  for (int i = 1; i < n_linears; ++i) saved.push_back(l.alloc(kActs, d.e * d.BT * d.C));
  return gathered;
}

BlockSaved block_forward(Ledger& l, const Dims& d, Id x) {
  BlockSaved s;
  s.x = x;
  norm_forward(l, d, s.attn);
  Id gathered = enter_linears(l, d, s.attn, 3);
  Id q = l.alloc(kActs, d.e * d.BT * d.Q);
  Id k = l.alloc(kActs, d.e * d.BT * d.K);
  Id v = l.alloc(kActs, d.e * d.BT * d.K);
  Id rq = rope_forward(l, d, q, d.Q);
  Id rk = rope_forward(l, d, k, d.K);
  sdpa_forward(l, d, s, gathered, rq, rk, v);
  norm_forward(l, d, s.ffn);
  swiglu_forward(l, d, s);
  return s;
}

void sdpa_forward(Ledger& l, const Dims& d, BlockSaved& s, Id gathered, Id rq, Id rk, Id v) {
  Id kk = rk, vv = v;
  if (d.rep > 1) {  // repeat_kv: expand + reshape copies the kv heads
    kk = l.alloc(kActs, d.e * d.BT * d.Q);
    l.free(rk);
    vv = l.alloc(kActs, d.e * d.BT * d.Q);
    l.free(v);
  }
  Id y = l.alloc(kActs, d.e * d.BT * d.Q);        // SDPA output (saved by SDPA and wo)
  Id lse = l.alloc(kActs, 4 * d.B * d.H * d.T);  // SDPA's logsumexp
  s.attn.insert(s.attn.end(), {rq, kk, vv, y, lse});
  Id o = tp_exit(l, d, l.alloc(kActs, d.e * d.BT * d.C));
  l.free(gathered);
  s.h = l.alloc(kActs, d.e * d.S * d.C);  // h = x + attention(...)
  l.free(o);
}

void swiglu_forward(Ledger& l, const Dims& d, BlockSaved& s) {
  const Id gathered = enter_linears(l, d, s.ffn, 2);
  for (int i = 0; i < 4; ++i) s.ffn.push_back(l.alloc(kActs, d.e * d.BT * d.F));  // w1 x, silu, w3 x, product
  Id f = tp_exit(l, d, l.alloc(kActs, d.e * d.BT * d.C));
  l.free(gathered);
  s.out = l.alloc(kActs, d.e * d.S * d.C);
  l.free(f);
}

// RMSNorm's backward: the gradients of normed, of the input through the multiply, and of the
// input through mean and pow are alive together with the incoming gradient (4 x BT x C at most;
// the fused kernel's, the incoming and the input's alone); leaves the input's gradient.
Id norm_backward(Ledger& l, const Dims& d, Id grad_in) {
  const int64_t f = 4;
  Id t = d.gpu ? -1 : l.alloc(kActs, 3 * f * d.S * d.C);
  Id g = l.alloc(kActs, d.e * d.S * d.C);
  if (t >= 0) l.free(t);
  l.free(grad_in);
  return g;
}


void free_all(Ledger& l, std::vector<Id>& ids) {
  for (Id id : ids) l.free(id);
  ids.clear();
}

Id swiglu_backward(Ledger& l, const Dims& d, const std::vector<Id>& ffn, Id g, const GradAlloc& grad) {
  const size_t nf = ffn.size();  // [xc?] r normed n | a silu b m
  const Id a = ffn[nf - 4], si = ffn[nf - 3], b = ffn[nf - 2], m = ffn[nf - 1];
  // w2: grad of the product; then the product's backward: grads of silu(a) and of b.
  Id gw2 = tp_exit_backward(l, d, g);  // SP: the output's gradient gathered along the sequence
  Id gm = l.alloc(kActs, d.e * d.BT * d.F);
  grad(d.C * d.F);
  if (gw2 != g) l.free(gw2);
  l.free(m);
  Id gs = l.alloc(kActs, d.e * d.BT * d.F), gb = l.alloc(kActs, d.e * d.BT * d.F);
  l.free(si);
  l.free(b);
  l.free(gm);
  Id gn = l.alloc(kActs, d.e * d.BT * d.C);  // w3's input gradient
  grad(d.C * d.F);
  l.free(gb);
  Id ga = l.alloc(kActs, d.e * d.BT * d.F);  // silu backward
  l.free(a);
  l.free(gs);
  l.touch(kActs, d.e * d.BT * d.C);  // w1's input gradient, added into gn
  grad(d.C * d.F);
  l.free(ga);
  return gn;
}

Id norm_residual_backward(Ledger& l, const Dims& d, Id gn, const GradAlloc& grad, std::vector<Id>& saved, Id input,
                          Id g) {
  Id gin = norm_backward(l, d, gn);
  grad(d.C);
  free_all(l, saved);
  l.free(input);
  Id out = l.alloc(kActs, d.e * d.S * d.C);  // residual: g + the norm's gradient
  l.free(gin);
  l.free(g);
  return out;
}

SdpaGrads sdpa_backward(Ledger& l, const Dims& d, const std::vector<Id>& attn, Id ghh, const GradAlloc& grad) {
  Id gwo = tp_exit_backward(l, d, ghh);
  Id gy = l.alloc(kActs, d.e * d.BT * d.Q);  // wo's input gradient
  grad(d.Q * d.C);
  if (gwo != ghh) l.free(gwo);
  SdpaGrads g{l.alloc(kActs, d.e * d.BT * d.Q), l.alloc(kActs, d.e * d.BT * d.Q), l.alloc(kActs, d.e * d.BT * d.Q)};
  const size_t na = attn.size();
  for (size_t i = na - 5; i < na; ++i) l.free(attn[i]);  // rq kk vv y lse
  l.free(gy);
  if (d.rep > 1) {
    Id k2 = l.alloc(kActs, d.e * d.BT * d.K);
    l.free(g.k);
    g.k = k2;
    Id v2 = l.alloc(kActs, d.e * d.BT * d.K);
    l.free(g.v);
    g.v = v2;
  }
  return g;
}

// Backward of one block from the gradient of its output; returns the gradient of its input.
Id block_backward(Ledger& l, const Dims& d, BlockSaved& s, Id g, const GradAlloc& grad) {
  Id gn = swiglu_backward(l, d, s.ffn, g, grad);
  free_all(l, s.ffn);
  gn = tp_enter_backward(l, d, gn);
  std::vector<Id> none;
  Id ghh = norm_residual_backward(l, d, gn, grad, none, s.h, g);
  // Attention: wo, SDPA (grads of q, k, v at full head count), repeat_kv, rotary, projections.
  SdpaGrads gq = sdpa_backward(l, d, s.attn, ghh, grad);
  // Rotary backward: select/stack backward materialise full-size gradients (3 x width at most);
  // on a GPU the gradient in fp32 and its complex product.
  const int64_t rope_grads = d.gpu ? 2 : 3;
  l.touch(kActs, rope_grads * 4 * d.BT * d.Q);
  l.touch(kActs, rope_grads * 4 * d.BT * d.K);
  Id gn1 = l.alloc(kActs, d.e * d.BT * d.C);
  grad(d.C * d.Q);
  l.free(gq.q);
  l.touch(kActs, d.e * d.BT * d.C);
  grad(d.C * d.K);
  l.free(gq.k);
  l.touch(kActs, d.e * d.BT * d.C);
  grad(d.C * d.K);
  l.free(gq.v);
  gn1 = tp_enter_backward(l, d, gn1);
  return norm_residual_backward(l, d, gn1, grad, s.attn, s.x, ghh);
}

}  // namespace fsdpp::estimate_detail
