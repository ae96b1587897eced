#pragma once
// How context parallelism (CP) splits a sequence over the ranks of a cp group: head-tail load
// balancing (torchtitan's and Megatron-LM's). A sequence of length T on W ranks is cut into 2W
// equal chunks of T/(2W) tokens; rank i holds chunks i and 2W-1-i, in that order:
//
//   T = 16, W = 2: chunks of 4    rank 0: positions 0-3 and 12-15    rank 1: 4-7 and 8-11
//
// Under a causal mask a late token attends to more keys than an early one; pairing an early
// chunk with a late one gives every rank the same work. Every tensor of a CP rank that runs along
// the sequence (tokens, targets, activations, q/k/v) holds this rank's two chunks, head then
// tail, concatenated (T/W tokens); RoPE takes the global positions of sequence_positions.
//
//   auto local = cp::shard_sequence(tokens, /*dim=*/1, rank, world);   // (B, T/W)
//   auto pos = cp::sequence_positions(tokens.size(1), rank, world);    // (T/W,) int64
//   auto whole = cp::unshard_sequence(pieces, /*dim=*/1);              // pieces in rank order
//
// A length that 2W does not divide is a ConfigError naming the length and the degree: the
// chunks must be equal, and padding would change what attention sees.

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

namespace fsdpp::cp {

// The global chunk indices rank `rank` of `world` holds: {rank, 2*world-1-rank}.
struct HeadTail {
  int64_t head = 0;
  int64_t tail = 0;
};
HeadTail head_tail_chunks(int rank, int world);

// The tokens of one chunk: T/(2W), after checking that 2W divides T (the ConfigError above).
int64_t chunk_length(int64_t length, int world);

// x's sequence (along `dim`, of length T) -> this rank's two chunks, head then tail (T/W along
// `dim`), contiguous. Differentiable (a narrow and a cat).
at::Tensor shard_sequence(const at::Tensor& x, int64_t dim, int rank, int world);

// The inverse: every rank's piece (as shard_sequence cut it), in rank order -> the whole
// sequence along `dim`. The world is pieces.size(); every piece has the same even length there.
at::Tensor unshard_sequence(const std::vector<at::Tensor>& pieces, int64_t dim);

// The global position of each of this rank's T/W tokens: int64 (T/W,), head chunk first.
at::Tensor sequence_positions(int64_t length, int rank, int world);

}  // namespace fsdpp::cp
