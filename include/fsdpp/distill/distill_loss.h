#pragma once
// Knowledge-distillation losses between a student's and a teacher's logits, named and defined as
// the common recipes define them (docs/distillation.md#losses):
//
//   forward_kl       KL(teacher || student) = sum_v p_t (log p_t - log p_s): mass-covering.
//                    torchtune's ForwardKLLoss and DistillKit's KL; torchtune leaves out the
//                    teacher's entropy (a constant for the student), fsdpp keeps it, so that
//                    identical logits give 0. The gradients are the same.
//   reverse_kl       KL(student || teacher): mode-seeking (torchtune's ReverseKLLoss).
//   generalized_jsd  TRL's GKD generalized_jsd_loss: with M = beta p_t + (1 - beta) p_s,
//                    beta KL(teacher || M) + (1 - beta) KL(student || M); beta 0 is
//                    forward_kl and beta 1 is reverse_kl exactly, as TRL special-cases them.
//
// Every divergence is over the logits divided by `temperature` and multiplied by
// temperature^2 (Hinton et al., DistillKit), so that its gradients keep their size as T changes.
// With top_k > 0 both distributions are renormalised over the teacher's k most likely tokens of
// each position (TRL's top_k). Positions whose label is ignore_index (-100) are left out and the
// loss is the mean over the others (torchtune's masked mean); with none left it is 0, with a
// zero gradient.
//
//   auto kd = fsdpp::distill::distillation_loss(student_logits, teacher_logits, labels,
//                                             {.type = DistillLossType::GENERALIZED_JSD,
//                                              .beta = 0.5, .temperature = 2.0});
//   auto parts = fsdpp::distill::distillation_objective(student_logits, teacher_logits, labels,
//                                                     options, /*kd_ratio=*/0.5);
//   parts.loss.backward();   // (1 - kd_ratio) * cross-entropy + kd_ratio * kd (torchtune)
//
// The teacher's logits are treated as constants (no gradient flows into them).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "fsdpp/config/choice.h"

namespace fsdpp::distill {

enum class DistillLossType { FORWARD_KL, REVERSE_KL, GENERALIZED_JSD };

}  // namespace fsdpp::distill

namespace fsdpp::config {

template <>
struct ChoiceNames<distill::DistillLossType> {
  static constexpr std::string_view kWhat = "distillation loss";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<distill::DistillLossType, std::string_view>, 3> kNames{{
      {distill::DistillLossType::FORWARD_KL, "forward_kl"},
      {distill::DistillLossType::REVERSE_KL, "reverse_kl"},
      {distill::DistillLossType::GENERALIZED_JSD, "generalized_jsd"},
  }};
};

}  // namespace fsdpp::config

namespace fsdpp::distill {

struct DistillLossOptions {
  config::Choice<DistillLossType> type = DistillLossType::FORWARD_KL;
  double beta = 0.5;         // generalized_jsd: the teacher's weight in the mixture, in [0, 1]
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // 0: the whole vocabulary
  int64_t ignore_index = -100;

  // ConfigError naming the field for a beta outside [0, 1], a temperature <= 0 or not finite,
  // a negative top_k.
  void validate() const;
};

// The divergence per position, (N...) for logits (N..., V): temperature^2 * D(...) before
// masking and averaging. Teacher logits are detached.
at::Tensor distillation_divergence(const at::Tensor& student_logits,
                                   const at::Tensor& teacher_logits,
                                   const DistillLossOptions& options);

// The same against a teacher known on K tokens per position only (an offline cache,
// teacher_cache.h, or the teacher's top k): `teacher_values` (N..., K) are its logits or its
// log-probabilities over the whole vocabulary at temperature 1 (log_softmax over the K gives the
// same either way), `teacher_ids` (N..., K) int64 their tokens. The student's logits are
// gathered at those tokens and both renormalised over them: with the teacher's k largest
// logits this is distillation_divergence with top_k = k. options.top_k > 0 keeps the top_k
// largest of the K values (at most K).
at::Tensor sparse_distillation_divergence(const at::Tensor& student_logits,
                                          const at::Tensor& teacher_values,
                                          const at::Tensor& teacher_ids,
                                          const DistillLossOptions& options);

// The masked mean of distillation_divergence over positions whose label is not ignore_index.
// student_logits and teacher_logits (B, T, V) (or (N, V)), labels (B, T) (or (N)) int64.
at::Tensor distillation_loss(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                             const at::Tensor& labels, const DistillLossOptions& options);

struct DistillObjective {
  at::Tensor loss;  // (1 - kd_ratio) * ce + kd_ratio * kd
  at::Tensor ce;    // the student's cross-entropy against labels (mean over kept positions,
                    // or their sum over TokenDivisors::ce)
  at::Tensor kd;    // distillation_loss
};

// What the objective's masked means divide their sums by instead of their own counts: 0 keeps
// the count (the mean over this batch's positions); > 0 is a global batch's count made per
// microbatch (parallel::token_loss_divisor), so that the microbatches and data-parallel ranks of
// a step add up to the global batch's mean over its tokens (transformers' num_items_in_batch).
struct TokenDivisors {
  double ce = 0;  // the cross-entropy's (its positions: labels != ignore_index)
  double kd = 0;  // the KD loss's (its positions: kd_mask's, or the cross-entropy's)
  // ConfigError for a negative or non-finite divisor.
  void validate() const;
};

// torchtune's knowledge-distillation recipe's mix (kd_ratio, DistillKit's alpha): kd_ratio in
// [0, 1]; the cross-entropy is over the student's logits at temperature 1.
DistillObjective distillation_objective(const at::Tensor& student_logits,
                                        const at::Tensor& teacher_logits,
                                        const at::Tensor& labels,
                                        const DistillLossOptions& options, double kd_ratio,
                                        const TokenDivisors& divisors = {});

}  // namespace fsdpp::distill
