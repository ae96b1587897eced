#pragma once
// Private to src/models: the communication inside Qwen3-MoE's sparse blocks and of its
// load-balancing statistics, for every layout at once (docs/moe.md#layouts). Expert parallelism
// (qwen3_moe_ep.cpp), tensor parallelism (qwen3_moe_tp_plan.cpp) and plain data parallelism
// install it, each adding what it knows to the layout the others left.
//
// With tensor parallelism the experts are either split along their hidden size over tp
// (split_experts: every tp rank computes its slice of every expert over the same tokens, and the
// partial outputs are summed), or whole (on every tp rank, or placed over ep): then each tp rank
// routes its own chunk of the sequence (its sequence-parallel shard, or a chunk cut from the
// replicated activations and gathered back after), so that no token is computed twice. The
// router's weight gradient then covers this rank's tokens only and is summed over tp, and so are
// the load-balancing statistics (forward; their gradient is every rank's own).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/moe/all_to_all.h"

namespace fsdpp::models::detail {

struct MoeLayout {
  moe::GroupPtr ep;     // the ranks that split the experts; null: every expert here
  moe::GroupPtr batch;  // the data-parallel ranks whose batches make the global batch; null: one
  moe::GroupPtr tp;     // tensor parallelism; null: none
  bool sequence_parallel = false;
  bool split_experts = false;  // experts split along their hidden size over tp
  int64_t num_experts = 0;     // of the whole model

  bool tensor_parallel() const { return tp && tp->size() > 1; }
  // Each tp rank routes different tokens (its sequence chunk).
  bool routes_own_tokens() const {
    return tensor_parallel() && (sequence_parallel || !split_experts);
  }
};

class MoeHooks : public Qwen3MoeParallelHooks {
 public:
  // `load`: where the global top-k counts of the last statistics go (shared by a model's hooks).
  MoeHooks(MoeLayout layout, std::string name, std::shared_ptr<std::vector<int64_t>> load)
      : layout_(std::move(layout)), name_(std::move(name)), load_(std::move(load)) {}

  Qwen3MoeLayerOutput sparse_block(Qwen3MoeSparseMoeBlockImpl& block, const at::Tensor& x) override;
  at::Tensor global_statistics(const at::Tensor& local) override;

  const MoeLayout& layout() const { return layout_; }
  const std::shared_ptr<std::vector<int64_t>>& load() const { return load_; }

 private:
  // The experts' output for routed tokens x (N,D): dispatched over ep, or here.
  at::Tensor run_experts(Qwen3MoeSparseMoeBlockImpl& block, const at::Tensor& x,
                         const Qwen3MoeRouting& routing);

  MoeLayout layout_;
  std::string name_;
  std::shared_ptr<std::vector<int64_t>> load_;
};

// The layout the model's hooks hold (an empty one, with num_experts, when it has none).
MoeLayout moe_layout_of(Qwen3MoeImpl& model);
// Installs MoeHooks of `layout` on the model and every sparse block (replacing what was there),
// sharing the load vector the model's hooks had; returns it.
std::shared_ptr<std::vector<int64_t>> install_moe_hooks(Qwen3MoeImpl& model, const MoeLayout& layout);

}  // namespace fsdpp::models::detail
