// Trainer's hooks (fsdpp/train/hooks.h) on a tiny 1-rank run: each runs at its point of every
// step, in order, with the step's context, and a loss the after_loss hook replaces is the loss the
// run logs; before_checkpoint_write runs before each checkpoint data file, and a write it fails
// stops the run. The fault tests (tests/faults/, tests/train/) use the same hooks through
// fsdpp-train-faults.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <string>
#include <vector>

#include "fsdpp/dist/world.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/trainer.h"

namespace fs = std::filesystem;

namespace {

fs::path source_dir() {
#ifdef FSDPP_SOURCE_DIR
  return fs::path(FSDPP_SOURCE_DIR);
#else
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
#endif
}

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
void remove_tree(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

std::shared_ptr<fsdpp::dist::World> one_rank_world() {
  fsdpp::dist::DistEnv env;
  env.rank = 0;
  env.world_size = 1;
  env.local_rank = 0;
  env.local_world_size = 1;
  env.launched = true;
  fsdpp::dist::InitOptions o;
  o.backend = fsdpp::dist::BackendKind::GLOO;
  o.num_threads = 1;
  return fsdpp::dist::init_world(env, c10::make_intrusive<c10d::HashStore>(), o);
}

// save_steps > 0: a checkpoint every save_steps steps and at the end; 0: none.
fsdpp::train::TrainConfig tiny_config(const fs::path& out, int64_t save_steps = 0) {
  return fsdpp::train::TrainConfig::from_yaml_string(
      "model: {dim: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 32}\n", {
          "data.path=" + (source_dir() / "configs").string(),
          "data.seq_len=32",
          "data.val_fraction=0",
          "data.cache_dir=" + (out / "cache").string(),
          "training.output_dir=" + out.string(),
          "training.max_steps=3",
          "training.gradient_accumulation_steps=2",
          "training.per_device_train_batch_size=2",
          "training.logging_steps=1",
          save_steps > 0 ? "training.save_steps=" + std::to_string(save_steps)
                         : std::string("training.save_strategy=no"),
          "training.sample_tokens=0",
          "training.report_to=none",
          // glibc's malloc left alone: under ASan (make test-asan) mallopt is refused.
          "training.malloc_mmap_threshold=0",
      });
}

class TrainerHooks : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("fsdpp_test_trainer_hooks_" + std::to_string(::getpid()) + "_" + info->name());
    remove_tree(dir_);
  }
  void TearDown() override { remove_tree(dir_); }
  fs::path dir_;
};

TEST_F(TrainerHooks, RunAtTheirPointsOfEveryStep) {
  std::vector<std::string> calls;
  fsdpp::train::TrainerHooks hooks;
  hooks.after_loss = [&](const fsdpp::train::StepContext& c, torch::Tensor& loss) {
    EXPECT_EQ(c.rank, 0);
    EXPECT_EQ(c.restart_count, 0);
    EXPECT_TRUE(loss.requires_grad());
    calls.push_back("loss " + std::to_string(c.step));
  };
  hooks.after_backward = [&](const fsdpp::train::StepContext& c) {
    // The gradients of the step are there, in the model the context names.
    int64_t with_grad = 0;
    for (const auto& p : c.model.parameters()) with_grad += p.grad().defined() ? 1 : 0;
    EXPECT_GT(with_grad, 0);
    calls.push_back("backward " + std::to_string(c.step));
  };
  fsdpp::train::Trainer trainer(tiny_config(dir_), one_rank_world(), hooks);
  const auto result = trainer.run();
  EXPECT_EQ(result.steps, 3);
  const std::vector<std::string> expected = {"loss 1", "loss 1", "backward 1", "loss 2", "loss 2",
                                             "backward 2", "loss 3", "loss 3", "backward 3"};
  EXPECT_EQ(calls, expected);
}

TEST_F(TrainerHooks, AReplacedLossIsTheLoggedLoss) {
  fsdpp::train::TrainerHooks hooks;
  hooks.after_loss = [](const fsdpp::train::StepContext&, torch::Tensor& loss) {
    loss = loss * 0 + 7.0;  // still a function of the parameters: backward runs as before
  };
  fsdpp::train::Trainer trainer(tiny_config(dir_), one_rank_world(), hooks);
  const auto result = trainer.run();
  EXPECT_EQ(result.steps, 3);
  EXPECT_DOUBLE_EQ(result.final_loss, 7.0);
}

TEST_F(TrainerHooks, BeforeCheckpointWriteRunsBeforeEachDataFile) {
  // checkpoint-2 (save_steps) and checkpoint-3 (the final save); SHARDED on one rank: one data
  // file each, announced in the checkpoint's temporary directory before it exists.
  std::vector<std::string> calls;
  fsdpp::train::TrainerHooks hooks;
  hooks.before_checkpoint_write = [&](int rank, const std::string& file) {
    EXPECT_EQ(rank, 0);
    EXPECT_FALSE(fs::exists(file)) << file;
    EXPECT_EQ(fs::path(file).extension(), ".safetensors") << file;
    calls.push_back(fs::path(file).parent_path().filename().string().substr(0, 16));
  };
  fsdpp::train::Trainer trainer(tiny_config(dir_, 2), one_rank_world(), hooks);
  EXPECT_EQ(trainer.run().steps, 3);
  const std::vector<std::string> expected = {"checkpoint-2.tmp", "checkpoint-3.tmp"};
  EXPECT_EQ(calls, expected);
  EXPECT_TRUE(fs::exists(dir_ / "checkpoint-3" / "index.json"));
}

TEST_F(TrainerHooks, ACheckpointWriteTheHookFailsStopsTheRunAndLeavesNoCheckpoint) {
  fsdpp::train::TrainerHooks hooks;
  hooks.before_checkpoint_write = [](int, const std::string& file) {
    throw std::runtime_error("[test] refused '" + file + "'");
  };
  fsdpp::train::Trainer trainer(tiny_config(dir_, 2), one_rank_world(), hooks);
  try {
    trainer.run();
    ADD_FAILURE() << "a run whose checkpoint write failed succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[test] refused '"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint-2"));
}

}  // namespace
