// The trainer for any model (fsdpp/train/custom_model.h, batch_source.h): tensor_data's sources
// split each global batch over the ranks and resume from their state; token_data's give the
// windows fsdpp-train's sampler gives; train() refuses what a
// custom model cannot have, naming the key, before it touches the world. The training itself,
// on real ranks, is tests/train/custom_model.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/train/custom_model.h"
#include "fsdpp/train/token_data.h"

using fsdpp::ConfigError;
using fsdpp::train::SourceOptions;

namespace {

// Row i of x is i: a batch's rows say which examples it holds.
fsdpp::train::TrainData numbered(int64_t n) {
  auto x = torch::arange(n, torch::kLong).to(torch::kFloat).unsqueeze(1);
  return fsdpp::train::tensor_data(x, x * 10);
}

std::set<int64_t> rows(const at::Tensor& t) {
  std::set<int64_t> out;
  for (int64_t i = 0; i < t.size(0); ++i) out.insert(t[i][0].item<int64_t>());
  return out;
}

}  // namespace

TEST(TensorData, TwoRanksTakeTheOneRankBatchBetweenThem) {
  auto data = numbered(64);
  auto one = data.train({.rank = 0, .world_size = 1, .seed = 3});
  auto r0 = data.train({.rank = 0, .world_size = 2, .seed = 3});
  auto r1 = data.train({.rank = 1, .world_size = 2, .seed = 3});
  EXPECT_EQ(one->per_rank(), 64);
  EXPECT_EQ(r0->per_rank(), 32);
  for (int step = 0; step < 10; ++step) {  // past the first epoch's end (8 batches)
    const auto whole = one->next(8);
    const auto a = r0->next(4), b = r1->next(4);
    EXPECT_TRUE(torch::equal(whole.targets, whole.inputs * 10));
    auto both = rows(a.inputs);
    for (auto i : rows(b.inputs)) EXPECT_TRUE(both.insert(i).second) << "example " << i << " on both ranks";
    EXPECT_EQ(both, rows(whole.inputs)) << "step " << step;
  }
}

TEST(TensorData, StateResumesAtTheNextExample) {
  auto data = numbered(20);
  auto a = data.train({.rank = 1, .world_size = 2, .seed = 5});
  for (int i = 0; i < 3; ++i) a->next(4);  // 12 of the rank's 10 per epoch: into epoch 1
  const auto saved = a->state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, 2);
  auto b = data.train({.rank = 1, .world_size = 2, .seed = 5});
  b->load_state(saved);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::equal(a->next(3).inputs, b->next(3).inputs));
}

TEST(TokenData, TheWindowsOfFsdppTrainsSamplerOnEachRank) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("fsdpp_test_token_data_{}", ::getpid());
  fsdpp::state::remove_tree(dir);
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 3000; ++i) text += static_cast<char>('!' + (i * 7919 + i / 13) % 90);
  std::ofstream(dir / "t.txt", std::ios::binary) << text;
  {
    fsdpp::data::ByteTokenizer tok;
    const auto ds = fsdpp::data::TokenDataset::open(dir / "t.txt", tok);
    auto [train, val] = ds.split(0.1);
    auto data = fsdpp::train::token_data(train, 16, val);
    ASSERT_TRUE(data.eval);
    for (int r = 0; r < 2; ++r) {
      auto mine = data.train({.rank = r, .world_size = 2, .seed = 9});
      fsdpp::data::DistributedSampler ref(train, {.seq_len = 16, .share = {.rank = r, .world_size = 2, .seed = 9}});
      EXPECT_EQ(mine->per_rank(), ref.windows_per_rank());
      for (int i = 0; i < 5; ++i) {
        const auto b = mine->next(4);
        const auto [x, y] = ref.next_batch(4);
        EXPECT_TRUE(torch::equal(b.inputs, x) && torch::equal(b.targets, y)) << "rank " << r << " batch " << i;
        EXPECT_EQ(b.starts.size(), 4u);
      }
      EXPECT_EQ(mine->state(), ref.state());
    }
    EXPECT_THROW(fsdpp::train::token_data(val, 1000), ConfigError);
  }
  fsdpp::state::remove_tree(dir);
}

TEST(TensorData, RefusesTensorsOfDifferentRowCounts) {
  try {
    fsdpp::train::tensor_data(torch::zeros({8, 2}), torch::zeros({7}));
    FAIL() << "not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the same number of rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[8, 2]"), std::string::npos) << e.what();
  }
}

// custom_config refuses each key before the config's own checks (which would speak of the Llama).
TEST(CustomModel, RefusesWhatOnlyFsdppTrainsModelsHave) {
  fsdpp::train::CustomModel model;
  model.make = [] { return std::make_shared<torch::nn::LinearImpl>(2, 1); };
  model.loss = [](torch::nn::Module&, const fsdpp::train::Batch& b) { return b.targets.sum(); };
  for (const std::string key : {"parallelism.expert_parallel_degree=2", "model.init_from=/some/dir",
                                "distillation.teacher=/some/dir"}) {
    try {
      fsdpp::train::custom_config("training: {max_steps: 1}", {key});
      FAIL() << key << " not refused";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(key + " is not available for a custom model"), std::string::npos) << what;
      EXPECT_NE(what.find("training.fsdp full_shard, shard_grad_op"), std::string::npos) << what;
    }
  }
  // Tensor and pipeline parallelism need a plan of the model's layers: train() refuses them for
  // a model without one before it touches the world (none here).
  for (const std::string key : {"parallelism.tensor_parallel_degree=2", "parallelism.pipeline_parallel_degree=2"}) {
    auto cfg = fsdpp::train::custom_config("training: {max_steps: 1}", {key});
    try {
      fsdpp::train::train(cfg, nullptr, model, numbered(8));
      FAIL() << key << " not refused by train()";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(key + " is not available for a custom model"), std::string::npos) << what;
      EXPECT_NE(what.find("give CustomModel::plan (parallel::sequential_plan"), std::string::npos) << what;
    }
  }
  // A plan's loss is the model's: a loss beside it would be ignored, and is refused.
  auto both = model;
  both.plan = [](std::shared_ptr<torch::nn::Module>) -> std::shared_ptr<fsdpp::models::ModelPlan> { return nullptr; };
  try {
    fsdpp::train::train(fsdpp::train::custom_config("training: {max_steps: 1}"), nullptr, both, numbered(8));
    FAIL() << "loss and plan together not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has both loss and plan"), std::string::npos) << e.what();
  }
}

// A custom model's config is checked as any run's, not against fsdpp-train's Llama (the model:
// section it does not train): degrees that do not divide the Llama's heads, or fsdpp-train's
// data.seq_len under sequence parallelism, are its plan's to judge. The same keys on
// fsdpp-train's config still name the Llama's shape.
TEST(CustomModel, ItsConfigIsNotCheckedAgainstFsdppTrainsLlama) {
  for (const std::vector<std::string> keys :
       {std::vector<std::string>{"parallelism.tensor_parallel_degree=3"},
        {"parallelism.tensor_parallel_degree=2", "parallelism.enable_sequence_parallel=true",
         "data.seq_len=127"},
        {"parallelism.pipeline_parallel_degree=2", "model.tie_embeddings=true"}}) {
    const std::string what = keys.front();
    fsdpp::train::TrainConfig cfg;
    EXPECT_NO_THROW(cfg = fsdpp::train::custom_config("training: {max_steps: 1}", keys)) << what;
    // train() reaches the world (none here) with it: nothing about the Llama on the way.
    auto model = fsdpp::train::sequential_model(
        [] { return torch::nn::Sequential(torch::nn::Linear(4, 6), torch::nn::ReLU(), torch::nn::Linear(6, 1)); },
        {.name = "chain", .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); }});
    try {
      fsdpp::train::train(cfg, nullptr, model, numbered(8));
      ADD_FAILURE() << what << ": train() without a world did not throw";
    } catch (const fsdpp::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("train() needs a world"), std::string::npos) << message;
      EXPECT_EQ(message.find("Llama"), std::string::npos) << message;
      EXPECT_EQ(message.find("n_heads"), std::string::npos) << message;
    }
  }
  try {
    fsdpp::train::TrainConfig::from_yaml_string("data: {path: x}\ntraining: {max_steps: 1}",
                                                {"parallelism.tensor_parallel_degree=3"});
    ADD_FAILURE() << "fsdpp-train's Llama with tensor_parallel_degree=3 not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_heads=4, model.n_kv_heads=0 with "
                                         "parallelism.tensor_parallel_degree=3: Llama"),
              std::string::npos) << e.what();
  }
}

// parallel::sequential_plan: the chain's loss on one process is the Sequential's own forward;
// tensor-parallel plans that could not equal it are refused before anything is split.
// A Sequential inside a Sequential (LibTorch stores only modules with a forward of fixed types).
struct StackImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  at::Tensor forward(at::Tensor x) { return SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(Stack);

torch::nn::Sequential chain() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 8),
                               Stack(torch::nn::Linear(8, 16), torch::nn::GELU(), torch::nn::Linear(16, 8)),
                               torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})),
                               torch::nn::Linear(8, 2));
}

fsdpp::parallel::SequentialPlanOptions mse(fsdpp::tp::ParallelPlan tp = {}) {
  return {.name = "chain",
          .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); },
          .tensor_parallel = std::move(tp)};
}

TEST(SequentialPlan, ItsLossIsTheSequentialsForwardAndItsUnitsAreItsChildren) {
  torch::manual_seed(0);
  auto net = chain();
  auto plan = fsdpp::parallel::sequential_plan(net, mse());
  auto x = torch::randn({5, 4}), t = torch::randn({5, 2});
  EXPECT_TRUE(torch::equal(plan->loss(x, t).loss, torch::mse_loss(net->forward(x), t)));
  EXPECT_EQ(plan->pipeline_units(), 6);
  EXPECT_EQ(plan->causal_lm(), nullptr);
  // A stage holds its units under the model's names: checkpoints of any cut are the whole's.
  auto stages = plan->split({2, 4});
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_FALSE(stages[0].loss);
  ASSERT_TRUE(stages[1].loss);
  std::vector<std::string> names;
  for (const auto& p : stages[1].module->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names.front(), "2.weight");
  EXPECT_EQ(names.back(), "5.bias");
  const auto y = stages[1].forward(stages[0].forward(x));
  EXPECT_TRUE(torch::equal(stages[1].loss(y, t, {}).loss, plan->loss(x, t).loss));
}

TEST(SequentialPlan, RefusesTensorParallelPlansThatCannotEqualOneProcess) {
  using fsdpp::tp::ParallelStyle;
  auto refused = [](fsdpp::tp::ParallelPlan tp, const std::string& expected) {
    try {
      fsdpp::parallel::sequential_plan(chain(), mse(std::move(tp)));
      ADD_FAILURE() << expected << ": not refused";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({{"1", ParallelStyle::COLWISE}}, "names '1' (COLWISE), which is not a Linear unit of the chain; "
                                            "its Linear units are [0, 2, 3.0, 3.2, 5]");
  refused({{"5", ParallelStyle::COLWISE}}, "COLWISE '5' is not followed by a ROWWISE unit");
  refused({{"2", ParallelStyle::ROWWISE}}, "ROWWISE '2' has no COLWISE unit before it");
  refused({{"0", ParallelStyle::COLWISE}, {"3.0", ParallelStyle::COLWISE}, {"3.2", ParallelStyle::ROWWISE}},
          "unit '2' (Linear) has parameters but takes the output of COLWISE '0'");
  refused({{"3.2", ParallelStyle::COLWISE}, {"5", ParallelStyle::ROWWISE}},
          "unit '4' (LayerNorm) has parameters but takes the output of COLWISE '3.2'");
  // Sound: within a nested unit, and across the chain's top level.
  EXPECT_NO_THROW(fsdpp::parallel::sequential_plan(
      chain(), mse({{"3.0", ParallelStyle::COLWISE}, {"3.2", ParallelStyle::ROWWISE}})));
  EXPECT_NO_THROW(fsdpp::parallel::sequential_plan(
      chain(), mse({{"0", ParallelStyle::COLWISE}, {"2", ParallelStyle::ROWWISE}})));
}
