// DiskOffloadedOptimizer on fully_shard'ed models: FULL_SHARD training with the optimizer state
// in files gives the parameters and state of in-memory training bit for bit (AdamW and SGD with
// momentum); a checkpoint saved and loaded through the wrapper's optimizer continues training
// exactly, and loaded state moves back into the file.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "../support/test_models.h"
#include "fsdpp/optim/disk_offload.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/state_dict.h"
#include "world_fixture.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kGlobalBatch = 12;
constexpr int64_t kVocab = 29;

// The same fresh directory on every rank.
fs::path shared_dir() {
  auto& w = test::world();
  auto v = torch::full({1}, static_cast<int64_t>(w.rank() == 0 ? getpid() : 0), torch::kLong);
  w.group()->broadcast(v, 0);
  return fs::temp_directory_path() / fmt::format("fsdpp_disk_offload_{}", v.item<int64_t>());
}

struct OffloadRun {
  test::TinyTransformer model{nullptr};
  std::shared_ptr<torch::optim::Optimizer> opt;
  std::unique_ptr<DiskOffloadedOptimizer> off;  // null: state in memory
  torch::optim::Optimizer& optimizer() { return off ? off->optimizer() : *opt; }
};

OffloadRun make(bool sgd, const fs::path& offload_dir) {
  torch::manual_seed(7);
  OffloadRun r;
  r.model = test::TinyTransformer(kVocab, 16, 2, 2);
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  o.strategy = ShardingStrategy::FULL_SHARD;
  r.model->shard(o);
  if (sgd) {
    r.opt = std::make_shared<torch::optim::SGD>(
        r.model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  } else {
    r.opt = std::make_shared<torch::optim::AdamW>(
        r.model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  }
  if (!offload_dir.empty()) {
    DiskOffloadOptions d;
    d.dir = offload_dir;  // shared by the ranks: the files are named by rank
    d.rank = test::world().rank();
    r.off = std::make_unique<DiskOffloadedOptimizer>(r.opt, d);
  }
  return r;
}

void train_step(OffloadRun& r, int step) {
  auto& w = test::world();
  const int64_t local = kGlobalBatch / w.size();
  auto g = at::make_generator<at::CPUGeneratorImpl>(4000 + step);
  auto tokens = torch::randint(0, kVocab, {kGlobalBatch, 8}, g).narrow(0, w.rank() * local, local);
  auto logits = fsdpp::forward(r.model, tokens.narrow(1, 0, 7));
  torch::cross_entropy_loss(logits.reshape({-1, kVocab}), tokens.narrow(1, 1, 7).reshape({-1}))
      .backward();
  clip_grad_norm_(*r.model, 1.0);
  if (r.off) {
    r.off->step();
    r.off->zero_grad();
  } else {
    r.opt->step();
    r.opt->zero_grad();
  }
}

std::vector<at::Tensor> local_state(torch::optim::Optimizer& opt, const at::Tensor& p,
                                    int64_t* step) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) return {};
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
    *step = a->step();
    return {a->exp_avg(), a->exp_avg_sq()};
  }
  auto& s = dynamic_cast<torch::optim::SGDParamState&>(*it->second);
  return {s.momentum_buffer()};
}

void expect_same(OffloadRun& ref, OffloadRun& got, const std::string& what) {
  auto full_ref = full_parameters(*ref.model), full_got = full_parameters(*got.model);
  ASSERT_EQ(full_ref.size(), full_got.size());
  for (size_t i = 0; i < full_ref.size(); ++i) {
    EXPECT_TRUE(torch::equal(full_ref[i].second, full_got[i].second))
        << what << " " << full_ref[i].first;
  }
  auto pr = ref.model->parameters(), pg = got.model->parameters();
  ASSERT_EQ(pr.size(), pg.size());
  for (size_t i = 0; i < pr.size(); ++i) {
    int64_t sr = -1, sg = -1;
    auto a = local_state(ref.optimizer(), pr[i], &sr);
    auto b = local_state(got.optimizer(), pg[i], &sg);
    EXPECT_EQ(sr, sg) << what << " step counter of local parameter " << i;
    ASSERT_EQ(a.size(), b.size()) << what << " local parameter " << i;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_TRUE(torch::equal(a[k], b[k])) << what << " state " << k << " of local parameter " << i;
    }
  }
}

TEST(DiskOffloadFsdp, FullShardMatchesInMemoryState) {
  const fs::path dir = shared_dir();
  for (bool sgd : {false, true}) {
    const std::string what = sgd ? "SGD momentum" : "AdamW";
    OffloadRun ref = make(sgd, {});
    OffloadRun off = make(sgd, dir);
    for (int step = 0; step < 4; ++step) {
      train_step(ref, step);
      train_step(off, step);
      EXPECT_EQ(off.off->unmapped_bytes(), 0) << what;
      EXPECT_EQ(off.off->resident_bytes(), 0) << what;
      EXPECT_GT(off.off->mapped_bytes(), 0) << what;
    }
    expect_same(ref, off, what);
  }
  test::world().group()->barrier();
  if (test::world().rank() == 0) state::remove_tree(dir);
}

TEST(DiskOffloadFsdp, StateDictRoundTripThroughTheWrapper) {
  const fs::path dir = shared_dir();
  OffloadRun ref = make(false, {});
  OffloadRun a = make(false, dir / "offload");
  for (int step = 0; step < 2; ++step) {
    train_step(ref, step);
    train_step(a, step);
  }
  const fs::path ckpt = dir / "ckpt";
  state::save_state_dict(ckpt, *a.model, &a.off->optimizer(), test::world().group());
  // The save read every state page; release() takes them out of the process again.
  a.off->release();
  EXPECT_EQ(a.off->resident_bytes(), 0);

  // Loaded into a fresh model and wrapper: the state arrives in memory and moves into the file.
  OffloadRun b = make(false, dir / "offload");
  state::load_state_dict(ckpt, *b.model, &b.off->optimizer(), test::world().group());
  EXPECT_GT(b.off->unmapped_bytes(), 0);
  b.off->offload_state();
  EXPECT_EQ(b.off->unmapped_bytes(), 0);
  EXPECT_EQ(b.off->resident_bytes(), 0);
  // Loaded over the wrapper's own mapped state: replaced, then mapped again by the next step.
  const int64_t mapped = a.off->mapped_bytes();
  state::load_state_dict(ckpt, *a.model, &a.off->optimizer(), test::world().group());
  EXPECT_GT(a.off->unmapped_bytes(), 0);

  for (int step = 2; step < 4; ++step) {
    train_step(ref, step);
    train_step(a, step);
    train_step(b, step);
  }
  EXPECT_EQ(a.off->unmapped_bytes(), 0);
  EXPECT_EQ(a.off->mapped_bytes(), mapped) << "the replaced state's regions are reused";
  expect_same(ref, a, "loaded over its own state");
  expect_same(ref, b, "loaded into a fresh wrapper");
  test::world().group()->barrier();
  if (test::world().rank() == 0) state::remove_tree(dir);
}

}  // namespace
