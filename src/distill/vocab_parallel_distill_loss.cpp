// Distillation losses over vocabulary-parallel logits (vocab_parallel_distill_loss.h).
#include "fsdpp/distill/vocab_parallel_distill_loss.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <limits>

#include "divergence.h"
#include "fsdpp/common/error.h"
#include "fsdpp/tp/cross_entropy.h"

namespace fsdpp::distill {
namespace {

// Where each rank's columns take part: all of them (an undefined tensor: no mask to apply), or
// those whose teacher logit is among the k largest of the whole vocabulary (each rank's k largest
// gathered, the k-th of those the bar).
at::Tensor kept_columns(const at::Tensor& t, int64_t top_k, const tp::GroupPtr& group) {
  if (top_k == 0) return {};
  const int64_t v_local = t.size(-1);
  auto vocab = at::full({1}, v_local, at::kLong);
  group->all_reduce(vocab, dist::ReduceOp::SUM, {"distill.vocab_parallel.vocab"});
  const int64_t v = vocab.item<int64_t>();
  FSDPP_CHECK_AS(ConfigError, top_k <= v,
                 "[distill] top_k={} is larger than the vocabulary ({} tokens); expected 0 (all) "
                 "or at most {}",
                 top_k, v, v);
  if (top_k == v) return {};
  const auto rows = t.reshape({-1, v_local});
  // This rank's k largest (fewer columns than k: padded with -inf, never among the k largest).
  auto mine = at::full({rows.size(0), top_k}, -std::numeric_limits<double>::infinity(), rows.options());
  const int64_t k_here = std::min(top_k, v_local);
  mine.narrow(1, 0, k_here).copy_(std::get<0>(rows.topk(k_here, -1)));
  auto all = at::empty({group->size() * rows.size(0), top_k}, rows.options());
  group->all_gather_into_tensor(all, mine.contiguous(), {"distill.vocab_parallel.top_k"});
  // (ranks * M, k) -> (M, ranks * k): each position's candidates from every rank.
  const auto candidates = all.view({group->size(), rows.size(0), top_k}).permute({1, 0, 2})
                              .reshape({rows.size(0), -1});
  const auto bar = std::get<0>(candidates.topk(top_k, -1)).select(1, top_k - 1);  // (M)
  return (rows >= bar.unsqueeze(1)).reshape(t.sizes());
}

// log_softmax over the whole vocabulary of the columns in `keep`, from this rank's columns `x`:
// x - log(sum exp x) with the sum's all-reduce differentiable in both directions (every rank's
// terms depend on the one normaliser). Columns outside `keep` get finite values the caller
// multiplies by 0; an undefined `keep` is every column.
at::Tensor log_softmax_over(const at::Tensor& x, const at::Tensor& keep, const tp::GroupPtr& group) {
  auto max = std::get<0>(x.detach().max(-1)).contiguous();  // the kept set holds the maximum
  group->all_reduce(max, dist::ReduceOp::MAX, {"distill.vocab_parallel.max"});
  const auto shifted = x - max.unsqueeze(-1);
  const auto exp = keep.defined() ? shifted.exp() * keep.to(x.scalar_type()) : shifted.exp();
  const auto local_sum = exp.sum(-1);
  const auto sum = tp::copy_to_region(tp::reduce_from_region(local_sum, group, "distill"), group,
                                      "distill");
  return shifted - sum.log().unsqueeze(-1);
}

}  // namespace

at::Tensor vocab_parallel_distillation_divergence(const at::Tensor& student_local,
                                                  const at::Tensor& teacher_local,
                                                  const DistillLossOptions& options,
                                                  const tp::GroupPtr& group) {
  options.validate();
  check_distill_shapes(student_local, teacher_local);
  const double T = options.temperature;
  const auto dtype = distill_compute_dtype(student_local);
  const at::Tensor s = student_local.to(dtype) / T;
  const at::Tensor t = teacher_local.detach().to(dtype) / T;
  const auto keep = kept_columns(t, options.top_k, group);
  const auto kept = keep.defined() ? keep.to(dtype) : at::Tensor();
  const auto log_s = log_softmax_over(s, keep, group);
  const auto log_t = log_softmax_over(t, keep, group).detach();
  return divergence_of_log_probs(log_s, log_t, options, [&](const at::Tensor& terms) {
    return tp::reduce_from_region((kept.defined() ? terms * kept : terms).sum(-1), group, "distill");
  });
}

at::Tensor vocab_parallel_distillation_loss(const at::Tensor& student_local,
                                            const at::Tensor& teacher_local,
                                            const at::Tensor& labels,
                                            const DistillLossOptions& options,
                                            const tp::GroupPtr& group) {
  check_distill_shapes(student_local, teacher_local);
  check_distill_labels(student_local, labels);
  const auto d = vocab_parallel_distillation_divergence(student_local, teacher_local, options, group);
  return masked_mean(d, labels != options.ignore_index);
}

DistillObjective vocab_parallel_distillation_objective(const at::Tensor& student_local,
                                                       const at::Tensor& teacher_local,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& kd_mask,
                                                       const DistillLossOptions& options,
                                                       double kd_ratio, int64_t vocab_offset,
                                                       const tp::GroupPtr& group,
                                                       const TokenDivisors& divisors) {
  divisors.validate();
  check_distill_shapes(student_local, teacher_local);
  check_distill_labels(student_local, labels);
  FSDPP_CHECK_AS(ConfigError, !kd_mask.defined() || kd_mask.sizes() == labels.sizes(),
                 "[distill] kd_mask has shape {}, the labels {}; expected the same",
                 kd_mask.sizes(), labels.sizes());
  const auto d = vocab_parallel_distillation_divergence(student_local, teacher_local, options, group);
  DistillObjective out;
  out.kd = masked_mean(d, kd_mask.defined() ? kd_mask : labels != options.ignore_index,
                       divisors.kd);
  auto ce_labels = labels;
  if (options.ignore_index != -100) {  // vocab_parallel_cross_entropy ignores -100
    ce_labels = labels.masked_fill(labels == options.ignore_index, -100);
  }
  out.ce = tp::vocab_parallel_cross_entropy(student_local, ce_labels, vocab_offset, group,
                                            divisors.ce);
  out.loss = (1 - kd_ratio) * out.ce + kd_ratio * out.kd;
  return out;
}

}  // namespace fsdpp::distill
