// fsdpp-train's trainer_state.json: the generator states it keeps make the draws after a resume
// the draws the uninterrupted run would have made; the schedule and data position round-trip;
// files of the previous version (no generator states, no schedule) still read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
  ts.world_size = 1;
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
  ts.world_size = 1;
  ts.rng = {bad};
  std::string text = trainer_state_to_json(ts);
  text.replace(text.find("\"eA==\""), 6, "\"e*==\"");
  EXPECT_THROW(trainer_state_from_json(text, "t.json"), fsdpp::ConfigError);
}

namespace {
std::string error_of(const std::string& text) {
  try {
    trainer_state_from_json(text, "ck/trainer_state.json");
  } catch (const fsdpp::ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}
}  // namespace

// A value no save writes used to be taken as it was: step -5 ran steps -4.. and saved
// checkpoint-0.
TEST(TrainerState, RefusesValuesNoSaveWrites) {
  const std::string base = R"("epoch": 0, "windows_consumed": 8, "world_size": 2)";
  auto with = [&](const std::string& fields) { return "{" + fields + "}"; };
  EXPECT_EQ(error_of(with(R"("step": 3, )" + base)), "(accepted)");
  struct Case {
    std::string json, expected;
  };
  const std::vector<Case> cases = {
      {with(R"("step": -5, )" + base), "step is -5; expected a step >= 0"},
      {with(R"("step": 3, "epoch": -1, "windows_consumed": 8, "world_size": 2)"), "epoch is -1"},
      {with(R"("step": 3, "epoch": 0, "windows_consumed": -8, "world_size": 2)"), "windows_consumed is -8"},
      {with(R"("step": 3, "epoch": 0, "windows_consumed": 8, "world_size": 0)"), "world_size is 0"},
      {with(R"("step": 3, "state_dict_type": "HALF", )" + base), "state_dict_type is 'HALF'"},
      {with(R"("step": 3, "version": 99, )" + base), "version is 99; expected a version this build reads"},
      {with(R"("step": 3, "format": "other", )" + base), "format is other"},
      {with(R"("step": 3, "seq_len": 0, )" + base), "seq_len is 0"},
      {with(R"("step": 3, "grad_scaler": {"scale": -1, "growth_tracker": 0}, )" + base),
       "grad_scaler.scale is -1"},
      {with(R"("step": 3, "lr_schedule": {"type": "cosine", "base_lr": 0.001, "warmup_steps": -2,
            "total_steps": 10, "min_lr_ratio": 0, "lr": 0.001}, )" + base),
       "lr_schedule.warmup_steps is -2"},
      {with(R"("step": 3, "lr_schedule": {"type": "step", "base_lr": 0.001, "warmup_steps": 0,
            "total_steps": 10, "min_lr_ratio": 0, "lr": 0.001}, )" + base),
       "lr_schedule.type is 'step'"},
      {with(R"("step": 3, "lr_schedule": {"type": "cosine", "base_lr": 0.001, "warmup_steps": 0,
            "total_steps": 10, "min_lr_ratio": 2, "lr": 0.001}, )" + base),
       "lr_schedule.min_lr_ratio is 2"},
      {"[1, 2]", "expected a JSON object"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of(c.json);
    EXPECT_NE(msg.find("[train] 'ck/trainer_state.json' is not a valid trainer state: "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.json << " -> " << msg;
  }
}

// Version 3 records what the data position refers to, version 4 the distillation teacher and
// the digest of metrics.jsonl; files without them still read.
TEST(TrainerState, SeedDataPathAndSeqLenRoundTrip) {
  TrainerState ts;
  ts.step = 4;
  ts.world_size = 2;
  ts.seed = 1234567890123ULL;
  ts.data_path = "/data/corpus.txt";
  ts.seq_len = 64;
  ts.teacher = "/runs/teacher/checkpoint-400";
  ts.metrics_digest = "0123456789abcdef";
  const auto back = trainer_state_from_json(trainer_state_to_json(ts), "<test>");
  EXPECT_EQ(back.seed, ts.seed);
  EXPECT_EQ(back.data_path, ts.data_path);
  EXPECT_EQ(back.seq_len, ts.seq_len);
  EXPECT_EQ(back.teacher, ts.teacher);
  EXPECT_EQ(back.metrics_digest, ts.metrics_digest);
  EXPECT_NE(trainer_state_to_json(ts).find("\"version\": 4"), std::string::npos);
  const auto old = trainer_state_from_json(
      R"({"format": "fsdpp.trainer_state", "version": 2, "step": 10, "epoch": 0,
          "windows_consumed": 80, "world_size": 2})", "v2.json");
  EXPECT_FALSE(old.seed.has_value());
  EXPECT_FALSE(old.data_path.has_value());
  EXPECT_FALSE(old.seq_len.has_value());
  EXPECT_FALSE(old.teacher.has_value());
  EXPECT_FALSE(old.metrics_digest.has_value());
}

namespace {
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("fsdpp-ts-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove(path / "trainer_state.json", ec);
    std::filesystem::remove(path, ec);
  }
};
}  // namespace

// A generator state of the wrong size used to surface as LibTorch's stack trace from
// set_state, naming neither the file nor the rank.
TEST(TrainerState, BadGeneratorStateNamesFileAndRank) {
  TempDir dir;
  torch::manual_seed(1);
  TrainerState ts;
  ts.step = 2;
  ts.world_size = 2;
  ts.rng = {capture_rng(), RngState{std::string(12, 'x'), {}}};
  std::ofstream(dir.path / "trainer_state.json") << trainer_state_to_json(ts);
  try {
    read_trainer_state(dir.path);
    FAIL() << "accepted a generator state of 12 bytes";
  } catch (const fsdpp::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[train] '" + (dir.path / "trainer_state.json").string() + "': rng.cpu[1] (rank 1's "
                        "CPU generator, 12 bytes) is not a generator state", 0), 0u) << msg;
    EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;  // no stack trace
  }
  ts.rng.pop_back();
  std::ofstream(dir.path / "trainer_state.json") << trainer_state_to_json(ts);
  EXPECT_EQ(read_trainer_state(dir.path).rng.size(), 1u);
}

TEST(TrainerState, FifoIsRefusedWithoutOpeningIt) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir.path / "trainer_state.json").c_str(), 0600), 0);
  try {  // opening it would block until a writer came
    read_trainer_state(dir.path);
    FAIL() << "accepted a FIFO";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json' is not a regular file"), std::string::npos)
        << e.what();
  }
}
