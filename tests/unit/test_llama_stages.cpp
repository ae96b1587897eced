// The Llama cut into pipeline stages (fsdpp/models/llama_stages.h): the stages hold the whole
// model's parameter tensors under its names, and run in a chain give its logits and loss.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "../support/error_of.h"
#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/models/llama_stages.h"

using namespace fsdpp;
using namespace fsdpp::models;
using fsdpp::test::error_of;

namespace {

LlamaConfig config(int64_t n_layers) {
  return fsdpp::test::tiny_llama(n_layers, /*max_seq_len=*/16, /*seed=*/3);
}

}  // namespace

TEST(LlamaStages, UnitCounts) {
  EXPECT_EQ(llama_pipeline_units(config(3)), 5);
  EXPECT_EQ(even_units_per_stage(5, 2), (std::vector<int>{3, 2}));
  EXPECT_EQ(even_units_per_stage(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(units_per_stage(5, 2), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(units_per_stage(4, 4), (std::vector<int>{4}));
  EXPECT_NE(error_of([] { even_units_per_stage(3, 4); })
                .find("3 units (the embedding, the blocks and the head) cannot fill 4 pipeline "
                      "stages"),
            std::string::npos);
}

// Every parameter of the whole model is in exactly one stage, as the same tensor under the same
// name.
TEST(LlamaStages, StagesShareTheModelsParameters) {
  Llama model(config(3));
  auto stages = split_llama(model, {2, 2, 1});
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_TRUE(stages[0]->has_embedding());
  EXPECT_FALSE(stages[1]->has_embedding() || stages[1]->has_head());
  EXPECT_TRUE(stages[2]->has_head());
  std::set<std::string> seen;
  const auto whole = model->named_parameters();
  for (const auto& st : stages) {
    for (const auto& p : st->named_parameters()) {
      ASSERT_TRUE(whole.contains(p.key())) << p.key();
      EXPECT_TRUE(p.value().is_same(whole[p.key()])) << p.key();
      EXPECT_TRUE(seen.insert(p.key()).second) << p.key() << " in two stages";
    }
  }
  EXPECT_EQ(seen.size(), whole.size());
  EXPECT_TRUE(stages[1]->named_parameters().contains("layers.1.attention.wq.weight"));
  EXPECT_TRUE(stages[1]->named_parameters().contains("layers.2.feed_forward.w2.weight"));
}

// Stage by stage, the logits and the loss are the whole model's (the same operations in the
// same order: equal to the bit).
TEST(LlamaStages, ChainedStagesAreTheWholeModel) {
  Llama model(config(4));
  auto g = at::make_generator<at::CPUGeneratorImpl>(11);
  auto tokens = torch::randint(0, 64, {3, 16}, g);
  auto targets = torch::randint(0, 64, {3, 16}, g);
  auto whole = model->forward(tokens, targets);
  for (const auto& counts : {std::vector<int>{1, 5}, {3, 3}, {1, 1, 1, 1, 1, 1}, {6}}) {
    auto stages = split_llama(model, counts);
    at::Tensor h = tokens;
    for (auto& st : stages) h = st->forward(h);
    EXPECT_TRUE(torch::equal(h, whole.logits)) << counts.size() << " stages";
    EXPECT_TRUE(torch::equal(stages.back()->loss(h, targets), whole.loss));
  }
}

TEST(LlamaStages, RefusedSplits) {
  Llama model(config(2));
  EXPECT_NE(error_of([&] { split_llama(model, {2, 1}); })
                .find("pipeline stage sizes add up to 3 units; the Llama has 4"),
            std::string::npos);
  auto tied = config(2);
  tied.tie_embeddings = true;
  Llama tied_model(tied);
  EXPECT_NE(error_of([&] { split_llama(tied_model, {2, 2}); }).find("tie_embeddings"),
            std::string::npos);
}
