// fsdpp-ckpt compress's pieces (the whole command against transformers is compress.py): the
// layers spread evenly, the experts chosen by load with ties, and router_load against the
// choices the sparse blocks themselves hand to their experts during the same forwards.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/models/compress.h"
#include "fsdpp/models/qwen3_moe.h"

using fsdpp::ConfigError;
using namespace fsdpp::models;

namespace {

// Records the expert ids each sparse block routes its tokens to, then runs the experts as the
// model would without hooks.
class RecordingHooks final : public Qwen3MoeParallelHooks {
 public:
  explicit RecordingHooks(int64_t num_experts) : counts(at::zeros({num_experts}, at::kLong)) {}
  Qwen3MoeLayerOutput sparse_block(Qwen3MoeSparseMoeBlockImpl& block, const at::Tensor& x) override {
    const auto flat = x.reshape({-1, x.size(-1)});
    auto routing = block.route(flat, block.gate->weight);
    counts += at::bincount(routing.expert_ids.reshape({-1}), {}, counts.size(0));
    auto y = block.experts->forward(flat, routing.expert_ids, routing.weights);
    return {y.view(x.sizes()), routing.logits};
  }
  at::Tensor global_statistics(const at::Tensor& local) override { return local; }
  at::Tensor counts;
};

}  // namespace

TEST(Compress, EvenlySpacedLayers) {
  EXPECT_EQ(evenly_spaced_layers(4, 3), (std::vector<int64_t>{0, 2, 3}));  // 1.5 rounds up
  EXPECT_EQ(evenly_spaced_layers(4, 2), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(evenly_spaced_layers(8, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(evenly_spaced_layers(5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(evenly_spaced_layers(12, 4), (std::vector<int64_t>{0, 4, 7, 11}));
  EXPECT_THROW(evenly_spaced_layers(4, 5), ConfigError);
  EXPECT_THROW(evenly_spaced_layers(4, 0), ConfigError);
}

TEST(Compress, MostLoadedExpertsBreakTiesToTheLowerId) {
  const auto counts = torch::tensor({3, 5, 5, 1, 5, 0}, torch::kLong);
  EXPECT_EQ(most_loaded_experts(counts, 2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(most_loaded_experts(counts, 4), (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(most_loaded_experts(counts, 6), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(most_loaded_experts(torch::zeros({4}, torch::kLong), 2), (std::vector<int64_t>{0, 1}));
}

TEST(Compress, RouterLoadEqualsTheBlocksOwnRouting) {
  torch::manual_seed(0);
  auto cfg = fsdpp::test::narrow_moe();
  cfg.num_experts = 6;
  cfg.num_experts_per_tok = 3;
  cfg.initializer_range = 0.3;
  Qwen3Moe model(cfg);
  const std::vector<at::Tensor> rows = {torch::randint(40, {7}, torch::kLong),
                                        torch::randint(40, {7}, torch::kLong),
                                        torch::randint(40, {3}, torch::kLong)};
  const auto load = router_load(model, rows);
  ASSERT_EQ(load.size(), 2u);  // layers 0 and 2
  std::vector<std::shared_ptr<RecordingHooks>> hooks;
  for (int64_t l : {0, 2}) {
    hooks.push_back(std::make_shared<RecordingHooks>(cfg.num_experts));
    model->layers->ptr<Qwen3MoeDecoderLayerImpl>(l)->moe->parallel = hooks.back();
  }
  torch::NoGradGuard no_grad;
  for (const auto& row : rows) model->forward(row.view({1, -1}));
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(torch::equal(load[k], hooks[k]->counts)) << load[k] << hooks[k]->counts;
    EXPECT_EQ(load[k].sum().item<int64_t>(), 17 * 3);
  }
}
