// AsyncSaver: a checkpoint written by the background writers while training goes on is the
// checkpoint a synchronous save of the same moment writes (same index, same checksums, loads to
// the same model); saves chain; a failed write surfaces at wait() on every rank, naming the
// checkpoint, and leaves no directory behind.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../support/fault_injection.h"
#include "../support/test_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/state/async_save.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;
using state::StateDictType;

namespace {

constexpr int64_t kGlobalBatch = 12;

struct Trained {
  test::TinyTransformer model{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
};

Trained make(uint64_t seed) {
  torch::manual_seed(seed);
  Trained t;
  t.model = test::TinyTransformer(29, 16, 2, 2);
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  t.model->shard(o);
  t.opt = std::make_unique<torch::optim::AdamW>(t.model->parameters(),
                                                torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  return t;
}

void train_step(Trained& t, int step) {
  auto& w = test::world();
  const int64_t local = kGlobalBatch / w.size();
  auto g = at::make_generator<at::CPUGeneratorImpl>(4000 + step);
  auto tokens = torch::randint(0, 29, {kGlobalBatch, 8}, g).narrow(0, w.rank() * local, local);
  auto logits = fsdpp::forward(t.model, tokens.narrow(1, 0, 7));
  torch::cross_entropy_loss(logits.reshape({-1, 29}), tokens.narrow(1, 1, 7).reshape({-1})).backward();
  t.opt->step();
  t.opt->zero_grad();
}

fs::path shared_dir(const std::string& name) {
  auto& w = test::world();
  auto v = torch::full({1}, static_cast<int64_t>(w.rank() == 0 ? getpid() : 0), torch::kLong);
  w.group()->broadcast(v, 0);
  return fs::temp_directory_path() / fmt::format("fsdpp_async_save_{}", v.item<int64_t>()) / name;
}

void cleanup(const fs::path& dir) {
  test::world().group()->barrier();
  if (test::world().rank() == 0) state::remove_tree(dir.parent_path());
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::unique_ptr<state::AsyncSaver> make_saver() {
  auto& w = test::world();
  return std::make_unique<state::AsyncSaver>(w.group(), w.store());
}

}  // namespace

TEST(AsyncSave, EqualsSyncSaveOfTheSameMomentWhileTrainingGoesOn) {
  auto& w = test::world();
  const fs::path dir = shared_dir("equal");
  for (auto type : {StateDictType::SHARDED, StateDictType::FULL, StateDictType::LOCAL}) {
    SCOPED_TRACE(state::to_string(type));
    Trained t = make(7);
    train_step(t, 0);
    train_step(t, 1);
    state::SaveOptions so;
    so.type = type;
    so.extra_files["note.txt"] = "saved at step 2\n";
    auto saver = make_saver();
    const std::string name = state::to_string(type);
    saver->save(dir / ("async-" + name), *t.model, t.opt.get(), so);
    EXPECT_TRUE(saver->in_flight());
    // A synchronous save of the same moment, with collectives, while the writers run.
    state::save_state_dict(dir / ("sync-" + name), *t.model, t.opt.get(), w.group(), so);
    auto before = full_parameters(*t.model);
    train_step(t, 2);  // training goes on and changes every shard in place
    saver->wait();
    EXPECT_FALSE(saver->in_flight());
    w.group()->barrier();
    // Same index (rows, checksums of every piece), same extra file.
    EXPECT_EQ(read_json(dir / ("async-" + name) / "index.json"),
              read_json(dir / ("sync-" + name) / "index.json"));
    std::ifstream note(dir / ("async-" + name) / "note.txt");
    std::string line;
    std::getline(note, line);
    EXPECT_EQ(line, "saved at step 2");
    // It loads, to the parameters of step 2, not those of step 3.
    Trained u = make(99);
    state::load_state_dict(dir / ("async-" + name), *u.model, u.opt.get(), w.group());
    auto loaded = full_parameters(*u.model);
    ASSERT_EQ(loaded.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_TRUE(torch::equal(loaded[i].second, before[i].second)) << before[i].first;
    }
  }
  cleanup(dir);
}

TEST(AsyncSave, SavesChainAndTheLastIsThereAfterWait) {
  auto& w = test::world();
  const fs::path dir = shared_dir("chain");
  Trained t = make(8);
  auto saver = make_saver();
  int committed = 0;
  for (int step = 0; step < 3; ++step) {
    train_step(t, step);
    saver->save(dir / fmt::format("checkpoint-{}", step), *t.model, t.opt.get(), {},
                [&committed] { ++committed; });
  }
  saver->wait();
  w.group()->barrier();
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(fs::exists(dir / fmt::format("checkpoint-{}", step) / "index.json")) << step;
  }
  EXPECT_EQ(committed, w.rank() == 0 ? 3 : 0);  // rank 0's writer commits
  EXPECT_GE(saver->last_write_ms(), 0.0);
  saver->wait();  // nothing in flight: returns at once
  cleanup(dir);
}

TEST(AsyncSave, FailedWriteSurfacesAtWaitOnEveryRankNamingTheCheckpoint) {
  auto& w = test::world();
  const fs::path dir = shared_dir("fail");
  Trained t = make(9);
  train_step(t, 0);
  auto saver = make_saver();
  const std::string failing = std::to_string(w.size() - 1);
  // What fsdpp-train-faults does for FSDPP_FAULT_SAVE_FAIL=<last rank>.
  fsdpp::testing::FaultPlan plan;
  plan.save_fail_rank = w.size() - 1;
  state::SaveOptions so;
  so.before_write = fsdpp::testing::save_fault_hook(plan);
  saver->save(dir / "checkpoint-1", *t.model, t.opt.get(), so);
  try {
    saver->wait();
    ADD_FAILURE() << "a failed asynchronous write was not reported";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[state] asynchronous save of '" + (dir / "checkpoint-1").string() + "' failed"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("FSDPP_FAULT_SAVE_FAIL=" + failing), std::string::npos) << msg;
  }
  w.group()->barrier();
  EXPECT_FALSE(fs::exists(dir / "checkpoint-1"));
  if (w.rank() == 0 && fs::exists(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
  }
  // The saver is usable again.
  saver->save(dir / "checkpoint-2", *t.model, t.opt.get());
  saver->wait();
  w.group()->barrier();
  EXPECT_TRUE(fs::exists(dir / "checkpoint-2" / "index.json"));
  cleanup(dir);
}
