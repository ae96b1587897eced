#pragma once
// Private to src/models: the communication of a decoder's tensor-parallel plan, one hooks object
// that the Llama's and Qwen3-MoE's plans (llama_tp_plan.cpp, qwen3_moe_tp_plan.cpp) install on
// their modules (docs/tensor-parallel.md has the collectives per layer).

#include <cstdint>

#include "fsdpp/models/llama.h"
#include "fsdpp/tp/regions.h"

namespace fsdpp::models::detail {

class TensorParallelHooks : public LlamaParallelHooks {
 public:
  // vocab_offset: the first vocabulary row this rank's embedding holds. per_head: the hooks of
  // a norm over each attention head (Qwen3's q_norm and k_norm), whose ranks hold different
  // heads: its weight's gradient is summed over the group with or without sequence parallelism.
  TensorParallelHooks(tp::GroupPtr group, bool sequence_parallel, int64_t vocab_offset,
                      bool per_head = false)
      : group_(std::move(group)), sp_(sequence_parallel), vocab_offset_(vocab_offset),
        per_head_(per_head) {}

  // Replicated (B,T,C): identity, all-reduce of the gradient; sequence shards: all-gather.
  at::Tensor enter(const at::Tensor& x, const char* where) override;
  // Partial sums: all-reduce; sequence parallel: reduce-scatter to sequence shards.
  at::Tensor exit(const at::Tensor& y, const char* where) override;
  at::Tensor embed(const at::Tensor& tokens, const at::Tensor& table) override;
  // On sequence shards (or per head) a norm's weight gradient covers this rank's part only:
  // summed over the group in backward. Otherwise every rank sees everything.
  at::Tensor norm_weight(const at::Tensor& weight) override;
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets, double divisor) override;
  at::Tensor whole_logits(const at::Tensor& logits) override;
  int64_t sequence_multiple() const override { return sp_ ? group_->size() : 1; }

  const tp::GroupPtr& group() const { return group_; }
  bool sequence_parallel() const { return sp_; }

 private:
  tp::GroupPtr group_;
  bool sp_;
  int64_t vocab_offset_;
  bool per_head_;
};

}  // namespace fsdpp::models::detail
