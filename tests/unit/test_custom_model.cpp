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
  for (const std::string key : {"parallelism.tensor_parallel_degree=2", "parallelism.pipeline_parallel_degree=2",
                                "parallelism.expert_parallel_degree=2", "parallelism.enable_sequence_parallel=true",
                                "model.init_from=/some/dir", "distillation.teacher=/some/dir"}) {
    try {
      fsdpp::train::custom_config("training: {max_steps: 1}", {key});
      FAIL() << key << " not refused";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(key + " is not available for a custom model"), std::string::npos) << what;
      EXPECT_NE(what.find("training.fsdp full_shard, shard_grad_op"), std::string::npos) << what;
    }
  }
  // A config made otherwise: train() refuses it before it touches the world (none here).
  auto cfg = fsdpp::train::custom_config("training: {max_steps: 1}");
  cfg.parallelism.pipeline_parallel_degree = 2;
  try {
    fsdpp::train::train(cfg, nullptr, model, numbered(8));
    FAIL() << "pipeline_parallel_degree=2 not refused by train()";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.pipeline_parallel_degree=2 is not available"),
              std::string::npos) << e.what();
  }
}
