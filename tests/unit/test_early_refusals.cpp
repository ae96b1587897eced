// What issue 43's round found refused late, silently or not at all, each refused now by name
// before anything runs (docs/faults.md#fourth-pass): the config's layout and distillation checks,
// and a run's own files changed under it by another job.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../../src/train/output_dir.h"
#include "fsdpp/common/error.h"
#include "fsdpp/common/escaped_bytes.h"
#include "fsdpp/observe/metrics_log.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/custom_model.h"
#include "fsdpp/train/parallel_dims.h"

namespace fs = std::filesystem;
using fsdpp::train::TrainConfig;

namespace {

TrainConfig parse(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"training.max_steps=10"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return TrainConfig::from_yaml_string("data: {path: corpus.txt}\n", all, "test.yaml");
}

// The message of the exception of type E that f throws ("" and a failure when none).
template <typename E = fsdpp::ConfigError>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' is not in: " << msg;
}

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
void remove_tree(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

class EarlyRefusalsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("fsdpp_test_early_" + std::to_string(::getpid()) + "_" + info->name());
    remove_tree(dir_);
  }
  void TearDown() override { remove_tree(dir_); }
  fs::path dir_;
};

}  // namespace

// PP 2 x TP 2 x EP 4 on 4 ranks, HSDP 2x2 x EP 4: the experts' ranks come from dp_shard x tp,
// which 4 does not divide (before: the memory check's `ParallelDims.ep` after the data was
// tokenized and config.yaml written).
TEST(EarlyRefusals, ExpertDegreeMustDivideDpShardTimesTp) {
  using fsdpp::train::parallel_dims;
  const std::vector<std::string> moe = {"model.architecture=qwen3_moe", "model.num_experts=4",
                                        "model.num_experts_per_tok=2"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), moe.begin(), moe.end());
    return parse(more);
  };
  auto msg = error_of([&] {
    parallel_dims(with({"parallelism.pipeline_parallel_degree=2", "parallelism.tensor_parallel_degree=2",
                        "parallelism.expert_parallel_degree=4"}),
                  4);
  });
  expect_has(msg, "[config] parallelism.expert_parallel_degree=4 does not divide dp_shard x tp = 1 x 2 = 2");
  expect_has(msg, "(pp 2 x dp_replicate 1 x dp_shard 1 x tp 2 on 4 ranks); use an expert_parallel_degree "
                  "that divides 2");
  msg = error_of([&] {
    parallel_dims(with({"training.fsdp=hybrid_shard", "parallelism.data_parallel_replicate_degree=2",
                        "parallelism.expert_parallel_degree=4"}),
                  4);
  });
  expect_has(msg, "expert_parallel_degree=4 does not divide dp_shard x tp = 2 x 1 = 2");
  // What divides still resolves: EP 2 inside the same layouts, EP 4 over 4 shards.
  EXPECT_EQ(parallel_dims(with({"parallelism.pipeline_parallel_degree=2", "parallelism.tensor_parallel_degree=2",
                                "parallelism.expert_parallel_degree=2"}),
                          4)
                .ep,
            2);
  EXPECT_EQ(parallel_dims(with({"parallelism.expert_parallel_degree=4"}), 4).efsdp(), 1);
}

// model.init_from decides the architecture and the shape: the degrees are checked against them
// once the trainer has read the directory (before: `needs experts ... (got llama)` from the
// YAML's architecture, before init_from was read).
TEST(EarlyRefusals, InitFromDecidesTheArchitecture) {
  const auto cfg = parse({"model.init_from=/a/qwen3-moe", "parallelism.expert_parallel_degree=2"});
  const auto msg = error_of([&] { cfg.validate_layout(); });
  expect_has(msg, "parallelism.expert_parallel_degree=2 needs experts: model.architecture=qwen3_moe (got llama)");
  auto moe = cfg;
  moe.model.architecture = fsdpp::train::ModelArchitecture::QWEN3_MOE;  // what the directory says
  moe.model.num_experts = 4;
  moe.model.num_experts_per_tok = 2;
  EXPECT_NO_THROW(moe.validate_layout());
  // Without init_from the YAML's own model is checked when the config is read, as before.
  expect_has(error_of([&] { parse({"parallelism.expert_parallel_degree=2"}); }), "needs experts");
}

// On-policy distillation whose samples train nothing (kd_ratio=0), and lmbda=1 with a one-token
// prompt, whose cross-entropy has no position (before: loss 0 and grad norm 0 at every step).
TEST(EarlyRefusals, OnPolicyThatTrainsNothing) {
  const std::vector<std::string> d = {"distillation.teacher=/a/teacher", "data.seq_len=64"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), d.begin(), d.end());
    return parse(more);
  };
  auto msg = error_of([&] {
    with({"distillation.lmbda=1", "distillation.max_new_tokens=64", "distillation.kd_ratio=0"});
  });
  expect_has(msg, "[config] distillation.lmbda=1 with distillation.kd_ratio=0");
  expect_has(msg, "with lmbda=1 and max_new_tokens=64 = data.seq_len the prompt is one token, so no position "
                  "of any batch trains");
  msg = error_of([&] { with({"distillation.lmbda=0.5", "distillation.kd_ratio=0"}); });
  expect_has(msg, "distillation.lmbda=0.5 with distillation.kd_ratio=0");
  expect_has(msg, "they would train nothing");
  msg = error_of([&] {
    with({"distillation.lmbda=1", "distillation.max_new_tokens=64", "distillation.kd_ratio=0.5"});
  });
  expect_has(msg, "the cross-entropy (weight 1 - kd_ratio = 0.5) averages over none");
  expect_has(msg, "max_new_tokens < data.seq_len (such as 32)");
  // What trains: a prompt of more than one token, kd_ratio=1, a layer loss, seq_kd's CE.
  EXPECT_NO_THROW(with({"distillation.lmbda=1", "distillation.max_new_tokens=63", "distillation.kd_ratio=0.5"}));
  EXPECT_NO_THROW(with({"distillation.lmbda=1", "distillation.max_new_tokens=64", "distillation.kd_ratio=1"}));
  EXPECT_NO_THROW(with({"distillation.lmbda=0.5", "distillation.kd_ratio=0", "distillation.layer_map=[0:0]"}));
  EXPECT_NO_THROW(with({"distillation.seq_kd=true", "distillation.kd_ratio=0"}));
}

TEST(EarlyRefusals, LayerMapNamesTheStudentLayerThatAppearsTwice) {
  expect_has(error_of([&] { parse({"distillation.layer_map=[0:0, 0:1]"}); }),
             "[config] distillation.layer_map: student layer 0 appears twice ('0:0' and '0:1'); each student "
             "layer maps to one teacher layer");
}

// train()'s programs: the model: and data: keys set, to say they are ignored.
TEST(EarlyRefusals, KeysSetInASection) {
  // custom_config reads the model: and data: sections without checking them (train() does not
  // use them): what a program's command line may set there.
  const auto cfg = fsdpp::train::custom_config("training: {max_steps: 2}\n",
                                               {"model.dim=99999999", "data.path=/nonexistent"});
  EXPECT_EQ(cfg.keys_set_in("model"), (std::vector<std::string>{"model.dim=99999999"}));
  EXPECT_EQ(cfg.keys_set_in("data"), (std::vector<std::string>{"data.path=/nonexistent"}));
  EXPECT_TRUE(fsdpp::train::custom_config("training: {max_steps: 2}\n").keys_set_in("model").empty());
}

TEST(EarlyRefusals, EscapedBytes) {
  EXPECT_EQ(fsdpp::escaped_bytes("last read: '\"\xff'"), "last read: '\"\\xff'");
  EXPECT_EQ(fsdpp::escaped_bytes("a\nb\x01"), "a\\x0ab\\x01");
  EXPECT_EQ(fsdpp::escaped_bytes("plain text"), "plain text");
}

// A live job's output_dir is not shared: a second lock is refused whatever overwrite says
// (before: overwrite_output_dir=true warned and wrote into it).
TEST_F(EarlyRefusalsFiles, LiveOutputDirIsNeverShared) {
  fsdpp::train::detail::OutputDirLock first(dir_, false);
  for (bool overwrite : {false, true}) {
    const auto msg = error_of([&] { fsdpp::train::detail::OutputDirLock second(dir_, overwrite); });
    expect_has(msg, "is in use by another job (pid " + std::to_string(::getpid()));
    if (overwrite) expect_has(msg, "training.overwrite_output_dir=true replaces a finished run, never a live one");
  }
  EXPECT_NO_THROW(first.verify());
}

// The holder notices another job in its directory: config.yaml replaced, the lock file removed.
TEST_F(EarlyRefusalsFiles, HolderNoticesItsFilesChanged) {
  {
    fsdpp::train::detail::OutputDirLock lock(dir_, false);
    std::ofstream(dir_ / "config.yaml") << "model: {dim: 64}\n";
    lock.watch(dir_ / "config.yaml");
    EXPECT_NO_THROW(lock.verify());
    std::ofstream(dir_ / "other.yaml") << "model: {dim: 32}\n";
    fs::rename(dir_ / "other.yaml", dir_ / "config.yaml");
    expect_has(error_of<fsdpp::Error>([&] { lock.verify(); }), "config.yaml' was removed, replaced or changed");
  }
  fsdpp::train::detail::OutputDirLock lock(dir_, false);
  fs::remove(dir_ / ".fsdpp.lock");
  expect_has(error_of<fsdpp::Error>([&] { lock.verify(); }), ".fsdpp.lock' was removed or replaced while this run held it");
}

// metrics.jsonl cut in place or written by someone else (before: only a replaced file was seen;
// a second job's O_TRUNC open cut the live job's lines 1-130 unnoticed).
TEST_F(EarlyRefusalsFiles, MetricsLogNoticesTruncationAndForeignLines) {
  fs::create_directories(dir_);
  const auto path = dir_ / "metrics.jsonl";
  {
    fsdpp::observe::MetricsLog log(path, false);
    log.append(R"({"step":1})");
    log.append(R"({"step":2})");
    fs::resize_file(path, 0);  // what another job's truncating open does
    expect_has(error_of<fsdpp::Error>([&] { log.append(R"({"step":3})"); }),
               "was changed by someone else while the run wrote it: it holds 0 bytes where this run wrote 22");
  }
  fsdpp::observe::MetricsLog log(path, true);
  log.append(R"({"step":1})");
  std::ofstream(path, std::ios::app) << R"({"step":1,"other":true})" << "\n";
  expect_has(error_of<fsdpp::Error>([&] { log.append(R"({"step":2})"); }), "was changed by someone else");
}
