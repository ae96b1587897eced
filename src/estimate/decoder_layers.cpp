// A decoder's layers in the estimator's ledger. See decoder_layers.h.
#include "decoder_layers.h"

namespace fsdpp::estimate_detail {

Dims decoder_dims(const DecoderShape& sh, const EstimateOptions& o, int64_t batch) {
  const int tp = o.tensor_parallel;
  const int64_t BT = batch * o.seq_len;
  auto share = [tp](int64_t size) { return (size + tp - 1) / tp; };  // the largest rank's
  return Dims{BT, batch, o.seq_len, sh.dim, sh.n_heads * sh.head_dim() / tp, sh.n_kv_heads * sh.head_dim() / tp,
              share(sh.ffn_hidden), share(sh.vocab_size), sh.n_heads / tp, sh.n_heads / sh.n_kv_heads,
              dtype_bytes(o.param_dtype), o.param_dtype != EstimateDType::FP32,
              o.sequence_parallel ? BT / tp : BT, tp, o.sequence_parallel, o.device_is_gpu};
}

Id DecoderLayers::rope_tables(Ledger& l) const {
  return qwen3() ? l.alloc(kActs, 2 * d->T * md->hd * 4) : -1;
}

BlockSaved DecoderLayers::forward(Ledger& l, size_t layer, Id x, std::vector<Id>& router_logits,
                                  const ExpertUnitHooks& hooks) const {
  if (!qwen3()) return block_forward(l, *d, x);
  BlockSaved s = qwen3_attention_forward(l, *d, *md, x);
  qwen3_mlp_forward(l, *d, *md, sparse(layer), s, router_logits, hooks);
  return s;
}

BlockSaved DecoderLayers::recompute(Ledger& l, size_t layer, Id x, const ExpertUnitHooks& hooks) const {
  std::vector<Id> scratch;  // the router's logits of the re-run: not kept
  BlockSaved again = forward(l, layer, x, scratch, hooks);
  for (Id id : scratch) l.free(id);
  l.free(again.out);
  return again;
}

Id DecoderLayers::backward(Ledger& l, size_t layer, BlockSaved& s, Id g, const GradAlloc& grad,
                           const GradAlloc& expert_grad, const ExpertUnitHooks& hooks,
                           const std::function<void()>& between_halves) const {
  if (!qwen3()) return block_backward(l, *d, s, g, grad);
  Id gh = qwen3_mlp_backward(l, *d, *md, sparse(layer), s, g, grad, expert_grad, hooks);
  if (between_halves) between_halves();
  return qwen3_attention_backward(l, *d, *md, s, gh, grad);
}

void drop_for_checkpointing(Ledger& l, BlockSaved& s) {
  for (Id id : s.attn) l.free(id);
  for (Id id : s.ffn) l.free(id);
  l.free(s.h);
}

Id embedding_forward(Ledger& l, const Dims& d) {
  if (d.tp == 1) return l.alloc(kActs, d.e * d.BT * d.C);
  Id rows = l.alloc(kActs, d.e * d.BT * d.C);
  Id x = l.alloc(kActs, d.e * d.BT * d.C);
  l.free(rows);
  return tp_exit(l, d, x);
}

Id logits_forward(Ledger& l, const Dims& d, std::vector<Id>& head) {
  norm_forward(l, d, head);
  const Id gathered = enter_linears(l, d, head, 1);
  const Id logits = l.alloc(kActs, d.e * d.BT * d.V);
  l.free(gathered);
  return logits;
}

Id cross_entropy_forward(Ledger& l, const Dims& d) {
  const int64_t f32 = 4;
  if (d.tp == 1) return l.alloc(kActs, f32 * d.BT * d.V);
  Id shifted = l.alloc(kActs, f32 * d.BT * d.V), ex = l.alloc(kActs, f32 * d.BT * d.V);
  const Id lsm = l.alloc(kActs, f32 * d.BT * d.V);
  l.free(shifted);
  l.free(ex);
  return lsm;
}

Id cross_entropy_backward(Ledger& l, const Dims& d, Id log_softmax) {
  const int64_t f32 = 4;
  const Id g1 = l.alloc(kActs, f32 * d.BT * d.V);  // nll_loss backward
  const Id g2 = l.alloc(kActs, f32 * d.BT * d.V);  // log_softmax backward
  l.free(log_softmax);
  l.free(g1);
  return g2;
}

Id head_backward(Ledger& l, const Dims& d, std::vector<Id>& head, Id logits_grad, Id x, const GradAlloc& grad) {
  Id gnf = l.alloc(kActs, d.e * d.BT * d.C);
  grad(d.V * d.C);  // output.weight (or the tied embedding's first gradient)
  l.free(logits_grad);
  l.free(head.back());
  gnf = tp_enter_backward(l, d, gnf);
  const Id gx = norm_backward(l, d, gnf);
  grad(d.C);
  for (Id id : head) l.free(id);
  l.free(x);  // the last layer's output, saved by the final norm
  return gx;
}

}  // namespace fsdpp::estimate_detail
