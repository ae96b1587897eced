#pragma once
// The communications of tensor and sequence parallelism, each an autograd Function whose
// backward is the matching collective over the tensor-parallel group, so loss.backward() just
// works (Megatron-LM's mappings, PyTorch's Colwise/Rowwise/SequenceParallel redistributions):
//
//   copy_to_region        forward identity              backward all-reduce (SUM)
//   reduce_from_region    forward all-reduce (SUM)      backward identity
//   gather_from_sequence  forward all-gather along dim  backward reduce-scatter (SUM) along dim
//   scatter_to_sequence   forward reduce-scatter (SUM)  backward all-gather along dim
//   chunk_of_whole        forward this rank's chunk     backward all-gather along dim
//   whole_of_chunks       forward all-gather along dim  backward this rank's chunk
//
// The first four carry partial sums (a row-parallel layer's output, the input gradient of a
// column-parallel one); the last two move a replicated tensor to chunks and back where each
// rank computes its own chunk whole (a MoE layer whose ranks route different tokens: Megatron's
// scatter_to / gather_from_tensor_model_parallel_region).
//
//   auto x_full = tp::gather_from_sequence(x_shard, group, /*dim=*/1);   // (B,T/N,C) -> (B,T,C)
//
// Along the sequence every rank holds an equal chunk: a length that does not divide by the
// group size is a ConfigError naming the length and the degree (fsdpp's reduce-scatter and
// all-gather move equal chunks; padding a sequence would change what attention sees).

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::tp {

using GroupPtr = std::shared_ptr<dist::ProcessGroup>;

// `what` names the layer in collective error messages ("layers.1.attention").
at::Tensor copy_to_region(const at::Tensor& x, const GroupPtr& group,
                          const std::string& what = "tp");
at::Tensor reduce_from_region(const at::Tensor& x, const GroupPtr& group,
                              const std::string& what = "tp");
// x: this rank's chunk along `dim` (size n) -> the whole (size N*n), chunks in rank order.
at::Tensor gather_from_sequence(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                                const std::string& what = "tp");
// x: a partial sum of the whole (size N*n along `dim`) -> this rank's chunk of the sum.
at::Tensor scatter_to_sequence(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                               const std::string& what = "tp");

// x: the same whole tensor on every rank -> this rank's equal chunk along `dim` (its gradient:
// the chunks' gradients gathered, so the whole tensor's gradient is on every rank again).
at::Tensor chunk_of_whole(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                          const std::string& what = "tp");
// x: this rank's chunk, computed whole here -> the whole tensor on every rank (its gradient, the
// same on every rank, is cut back to this rank's chunk).
at::Tensor whole_of_chunks(const at::Tensor& x, const GroupPtr& group, int64_t dim,
                           const std::string& what = "tp");

// The contiguous part of a dimension of `size` that rank `rank` of `degree` holds: the first
// size % degree ranks hold one element more (torch.chunk-like but never empty when size >=
// degree). Used by every primitive that allows uneven shards.
struct ShardRange {
  int64_t offset = 0;
  int64_t size = 0;
};
ShardRange shard_range(int64_t size, int degree, int rank);

}  // namespace fsdpp::tp
