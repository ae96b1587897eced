#include "fsdpp/tp/embedding.h"

#include <ATen/ATen.h>

#include "fsdpp/common/error.h"
#include "fsdpp/tp/linear.h"

namespace fsdpp::tp {

at::Tensor vocab_parallel_embedding(const at::Tensor& tokens, const at::Tensor& weight,
                                    int64_t vocab_offset, const GroupPtr& group,
                                    bool sequence_parallel, const std::string& what) {
  const int64_t v_local = weight.size(0);
  auto mine = (tokens >= vocab_offset) & (tokens < vocab_offset + v_local);  // (B,T)
  auto local = at::where(mine, tokens - vocab_offset, at::zeros_like(tokens));
  auto partial = at::embedding(weight, local) * mine.unsqueeze(-1).to(weight.scalar_type());
  return sequence_parallel ? scatter_to_sequence(partial, group, 1, what)
                           : reduce_from_region(partial, group, what);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t dim,
                                                       GroupPtr group, bool sequence_parallel)
    : vocab_size(vocab_size), dim(dim), group(std::move(group)),
      sequence_parallel(sequence_parallel) {
  reset();
}

void VocabParallelEmbeddingImpl::reset() {
  rows = checked_shard("embedding", "vocab_size", vocab_size, group);
  weight = register_parameter("weight", torch::randn({rows.size, dim}));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& tokens) {
  return vocab_parallel_embedding(tokens, weight, rows.offset, group, sequence_parallel,
                                  "embedding");
}

void VocabParallelEmbeddingImpl::load_full(const at::Tensor& w) {
  FSDPP_CHECK_AS(ConfigError, w.dim() == 2 && w.size(0) == vocab_size && w.size(1) == dim,
                 "[tp] embedding: load_full got a table of shape {}; expected ({}, {})",
                 w.sizes(), vocab_size, dim);
  torch::NoGradGuard no_grad;
  weight.copy_(w.narrow(0, rows.offset, rows.size));
}

}  // namespace fsdpp::tp
