#pragma once
// What distill_loss.cpp and vocab_parallel_distill_loss.cpp share: the divergences' one formula
// over log-probabilities, with the sum over the vocabulary given by the caller (a plain sum over
// the last dimension, or a rank's columns summed and then reduced over the tensor-parallel
// group), and the checks and the mean both losses apply.

#include <ATen/core/Tensor.h>

#include <functional>

#include "fsdpp/distill/distill_loss.h"

namespace fsdpp::distill {

// (N..., V) terms -> (N...) their sum over the whole vocabulary.
using VocabSum = std::function<at::Tensor(const at::Tensor&)>;

// options.type's divergence of the student's and the teacher's log-probabilities (at the
// temperature already), times T^2, per position.
at::Tensor divergence_of_log_probs(const at::Tensor& log_s, const at::Tensor& log_t,
                                   const DistillLossOptions& options, const VocabSum& sum);

// float32, or float64 for float64 logits: the divergences' compute dtype.
at::ScalarType distill_compute_dtype(const at::Tensor& t);

// ConfigErrors naming both shapes.
void check_distill_shapes(const at::Tensor& student, const at::Tensor& teacher);
void check_distill_labels(const at::Tensor& logits, const at::Tensor& labels);

// The mean over positions whose `keep` is true; 0 (with a zero gradient) when none is.
at::Tensor masked_mean(const at::Tensor& per_position, const at::Tensor& keep);
// The same over `divisor` instead of keep's count when divisor > 0 (TokenDivisors).
at::Tensor masked_mean(const at::Tensor& per_position, const at::Tensor& keep, double divisor);

}  // namespace fsdpp::distill
