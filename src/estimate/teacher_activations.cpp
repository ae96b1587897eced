#include "teacher_activations.h"

#include <algorithm>

#include "fsdpp/common/error.h"

namespace fsdpp::estimate_detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most that is alive at once inside one layer's forward under no-grad, besides its input:
// nothing is saved, so each op's inputs go as soon as their last use has run. Attention: q,
// k, v, the rotary copies and the expanded kv heads, SDPA's output; the MLP: the SwiGLU's
// three-wide moment (gate or up output, silu, product), or for a sparse layer one expert's rows
// at a time (balanced routing) beside the routing tensors and the (N, C) sum. Plus the norm's
// output and the residual.
int64_t layer_transient(const DecoderShape& s, size_t layer, int64_t BT, int64_t e) {
  const int64_t C = s.dim, Q = s.n_heads * s.head_dim(), K = s.n_kv_heads * s.head_dim();
  const int64_t attn = e * BT * (4 * Q + 2 * K);
  int64_t mlp = 3 * e * BT * s.ffn_hidden;
  if (s.moe && s.moe->sparse[layer]) {
    const auto& m = *s.moe;
    const int64_t rows = ceil_div(BT * m.top_k, m.num_experts);
    mlp = e * BT * C + 2 * 4 * BT * m.num_experts + 16 * BT * m.top_k + e * rows * (2 * C + 3 * m.moe_intermediate);
  }
  return std::max(attn, mlp) + 2 * e * BT * C;
}

}  // namespace

TeacherPlan plan_teacher(const EstimateOptions::Teacher& teacher, int shard_world, int forward_prefetch) {
  FSDPP_CHECK_AS(ConfigError, teacher.model.shape.has_value(),
                 "[estimate] the distillation teacher needs a shape (its logits and its layers' tensors "
                 "depend on it), not a parameter count");
  TeacherPlan p;
  p.model = &teacher.model;
  p.shard_world = shard_world;
  p.bytes = dtype_bytes(teacher.dtype);
  p.compute_bytes = dtype_bytes(teacher.compute.value_or(teacher.dtype));
  p.forward_prefetch = forward_prefetch;
  for (const auto& u : teacher.model.units) {
    int64_t n = 0;
    for (const auto& q : u.params) n += (shard_world > 1 ? ceil_div(q.rows, shard_world) : q.rows) * q.row_numel;
    p.shard.push_back(n);
  }
  return p;
}

// Every parameter whole in fp32, then unit by unit its shard kept and the whole freed.
void build_teacher_whole(Ledger& l, const TeacherPlan& p);

void build_teacher(Ledger& l, const TeacherPlan& p, bool deferred, int64_t chunk_bytes) {
  if (deferred) {
    l.at("loading the teacher's shards (deferred)");
    int64_t largest = 0;
    for (size_t i = 0; i < p.model->units.size(); ++i) {
      l.alloc(kTeacher, p.shard[i] * p.bytes);
      for (const auto& q : p.model->units[i].params) largest = std::max(largest, 4 * q.numel());
    }
    l.touch(kTeacher, std::min(chunk_bytes, largest));  // rows read from its files, a chunk at a time
  } else {
    l.at("building the teacher");
    build_teacher_whole(l, p);
  }
  // A Llama's rotary tables are buffers of every attention layer (fp32, kept).
  const auto& s = *p.model->shape;
  if (!s.qk_norm && s.max_seq_len > 0)
    for (int64_t i = 0; i < 2 * s.n_layers; ++i) l.alloc(kTeacher, s.max_seq_len * (s.head_dim() / 2) * 4);
}

void build_teacher_whole(Ledger& l, const TeacherPlan& p) {
  std::vector<std::vector<Id>> whole(p.model->units.size());
  for (size_t i = 0; i < p.model->units.size(); ++i)
    for (const auto& q : p.model->units[i].params) whole[i].push_back(l.alloc(kTeacher, 4 * q.numel()));
  for (size_t k = 1; k <= whole.size(); ++k) {
    const size_t i = k % whole.size();  // the layers, then the root, as fully_shard goes
    l.alloc(kTeacher, p.shard[i] * p.bytes);
    for (Id id : whole[i]) l.free(id);
  }
}

Id teacher_forward(Ledger& l, const TeacherPlan& p, int64_t B, int64_t T) {
  const auto& m = *p.model;
  const auto& s = *m.shape;
  const int64_t BT = B * T, e = p.compute_bytes, C = s.dim;
  const bool gather = p.shard_world > 1;
  const size_t n = m.units.size();
  std::vector<Id> pending(n, -1);
  auto start_gather = [&](size_t i) {
    if (gather && pending[i] < 0) pending[i] = l.alloc(kTeacher, p.shard_world * p.shard[i] * e);
  };
  auto unshard = [&](size_t i) {
    if (!gather) return Id{-1};
    start_gather(i);
    const Id u = l.alloc(kTeacher, m.units[i].numel() * e);  // rows copied out
    l.free(pending[i]);
    pending[i] = -1;
    return u;
  };
  auto prefetch = [&](size_t i) {
    for (size_t k = i + 1; k < n && k <= i + static_cast<size_t>(p.forward_prefetch); ++k) start_gather(k);
  };
  l.at("teacher forward (no grad)");
  const Id root = unshard(0);  // the root (embeddings, final norm, output) for the whole forward
  prefetch(0);
  Id x = l.alloc(kTeacher, e * BT * C);
  if (s.qk_norm) l.touch(kTeacher, 2 * T * s.head_dim() * 4);  // Qwen3's rotary tables, per forward
  for (size_t i = 1; i < n; ++i) {
    l.at("teacher forward of " + m.units[i].name);
    const Id u = unshard(i);
    prefetch(i);
    l.touch(kTeacher, layer_transient(s, i - 1, BT, e));
    const Id out = l.alloc(kTeacher, e * BT * C);
    l.free(x);
    x = out;
    l.free(u);  // resharded after its forward
  }
  l.at("teacher forward of the output layer");
  l.touch(kTeacher, 4 * BT * C + e * BT * C);  // the final norm's fp32 maths and output
  const Id logits = l.alloc(kTeacher, e * BT * s.vocab_size);
  l.free(x);
  l.free(root);
  return logits;
}

std::vector<Id> distill_loss_forward(Ledger& l, int64_t BT, int64_t V, int64_t student_e, int64_t teacher_e,
                                     Id teacher_logits) {
  const int64_t f = 4 * BT * V;  // the objective computes in fp32
  l.at("distillation loss");
  std::vector<Id> saved;
  // distillation_divergence: t = teacher.to(float) / T and s = student.to(float) / T, their
  // log_softmax (the student's saved), then (exp(log_t) * (log_t - log_s)).sum(-1): the
  // probabilities are saved by the product; its operands and result live until the sum. The
  // function's locals (s, t, log_t) go when it returns.
  Id t32 = teacher_e != 4 ? l.alloc(kTeacher, f) : -1;
  Id t = l.alloc(kTeacher, f);
  l.free(t32);
  Id s32 = student_e != 4 ? l.alloc(kActs, f) : -1;
  Id s = l.alloc(kActs, f);
  l.free(s32);
  saved.push_back(l.alloc(kActs, f));  // log_s
  Id log_t = l.alloc(kTeacher, f);
  saved.push_back(l.alloc(kTeacher, f));  // exp(log_t): the teacher's probabilities
  Id diff = l.alloc(kActs, f), prod = l.alloc(kActs, f);
  l.free(prod);
  l.free(diff);
  l.free(s);
  l.free(t);
  l.free(log_t);
  // The cross-entropy half on the same logits (its log_softmax saved).
  Id ce_in = student_e != 4 ? l.alloc(kActs, f) : -1;
  saved.push_back(l.alloc(kActs, f));
  l.free(ce_in);
  l.free(teacher_logits);  // Teacher::loss lets go of them after the objective
  return saved;
}

Id distill_loss_backward(Ledger& l, int64_t BT, int64_t V, std::vector<Id>& saved) {
  const int64_t f = 4 * BT * V;
  l.at("backward of the distillation loss");
  // KD: the product's gradient into the difference (times the probabilities), minus into log_s,
  // log_softmax's backward into the student's logits.
  Id gdiff = l.alloc(kActs, f);
  l.free(saved[1]);
  Id glog = l.alloc(kActs, f);
  l.free(gdiff);
  Id gs = l.alloc(kActs, f);
  l.free(glog);
  l.free(saved[0]);
  // CE: nll_loss's gradient, log_softmax's, added into the same.
  Id g1 = l.alloc(kActs, f);
  Id g2 = l.alloc(kActs, f);
  l.free(saved[2]);
  l.free(g1);
  l.free(g2);
  saved.clear();
  return gs;
}

}  // namespace fsdpp::estimate_detail
