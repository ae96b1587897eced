#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../support/thread_world.h"
#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/train/lr_schedule.h"

using namespace fsdpp;

namespace {
models::LlamaConfig tiny() {
  auto c = fsdpp::test::tiny_llama(/*n_layers=*/2, /*max_seq_len=*/16, /*seed=*/0);
  c.vocab_size = 50;
  c.n_kv_heads = 2;
  return c;
}

std::vector<std::string> names(torch::nn::Module& root) {
  std::vector<std::string> out;
  for (const auto& u : inspect_units(root)) out.push_back(u.name);
  return out;
}
}  // namespace

TEST(WrapPolicy, ClassNamesDropNamespaceAndImpl) {
  models::TransformerBlock block(tiny());
  EXPECT_EQ(module_class_name(*block), "TransformerBlock");
}

// As users write a class: with or without "Impl", with or without the namespace; the policies
// and activation checkpointing take every spelling, and a name that matches nothing lists the
// classes the model has.
TEST(WrapPolicy, ClassNamesAsUsersWriteThem) {
  models::TransformerBlock block(tiny());
  for (const char* name : {"TransformerBlock", "TransformerBlockImpl",
                           "fsdpp::models::TransformerBlockImpl", "models::TransformerBlock"}) {
    EXPECT_TRUE(module_class_is(*block, name)) << name;
  }
  EXPECT_FALSE(module_class_is(*block, "Transformer"));
  EXPECT_FALSE(module_class_is(*block, "TransformerBlockImplImpl"));
  models::Llama model(tiny());
  EXPECT_EQ(apply_activation_checkpointing(*model, {"TransformerBlockImpl"}, 2),
            (std::vector<std::string>{"layers.0"}));
  try {
    apply_activation_checkpointing(*model, {"Block"});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no module under 'Llama' has class Block"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Attention, Embedding, FeedForward, Linear, Llama, ModuleList, RMSNorm, "
                       "TransformerBlock"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(module_classes(*block).front(), "Attention");
}

TEST(WrapPolicy, TransformerLayersBecomeUnitsAndTrainingStillWorks) {
  test::run_ranks(2, [](dist::World& w) {
    models::Llama model(tiny());
    FullyShardOptions o;
    o.mesh = w.mesh();
    auto made = apply_fully_shard(*model, transformer_layer_policy({"TransformerBlock"}), o);
    EXPECT_EQ(made, (std::vector<std::string>{"layers.0", "layers.1", ""}));
    auto x = torch::randint(0, 50, {2, 8});
    auto out = fsdpp::forward(model, x, x);
    out.loss.backward();
    EXPECT_EQ(names(*model), (std::vector<std::string>{"(root)", "layers.0", "layers.1"}));
  });
}

TEST(WrapPolicy, SizeBasedPicksLargeEnoughCandidates) {
  test::run_ranks(1, [](dist::World& w) {
    models::Llama model(tiny());
    FullyShardOptions o;
    o.mesh = w.mesh();
    // Attention holds 4*32*32 - 2*32*16 = 3072 parameters, FeedForward 3*32*96 = 9216; a
    // block has both plus two norms, so with the threshold at 5000 only the feed-forwards go.
    auto made = apply_fully_shard(
        *model, size_based_policy(5000, {"TransformerBlock", "Attention", "FeedForward"}), o);
    EXPECT_EQ(made, (std::vector<std::string>{"layers.0.feed_forward", "layers.1.feed_forward", ""}));
    auto x = torch::randint(0, 50, {2, 8});
    fsdpp::forward(model, x, x).loss.backward();
  });
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  train::LrSchedule s{"cosine", 1.0, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  train::LrSchedule lin{"linear", 2.0, 0, 100, 0.0};
  EXPECT_NEAR(lin.at(50), 1.0, 1e-12);
  train::LrSchedule c{"constant", 3.0, 0, 100, 0.0};
  EXPECT_DOUBLE_EQ(c.at(77), 3.0);
}
