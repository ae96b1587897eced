#pragma once
// Cross entropy over logits that are split along the vocabulary, without gathering them
// (Megatron-LM's vocab_parallel_cross_entropy, PyTorch's loss_parallel):
//
//   auto loss = tp::vocab_parallel_cross_entropy(local_logits, targets, vocab_offset, group);
//
// local_logits (..., V_r) are this rank's columns [vocab_offset, vocab_offset + V_r) of the
// (..., V) logits; targets (...) are global token ids, -100 ignored. Returns the mean over the
// targets that are not ignored, the same value on every rank, equal to torch's cross_entropy of
// the gathered logits, computed and returned in float32 or wider whatever the logits' dtype. Communication per call, for M = targets.numel() positions: one all-reduce
// MAX of M floats (the row maxima) and one all-reduce SUM of 2M floats (sum of exp and the
// target logit, fused). Backward needs no communication: the gradient of each rank's columns is
// (softmax - one_hot) / count on those columns, from what forward saved. Uneven vocab shards
// (V not divisible by the degree) work: only the M-sized reductions cross ranks. With divisor
// > 0 the sum over the kept targets is divided by it instead of their count (as
// models::token_cross_entropy's divisor: a part of a batch over the whole batch's count).

#include <ATen/Tensor.h>

#include <cstdint>

#include "fsdpp/tp/regions.h"

namespace fsdpp::tp {

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                        int64_t vocab_offset, const GroupPtr& group,
                                        double divisor = 0);

}  // namespace fsdpp::tp
