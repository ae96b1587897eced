#pragma once
// The distillation objective of distill_loss.h computed a chunk of positions at a time, with a
// backward that recomputes each chunk (TRL's chunked JSD, Liger's chunked losses): the memory
// it adds to the student's and the teacher's logits is one chunk's probabilities, not the
// (positions x vocabulary) softmaxes, log-softmaxes and products that autograd keeps for the
// unchunked loss (docs/distillation.md#memory).
//
//   TeacherTargets teacher{.logits = teacher_logits};          // or .values/.ids of a cache
//   auto parts = chunked_distillation_objective(student_logits, teacher, labels, kd_mask,
//                                               options, /*kd_ratio=*/0.5);
//   parts.loss.backward();   // per chunk: recompute, differentiate, write the chunk's gradient
//
// Values equal distillation_objective's: the per-position divergences are computed by the same
// functions on each chunk and averaged as there (kd bit for bit; ce within float rounding of
// the order of its sum), and so are the gradients, which autograd computes per chunk from
// those same functions.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fsdpp/distill/distill_loss.h"

namespace fsdpp::distill {

// The teacher's side of the loss: its logits over the whole vocabulary, or K tokens per
// position (`values`: logits or log-probabilities, `ids`: their token ids, sparse_distillation_
// divergence). Constants: no gradient reaches them.
struct TeacherTargets {
  at::Tensor logits;       // (N..., V)
  at::Tensor values, ids;  // (N..., K) each, when logits is undefined
  bool sparse() const { return !logits.defined(); }
};

// (1 - kd_ratio) * ce + kd_ratio * kd, as distillation_objective, with the cross-entropy over
// the positions whose label is not options.ignore_index and the KD loss over the positions of
// `kd_mask` (bool, the labels' shape; undefined: the same positions as the cross-entropy).
// With options.top_k > 0 and whole-vocabulary logits, the teacher's top k per position are
// taken once (the KD loss then keeps (N..., k) of the teacher). `chunk_positions` positions
// per chunk; 0 picks as many as hold 64 MiB of float32 probabilities (at least 1). `divisors`:
// what the two means divide by instead of their counts (distill_loss.h's TokenDivisors).
DistillObjective chunked_distillation_objective(const at::Tensor& student_logits,
                                                const TeacherTargets& teacher,
                                                const at::Tensor& labels,
                                                const at::Tensor& kd_mask,
                                                const DistillLossOptions& options,
                                                double kd_ratio, int64_t chunk_positions = 0,
                                                const TokenDivisors& divisors = {});

// The positions per chunk that `chunk_positions` = 0 picks for a vocabulary of `vocab`.
int64_t default_chunk_positions(int64_t vocab);

}  // namespace fsdpp::distill
