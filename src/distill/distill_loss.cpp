// The distillation losses (distill_loss.h); docs/distillation.md#losses names the recipe each
// follows.
#include "fsdpp/distill/distill_loss.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <cmath>

#include "divergence.h"
#include "fsdpp/common/error.h"

namespace fsdpp::distill {
namespace {

// The divergence of `s` and `t`, the student's and the teacher's logits over the same tokens
// already divided by T (the whole vocabulary or the teacher's top k), times T^2.
at::Tensor divergence_of(const at::Tensor& s, const at::Tensor& t, const DistillLossOptions& options) {
  return divergence_of_log_probs(s.log_softmax(-1), t.log_softmax(-1), options,
                                 [](const at::Tensor& terms) { return terms.sum(-1); });
}

}  // namespace

at::ScalarType distill_compute_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

void check_distill_shapes(const at::Tensor& student, const at::Tensor& teacher) {
  FSDPP_CHECK_AS(ConfigError, student.dim() >= 1 && student.sizes() == teacher.sizes(),
                 "[distill] student logits {} and teacher logits {} differ in shape; expected "
                 "the same (..., vocab) shape (the same tokenizer and vocabulary)",
                 student.sizes().vec(), teacher.sizes().vec());
}

void check_distill_labels(const at::Tensor& logits, const at::Tensor& labels) {
  FSDPP_CHECK_AS(ConfigError,
                 labels.dim() == logits.dim() - 1 &&
                     labels.sizes() == logits.sizes().slice(0, logits.dim() - 1),
                 "[distill] labels {} do not match logits {}; expected the logits' shape without "
                 "its last (vocabulary) dimension",
                 labels.sizes().vec(), logits.sizes().vec());
}

// KL(p || q) per position from log-probabilities over the last dimension: F.kl_div(log_q, log_p,
// log_target=True) summed over the vocabulary. exp(log_p) underflows to 0 where p is negligible,
// and 0 * (a finite difference) stays 0.
at::Tensor divergence_of_log_probs(const at::Tensor& log_s, const at::Tensor& log_t,
                                   const DistillLossOptions& options, const VocabSum& sum) {
  const auto kl = [&](const at::Tensor& log_p, const at::Tensor& log_q) {
    return sum(log_p.exp() * (log_p - log_q));
  };
  const double T = options.temperature;
  const double beta = options.beta;
  at::Tensor d;
  switch (options.type.value()) {
    case DistillLossType::FORWARD_KL: d = kl(log_t, log_s); break;
    case DistillLossType::REVERSE_KL: d = kl(log_s, log_t); break;
    case DistillLossType::GENERALIZED_JSD:
      // TRL: the ends are the KLs themselves (the mixture formula would give 0 there).
      if (beta == 0) {
        d = kl(log_t, log_s);
      } else if (beta == 1) {
        d = kl(log_s, log_t);
      } else {
        const auto log_m =
            at::logsumexp(at::stack({log_s + std::log1p(-beta), log_t + std::log(beta)}), 0);
        d = beta * kl(log_t, log_m) + (1 - beta) * kl(log_s, log_m);
      }
      break;
  }
  return d * (T * T);
}

at::Tensor masked_mean(const at::Tensor& per_position, const at::Tensor& keep) {
  const auto kept = keep.sum().to(per_position.scalar_type());
  return per_position.masked_fill(keep.logical_not(), 0).sum() / kept.clamp_min(1);
}

at::Tensor masked_mean(const at::Tensor& per_position, const at::Tensor& keep, double divisor) {
  if (divisor <= 0) return masked_mean(per_position, keep);
  return per_position.masked_fill(keep.logical_not(), 0).sum() / divisor;
}

void DistillLossOptions::validate() const {
  FSDPP_CHECK_AS(ConfigError, beta >= 0 && beta <= 1,
                 "[distill] beta={}: expected a number in [0, 1] (0: forward_kl, 1: reverse_kl)",
                 beta);
  FSDPP_CHECK_AS(ConfigError, temperature > 0 && std::isfinite(temperature),
                 "[distill] temperature={}: expected a finite number > 0", temperature);
  FSDPP_CHECK_AS(ConfigError, top_k >= 0,
                 "[distill] top_k={}: expected >= 0 (0: the whole vocabulary)", top_k);
}

at::Tensor distillation_divergence(const at::Tensor& student_logits,
                                   const at::Tensor& teacher_logits,
                                   const DistillLossOptions& options) {
  options.validate();
  check_distill_shapes(student_logits, teacher_logits);
  const int64_t vocab = student_logits.size(-1);
  FSDPP_CHECK_AS(ConfigError, options.top_k <= vocab,
                 "[distill] top_k={} is larger than the vocabulary ({} tokens); expected 0 (all) "
                 "or at most {}",
                 options.top_k, vocab, vocab);
  const double T = options.temperature;
  const auto dtype = distill_compute_dtype(student_logits);
  at::Tensor s = student_logits.to(dtype) / T;
  at::Tensor t = teacher_logits.detach().to(dtype) / T;
  if (options.top_k > 0 && options.top_k < vocab) {
    const auto idx = std::get<1>(t.topk(options.top_k, -1));
    s = s.gather(-1, idx);
    t = t.gather(-1, idx);
  }
  return divergence_of(s, t, options);
}

at::Tensor sparse_distillation_divergence(const at::Tensor& student_logits,
                                          const at::Tensor& teacher_values,
                                          const at::Tensor& teacher_ids,
                                          const DistillLossOptions& options) {
  options.validate();
  FSDPP_CHECK_AS(ConfigError,
                 teacher_values.dim() == student_logits.dim() &&
                     teacher_values.sizes() == teacher_ids.sizes() &&
                     teacher_values.sizes().slice(0, teacher_values.dim() - 1) ==
                         student_logits.sizes().slice(0, student_logits.dim() - 1),
                 "[distill] a sparse teacher of values {} and token ids {} for student logits "
                 "{}; expected (..., K) both, the student's positions (...)",
                 teacher_values.sizes().vec(), teacher_ids.sizes().vec(),
                 student_logits.sizes().vec());
  const int64_t K = teacher_values.size(-1);
  FSDPP_CHECK_AS(ConfigError, options.top_k <= K,
                 "[distill] top_k={} is larger than the teacher's {} stored tokens per position; "
                 "expected 0 (all of them) or at most {}",
                 options.top_k, K, K);
  const double T = options.temperature;
  const auto dtype = distill_compute_dtype(student_logits);
  at::Tensor t = teacher_values.detach().to(dtype) / T;
  at::Tensor ids = teacher_ids;
  if (options.top_k > 0 && options.top_k < K) {
    const auto keep = std::get<1>(t.topk(options.top_k, -1));
    t = t.gather(-1, keep);
    ids = ids.gather(-1, keep);
  }
  const at::Tensor s = (student_logits.to(dtype) / T).gather(-1, ids);
  return divergence_of(s, t, options);
}

at::Tensor distillation_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                             const at::Tensor& labels, const DistillLossOptions& options) {
  check_distill_shapes(student_logits, teacher_logits);
  check_distill_labels(student_logits, labels);
  const auto d = distillation_divergence(student_logits, teacher_logits, options);
  return masked_mean(d, labels != options.ignore_index);
}

void TokenDivisors::validate() const {
  FSDPP_CHECK_AS(ConfigError, ce >= 0 && kd >= 0 && std::isfinite(ce) && std::isfinite(kd),
                 "[distill] token divisors ce={} kd={}: expected 0 (the batch's own count) or a "
                 "finite number > 0",
                 ce, kd);
}

DistillObjective distillation_objective(const at::Tensor& student_logits,
                                        const at::Tensor& teacher_logits,
                                        const at::Tensor& labels,
                                        const DistillLossOptions& options, double kd_ratio,
                                        const TokenDivisors& divisors) {
  FSDPP_CHECK_AS(ConfigError, kd_ratio >= 0 && kd_ratio <= 1,
                 "[distill] kd_ratio={}: expected a number in [0, 1] (0: cross-entropy only, 1: "
                 "distillation only)",
                 kd_ratio);
  divisors.validate();
  DistillObjective out;
  if (divisors.kd > 0) {
    check_distill_shapes(student_logits, teacher_logits);
    check_distill_labels(student_logits, labels);
    const auto d = distillation_divergence(student_logits, teacher_logits, options);
    out.kd = masked_mean(d, labels != options.ignore_index, divisors.kd);
  } else {
    out.kd = distillation_loss(student_logits, teacher_logits, labels, options);
  }
  const int64_t vocab = student_logits.size(-1);
  const auto logits = student_logits.to(distill_compute_dtype(student_logits)).reshape({-1, vocab});
  const auto flat = labels.reshape({-1});
  // Summed, then divided by the kept positions: the same mean as cross_entropy's, and 0 rather
  // than NaN when every label is ignored.
  const auto ce_sum = at::cross_entropy_loss(logits, flat, {}, at::Reduction::Sum,
                                             options.ignore_index);
  out.ce = divisors.ce > 0
               ? ce_sum / divisors.ce
               : ce_sum / (flat != options.ignore_index).sum().to(ce_sum.scalar_type()).clamp_min(1);
  out.loss = (1 - kd_ratio) * out.ce + kd_ratio * out.kd;
  return out;
}

}  // namespace fsdpp::distill
