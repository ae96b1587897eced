#pragma once
// An embedding whose table is split along the vocabulary (Megatron-LM's VocabParallelEmbedding):
// rank r holds rows [offset, offset + V_r). Each rank looks up the tokens it holds, zeroes the
// others, and the partial embeddings are all-reduced, or, under sequence parallelism,
// reduce-scattered along the sequence (dim 1) so that every rank gets its (B, T/N, C) chunk.
// The backward needs no communication without sequence parallelism (each rank's rows get the
// gradient of its own tokens) and one all-gather of the (B, T/N, C) gradient with it.
//
// Uneven vocabularies work (V % N != 0: the first ranks hold one row more); V < N is a
// ConfigError naming vocab_size and the degree.

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "fsdpp/tp/regions.h"

namespace fsdpp::tp {

// tokens (B,T) global ids; weight (V_r, C) rows [vocab_offset, vocab_offset + V_r).
at::Tensor vocab_parallel_embedding(const at::Tensor& tokens, const at::Tensor& weight,
                                    int64_t vocab_offset, const GroupPtr& group,
                                    bool sequence_parallel, const std::string& what);

class VocabParallelEmbeddingImpl : public torch::nn::Cloneable<VocabParallelEmbeddingImpl> {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t dim, GroupPtr group,
                             bool sequence_parallel = false);
  void reset() override;
  at::Tensor forward(const at::Tensor& tokens);  // (B,T) -> (B,T,C) or (B,T/N,C)
  void load_full(const at::Tensor& weight);      // this rank's rows of a full (V, C) table

  int64_t vocab_size, dim;
  GroupPtr group;
  bool sequence_parallel;
  ShardRange rows;
  at::Tensor weight;  // (V_r, C)
};
TORCH_MODULE(VocabParallelEmbedding);

}  // namespace fsdpp::tp
