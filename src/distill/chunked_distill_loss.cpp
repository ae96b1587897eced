// The chunked distillation objective (chunked_distill_loss.h): a custom autograd function whose
// forward computes the per-position losses a chunk at a time without keeping anything, and
// whose backward recomputes each chunk under autograd to get that chunk's gradient.
#include "fsdpp/distill/chunked_distill_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <utility>

#include "fsdpp/common/error.h"

namespace fsdpp::distill {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType compute_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The options an autograd context keeps (saved_data holds IValues).
void save_options(AutogradContext* ctx, const DistillLossOptions& o, int64_t chunk) {
  ctx->saved_data["type"] = static_cast<int64_t>(o.type.value());
  ctx->saved_data["beta"] = o.beta;
  ctx->saved_data["temperature"] = o.temperature;
  ctx->saved_data["top_k"] = o.top_k;
  ctx->saved_data["ignore_index"] = o.ignore_index;
  ctx->saved_data["chunk"] = chunk;
}

DistillLossOptions load_options(AutogradContext* ctx) {
  DistillLossOptions o;
  o.type = static_cast<DistillLossType>(ctx->saved_data["type"].toInt());
  o.beta = ctx->saved_data["beta"].toDouble();
  o.temperature = ctx->saved_data["temperature"].toDouble();
  o.top_k = ctx->saved_data["top_k"].toInt();
  o.ignore_index = ctx->saved_data["ignore_index"].toInt();
  return o;
}

// The per-position KD divergence and cross-entropy of positions [begin, begin + n): the
// functions of the unchunked loss on the chunk's rows. t is the teacher's logits (N, V), or
// undefined with values/ids (N, K).
std::pair<at::Tensor, at::Tensor> chunk_losses(const at::Tensor& s, const at::Tensor& t,
                                               const at::Tensor& values, const at::Tensor& ids,
                                               const at::Tensor& labels,
                                               const DistillLossOptions& o, int64_t begin,
                                               int64_t n) {
  const auto rows = [&](const at::Tensor& x) { return x.narrow(0, begin, n); };
  const at::Tensor d = t.defined()
                           ? distillation_divergence(s, rows(t), o)
                           : sparse_distillation_divergence(s, rows(values), rows(ids), o);
  const at::Tensor ce = at::cross_entropy_loss(s.to(compute_dtype(s)), rows(labels), {},
                                               at::Reduction::None, o.ignore_index);
  return {d, ce};
}

// A custom function's inputs must all be defined tensors: the side of the teacher that is not
// given is this empty stand-in.
at::Tensor or_none(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() ? t : at::empty({0}, like.options());
}

struct ChunkedObjective : public torch::autograd::Function<ChunkedObjective> {
  // student (N, V); teacher (N, V) when `dense`, else values, ids (N, K) (the other side an
  // empty stand-in); labels (N) int64; kd_mask (N) bool. Returns {kd, ce}: scalars.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& student,
                               const at::Tensor& teacher_in, const at::Tensor& values_in,
                               const at::Tensor& ids_in, const at::Tensor& labels,
                               const at::Tensor& kd_mask, const DistillLossOptions& o,
                               int64_t chunk, bool dense, const TokenDivisors& divisors) {
    const at::Tensor teacher = dense ? teacher_in : at::Tensor();
    const at::Tensor values = dense ? at::Tensor() : values_in, ids = dense ? at::Tensor() : ids_in;
    const int64_t N = student.size(0);
    const auto dtype = compute_dtype(student);
    auto d = at::empty({N}, student.options().dtype(dtype));
    auto ce = at::empty({N}, student.options().dtype(dtype));
    for (int64_t begin = 0; begin < N; begin += chunk) {
      const int64_t n = std::min(chunk, N - begin);
      auto [dc, cc] = chunk_losses(student.narrow(0, begin, n), teacher, values, ids, labels, o,
                                   begin, n);
      d.narrow(0, begin, n).copy_(dc);
      ce.narrow(0, begin, n).copy_(cc);
    }
    // The unchunked loss's means: over the KD positions, and over the labelled ones (or the
    // caller's divisors, a global batch's counts).
    const auto count = [&](const at::Tensor& keep, double divisor) {
      return divisor > 0 ? at::full({}, divisor, student.options().dtype(dtype))
                         : keep.sum().to(dtype).clamp_min(1);
    };
    const auto n_kd = count(kd_mask, divisors.kd);
    const auto n_ce = count(labels != o.ignore_index, divisors.ce);
    auto kd = d.masked_fill(kd_mask.logical_not(), 0).sum() / n_kd;
    auto ce_mean = ce.sum() / n_ce;
    ctx->save_for_backward({student, teacher_in, values_in, ids_in, labels, kd_mask});
    save_options(ctx, o, chunk);
    ctx->saved_data["dense"] = dense;
    ctx->saved_data["n_kd"] = n_kd.item<double>();
    ctx->saved_data["n_ce"] = n_ce.item<double>();
    return {kd, ce_mean};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool dense = ctx->saved_data["dense"].toBool();
    const at::Tensor &student = saved[0], &labels = saved[4], &kd_mask = saved[5];
    const at::Tensor teacher = dense ? saved[1] : at::Tensor();
    const at::Tensor values = dense ? at::Tensor() : saved[2], ids = dense ? at::Tensor() : saved[3];
    const auto o = load_options(ctx);
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int64_t N = student.size(0);
    const auto dtype = compute_dtype(student);
    // d(kd)/d(d_i) = mask_i / n_kd and d(ce)/d(ce_i) = 1 / n_ce, times the outputs' gradients.
    const auto g_kd = grads[0].defined() ? grads[0].to(dtype) / ctx->saved_data["n_kd"].toDouble()
                                         : at::zeros({}, student.options().dtype(dtype));
    const auto g_ce = grads[1].defined() ? grads[1].to(dtype) / ctx->saved_data["n_ce"].toDouble()
                                         : at::zeros({}, student.options().dtype(dtype));
    const auto w_kd = kd_mask.to(dtype) * g_kd;  // (N)
    auto grad = at::empty_like(student);
    for (int64_t begin = 0; begin < N; begin += chunk) {
      const int64_t n = std::min(chunk, N - begin);
      at::AutoGradMode enable(true);
      auto s = student.narrow(0, begin, n).detach().requires_grad_(true);
      auto [d, ce] = chunk_losses(s, teacher, values, ids, labels, o, begin, n);
      const auto keep = kd_mask.narrow(0, begin, n);
      const auto local = (d.masked_fill(keep.logical_not(), 0) * w_kd.narrow(0, begin, n)).sum() +
                         ce.sum() * g_ce;
      grad.narrow(0, begin, n).copy_(torch::autograd::grad({local}, {s})[0]);
    }
    // One gradient per input of forward (the non-tensor ones included).
    return {grad, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  }
};

}  // namespace

int64_t default_chunk_positions(int64_t vocab) {
  constexpr int64_t kBytes = int64_t{64} << 20;
  return std::max<int64_t>(1, kBytes / (std::max<int64_t>(vocab, 1) * 4));
}

DistillObjective chunked_distillation_objective(const at::Tensor& student_logits,
                                                const TeacherTargets& teacher,
                                                const at::Tensor& labels,
                                                const at::Tensor& kd_mask,
                                                const DistillLossOptions& options,
                                                double kd_ratio, int64_t chunk_positions,
                                                const TokenDivisors& divisors) {
  options.validate();
  divisors.validate();
  FSDPP_CHECK_AS(ConfigError, kd_ratio >= 0 && kd_ratio <= 1,
                 "[distill] kd_ratio={}: expected a number in [0, 1] (0: cross-entropy only, 1: "
                 "distillation only)",
                 kd_ratio);
  FSDPP_CHECK_AS(ConfigError, chunk_positions >= 0,
                 "[distill] chunk_positions={}: expected >= 0 (0: 64 MiB of probabilities)",
                 chunk_positions);
  const int64_t vocab = student_logits.size(-1);
  FSDPP_CHECK_AS(ConfigError,
                 labels.dim() == student_logits.dim() - 1 &&
                     labels.sizes() == student_logits.sizes().slice(0, labels.dim()),
                 "[distill] labels {} do not match logits {}; expected the logits' shape without "
                 "its last (vocabulary) dimension",
                 labels.sizes().vec(), student_logits.sizes().vec());
  FSDPP_CHECK_AS(ConfigError, !kd_mask.defined() || kd_mask.sizes() == labels.sizes(),
                 "[distill] kd_mask {} does not match labels {}; expected the same shape",
                 kd_mask.defined() ? kd_mask.sizes().vec() : std::vector<int64_t>{},
                 labels.sizes().vec());
  const auto flat = [&](const at::Tensor& t) {
    return t.defined() ? t.detach().reshape({-1, t.size(-1)}) : at::Tensor();
  };
  at::Tensor t = flat(teacher.logits), values = flat(teacher.values), ids = flat(teacher.ids);
  DistillLossOptions o = options;
  if (!teacher.sparse()) {
    FSDPP_CHECK_AS(ConfigError, teacher.logits.sizes() == student_logits.sizes(),
                   "[distill] student logits {} and teacher logits {} differ in shape; expected "
                   "the same (..., vocab) shape (the same tokenizer and vocabulary)",
                   student_logits.sizes().vec(), teacher.logits.sizes().vec());
    FSDPP_CHECK_AS(ConfigError, o.top_k <= vocab,
                   "[distill] top_k={} is larger than the vocabulary ({} tokens); expected 0 "
                   "(all) or at most {}",
                   o.top_k, vocab, vocab);
    if (o.top_k > 0 && o.top_k < vocab) {
      // The teacher's top k once: what the KD loss keeps of it from here to the backward. The
      // values are its logits, in the compute dtype as distillation_divergence divides them.
      ids = std::get<1>(t.topk(o.top_k, -1));
      values = t.gather(-1, ids);
      t = at::Tensor();
      o.top_k = 0;
    }
  }
  const auto flat_labels = labels.reshape({-1});
  const auto mask = kd_mask.defined() ? kd_mask.reshape({-1}).to(at::kBool)
                                      : flat_labels != options.ignore_index;
  const int64_t chunk = chunk_positions > 0 ? chunk_positions : default_chunk_positions(vocab);
  const auto student = student_logits.reshape({-1, vocab});
  const bool dense = t.defined();
  auto out = ChunkedObjective::apply(student, or_none(t, student), or_none(values, student),
                                     or_none(ids, flat_labels), flat_labels, mask, o, chunk, dense,
                                     divisors);
  DistillObjective parts;
  parts.kd = out[0];
  parts.ce = out[1];
  parts.loss = (1 - kd_ratio) * parts.ce + kd_ratio * parts.kd;
  return parts;
}

}  // namespace fsdpp::distill
