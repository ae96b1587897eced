#pragma once
// The distillation losses of distill_loss.h over logits split along the vocabulary by tensor
// parallelism, without gathering the vocabulary (as tp::vocab_parallel_cross_entropy does for
// the cross-entropy; Megatron-LM and NeMo's distillation compute their KD loss this way):
//
//   auto r = tp::shard_range(vocab, group->size(), group->rank());   // this rank's columns
//   auto kd = fsdpp::distill::vocab_parallel_distillation_loss(student_local, teacher_local,
//                                                             labels, options, group);
//   kd.backward();   // each rank's columns get their gradient
//
// student_local, teacher_local (N..., V_r): this rank's columns of the (N..., V) logits, the same
// columns in both (uneven shards allowed). The values and the gradients equal
// distillation_divergence / distillation_loss of the gathered logits (within float rounding of
// the order of the sums), for every DistillLossType, temperature and top_k; the result is the
// same on every rank of the group.
//
// Per call, for M positions: for each of the two softmaxes an all-reduce MAX and an all-reduce
// SUM of M floats (its maximum and normaliser), one all-reduce SUM of M for the divergence's
// columns, and in backward one all-reduce SUM of M (the student's normaliser's gradient, which
// every rank's columns feed). With top_k, also one all-gather of M x top_k floats (each rank's k
// largest teacher logits, to find the k largest of the whole vocabulary) and one of the
// vocabulary's size. With top_k, every token whose teacher logit equals the k-th largest is kept
// (a tie at the k-th value keeps more than k, where torch.topk keeps k of them, unspecified
// which).

#include <ATen/core/Tensor.h>

#include "fsdpp/tp/regions.h"
#include "fsdpp/distill/distill_loss.h"

namespace fsdpp::distill {

// (N...) per position: temperature^2 * D(...), as distillation_divergence.
at::Tensor vocab_parallel_distillation_divergence(const at::Tensor& student_local,
                                                  const at::Tensor& teacher_local,
                                                  const DistillLossOptions& options,
                                                  const tp::GroupPtr& group);

// The masked mean over positions whose label is not options.ignore_index, as distillation_loss.
at::Tensor vocab_parallel_distillation_loss(const at::Tensor& student_local,
                                            const at::Tensor& teacher_local,
                                            const at::Tensor& labels,
                                            const DistillLossOptions& options,
                                            const tp::GroupPtr& group);

// distillation_objective (chunked_distillation_objective's values) over this rank's columns:
// (1 - kd_ratio) * the cross-entropy of the labels (tp::vocab_parallel_cross_entropy, the
// positions whose label is not ignore_index) + kd_ratio * the divergence's mean over kd_mask's
// positions (undefined: the cross-entropy's). `vocab_offset`: the first column this rank holds.
// What fsdpp-train's distillation computes when the student is tensor parallel; every tensor is
// (N..., V_r), positions x this rank's columns, never the whole vocabulary. `divisors`: what the
// two means divide by instead of their counts (distill_loss.h's TokenDivisors).
DistillObjective vocab_parallel_distillation_objective(const at::Tensor& student_local,
                                                       const at::Tensor& teacher_local,
                                                       const at::Tensor& labels,
                                                       const at::Tensor& kd_mask,
                                                       const DistillLossOptions& options,
                                                       double kd_ratio, int64_t vocab_offset,
                                                       const tp::GroupPtr& group,
                                                       const TokenDivisors& divisors = {});

}  // namespace fsdpp::distill
