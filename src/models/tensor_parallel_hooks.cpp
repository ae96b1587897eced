#include "tensor_parallel_hooks.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "fsdpp/tp/cross_entropy.h"
#include "fsdpp/tp/embedding.h"
#include "fsdpp/tp/plan.h"

namespace fsdpp::models::detail {

using namespace fsdpp::tp;

at::Tensor TensorParallelHooks::enter(const at::Tensor& x, const char* where) {
  return sp_ ? gather_from_sequence(x, group_, 1, where) : copy_to_region(x, group_, where);
}

at::Tensor TensorParallelHooks::exit(const at::Tensor& y, const char* where) {
  return sp_ ? scatter_to_sequence(y, group_, 1, where) : reduce_from_region(y, group_, where);
}

at::Tensor TensorParallelHooks::embed(const at::Tensor& tokens, const at::Tensor& table) {
  return vocab_parallel_embedding(tokens, table, vocab_offset_, group_, sp_, "tok_embeddings");
}

at::Tensor TensorParallelHooks::norm_weight(const at::Tensor& weight) {
  return sp_ || per_head_ ? copy_to_region(weight, group_, "norm") : weight;
}

at::Tensor TensorParallelHooks::loss(const at::Tensor& logits, const at::Tensor& targets,
                                     double divisor) {
  return vocab_parallel_cross_entropy(logits, targets, vocab_offset_, group_, divisor);
}

at::Tensor TensorParallelHooks::whole_logits(const at::Tensor& logits) {
  const int64_t dim = logits.dim() - 1;
  auto total = torch::tensor({logits.size(dim)});
  group_->all_reduce(total, dist::ReduceOp::SUM, {"whole_logits"});
  Placement p;
  p.sharded = true;
  p.dim = dim;
  p.full_size = total.item<int64_t>();
  p.range = shard_range(p.full_size, group_->size(), group_->rank());
  return full_tensor(logits.contiguous(), p, group_);
}

}  // namespace fsdpp::models::detail
