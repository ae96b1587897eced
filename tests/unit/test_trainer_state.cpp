// fsdpp-train's trainer_state.json: the generator states it keeps make the draws after a resume
// the draws the uninterrupted run would have made; the schedule and data position round-trip;
// files of the previous version (no generator states, no schedule) still read.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../../src/train/checkpointer.h"
#include "fsdpp/common/error.h"

using namespace fsdpp::train;
using namespace fsdpp::train::detail;

TEST(TrainerState, GeneratorDrawsAfterRestoreEqualTheUninterruptedOnes) {
  torch::manual_seed(123);
  torch::rand({7});
  torch::randn({3});  // leaves a cached normal sample in the generator's state
  TrainerState ts;
  ts.step = 5;
  ts.rng = {capture_rng()};
  const std::string text = trainer_state_to_json(ts);
  const auto expected_u = torch::rand({1000});  // what the run that never stopped draws next
  const auto expected_n = torch::randn({5, 5});
  const auto expected_i = torch::randint(0, 1 << 30, {64});

  torch::manual_seed(999);  // a fresh process seeded as at start-up
  torch::rand({3});
  const auto back = trainer_state_from_json(text, "<test>");
  ASSERT_EQ(back.rng.size(), 1u);
  restore_rng(back.rng[0]);
  EXPECT_TRUE(torch::equal(torch::rand({1000}), expected_u));
  EXPECT_TRUE(torch::equal(torch::randn({5, 5}), expected_n));
  EXPECT_TRUE(torch::equal(torch::randint(0, 1 << 30, {64}), expected_i));
}

TEST(TrainerState, RoundTripsEveryField) {
  TrainerState ts;
  ts.step = 40;
  ts.epoch = 2;
  ts.windows_consumed = 96;
  ts.world_size = 3;
  ts.state_dict_type = "SHARDED";
  ts.schedule = LrSchedule{"cosine", 3e-4, 10, 400, 0.1};
  ts.lr = ts.schedule->at(40);
  RngState a{std::string("\x00\x01\xff\x7f", 4), {std::string("\x10\x20", 2), std::string()}};
  RngState b{std::string(5056, '\x5a'), {}};
  ts.rng = {a, b};
  const auto back = trainer_state_from_json(trainer_state_to_json(ts), "<test>");
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.epoch, 2);
  EXPECT_EQ(back.windows_consumed, 96);
  EXPECT_EQ(back.world_size, 3);
  EXPECT_EQ(back.state_dict_type, "SHARDED");
  ASSERT_TRUE(back.schedule.has_value());
  EXPECT_EQ(back.schedule->type, "cosine");
  EXPECT_EQ(back.schedule->total_steps, 400);
  EXPECT_EQ(back.schedule->warmup_steps, 10);
  EXPECT_EQ(back.schedule->base_lr, 3e-4);
  EXPECT_EQ(back.schedule->min_lr_ratio, 0.1);
  EXPECT_EQ(back.lr, ts.schedule->at(40));
  ASSERT_EQ(back.rng.size(), 2u);
  EXPECT_EQ(back.rng[0].cpu, a.cpu);
  EXPECT_EQ(back.rng[0].cuda, a.cuda);
  EXPECT_EQ(back.rng[1].cpu, b.cpu);
  EXPECT_TRUE(back.rng[1].cuda.empty());
}

TEST(TrainerState, ReadsThePreviousVersion) {
  const auto s = trainer_state_from_json(
      R"({"format": "fsdpp.trainer_state", "version": 1, "step": 10, "epoch": 0,
          "windows_consumed": 80, "world_size": 2, "state_dict_type": "SHARDED"})",
      "old.json");
  EXPECT_EQ(s.step, 10);
  EXPECT_FALSE(s.schedule.has_value());
  EXPECT_TRUE(s.rng.empty());
}

TEST(TrainerState, ErrorsNameTheFile) {
  try {
    trainer_state_from_json(R"({"step": 1})", "ckpt/trainer_state.json");
    FAIL() << "accepted a trainer state without epoch";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'ckpt/trainer_state.json' is not a valid trainer state"),
              std::string::npos) << e.what();
  }
  RngState bad{"x", {}};
  TrainerState ts;
  ts.rng = {bad};
  std::string text = trainer_state_to_json(ts);
  text.replace(text.find("\"eA==\""), 6, "\"e*==\"");
  EXPECT_THROW(trainer_state_from_json(text, "t.json"), fsdpp::ConfigError);
}
