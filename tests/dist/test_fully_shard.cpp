// fully_shard against single-process training of the same model on the same global batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <optional>

#include "../support/test_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4 ranks
constexpr int kSteps = 10;
constexpr int kMicroBatches = 2;

struct Batch {
  torch::Tensor x, y;
};

struct MLPCase {
  using Model = test::OddMLP;
  static Model make() { return Model(); }
  static Batch batch(int step, int micro) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + step * 10 + micro);
    return {torch::randn({kGlobalBatch, 13}, g), torch::randn({kGlobalBatch, 2}, g)};
  }
  static torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) {
    return torch::mse_loss(out, y);
  }
  static torch::nn::Module& inner_unit(Model& m) { return *m->twice; }
};

struct TransformerCase {
  using Model = test::TinyTransformer;
  static Model make() { return Model(29, 16, 2, 2); }
  static Batch batch(int step, int micro) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(2000 + step * 10 + micro);
    auto tokens = torch::randint(0, 29, {kGlobalBatch, 8}, g);
    return {tokens.narrow(1, 0, 7), tokens.narrow(1, 1, 7)};
  }
  static torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& y) {
    return torch::cross_entropy_loss(logits.reshape({-1, 29}), y.reshape({-1}));
  }
  static torch::nn::Module& inner_unit(Model& m) { return *m->blocks[m->blocks->size() - 1]; }
};

FullyShardOptions options_for(ShardingStrategy s) {
  auto& w = test::world();
  FullyShardOptions o;
  o.strategy = s;
  if (s == ShardingStrategy::HYBRID_SHARD || s == ShardingStrategy::HYBRID_SHARD_ZERO2) {
    o.mesh = w.init_device_mesh({2, w.size() / 2}, {"replicate", "shard"});
  } else {
    o.mesh = w.mesh();
  }
  return o;
}

std::vector<ShardingStrategy> strategies() {
  std::vector<ShardingStrategy> s{ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                  ShardingStrategy::ZERO1, ShardingStrategy::NO_SHARD};
  if (test::world().size() == 4) {
    s.push_back(ShardingStrategy::HYBRID_SHARD);
    s.push_back(ShardingStrategy::HYBRID_SHARD_ZERO2);
  }
  return s;
}

// Trains the reference on the whole global batch and the sharded model on this rank's slice,
// kSteps steps of kMicroBatches accumulation batches with AdamW and clipping, and compares.
enum class Optim { ADAMW, SGD_MOMENTUM };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Optim which,
                                                        std::vector<torch::Tensor> params) {
  if (which == Optim::SGD_MOMENTUM) {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
  }
  return std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
}

// How the accumulation batches' gradients are reduced: every backward; only the last one (sync
// switched off before); or held (fsdpp::unshard before the first forward, reduce_gradients and
// reshard after the last backward, as pipeline stages do).
enum class Accumulate { SYNC_EVERY, WITHOUT_SYNC, HELD };

// How gradients are bucketed and which units keep their parameters from forward to backward.
struct Layout {
  int64_t reduce_bucket_size = 0;
  // set_reshard_after_forward on the root and on Case::inner_unit (a unit called twice, the
  // last block) when given.
  std::optional<bool> reshard_root, reshard_inner;
};

template <typename Case>
void check_parity(ShardingStrategy strategy, Accumulate accumulate, Optim which = Optim::ADAMW,
                  Layout layout = {}) {
  auto& w = test::world();
  const int n = w.size();
  const int64_t local = kGlobalBatch / n;
  torch::manual_seed(1234);
  auto ref = Case::make();
  torch::manual_seed(1234);
  auto model = Case::make();
  auto options = options_for(strategy);
  options.reduce_bucket_size = layout.reduce_bucket_size;
  model->shard(options);
  if (layout.reshard_root) set_reshard_after_forward(*model, *layout.reshard_root);
  if (layout.reshard_inner) set_reshard_after_forward(Case::inner_unit(model), *layout.reshard_inner);
  auto ref_opt_ptr = make_optimizer(which, ref->parameters());
  auto opt_ptr = make_optimizer(which, model->parameters());
  auto& ref_opt = *ref_opt_ptr;
  auto& opt = *opt_ptr;
  for (int step = 0; step < kSteps; ++step) {
    const bool held = accumulate == Accumulate::HELD;
    if (held) unshard(*model);
    for (int micro = 0; micro < kMicroBatches; ++micro) {
      auto b = Case::batch(step, micro);
      (Case::loss(ref->forward(b.x), b.y) / kMicroBatches).backward();
      const bool last = micro == kMicroBatches - 1;
      set_requires_gradient_sync(*model, last || accumulate != Accumulate::WITHOUT_SYNC);
      auto x = b.x.narrow(0, w.rank() * local, local);
      auto y = b.y.narrow(0, w.rank() * local, local);
      (Case::loss(fsdpp::forward(model, x), y) / kMicroBatches).backward();
    }
    if (held) {
      reduce_gradients(*model);
      reshard(*model);
    }
    const double ref_norm = torch::nn::utils::clip_grad_norm_(ref->parameters(), 0.5);
    const double norm = clip_grad_norm_(*model, 0.5);
    ASSERT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << to_string(strategy) << " step " << step;
    ref_opt.step();
    opt.step();
    ref_opt.zero_grad();
    opt.zero_grad();
  }
  std::map<std::string, torch::Tensor> expected;
  for (const auto& kv : ref->named_parameters()) expected[kv.key()] = kv.value();
  auto got = full_parameters(*model);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, t] : got) {
    ASSERT_TRUE(expected.count(name)) << name;
    const auto& e = expected[name];
    ASSERT_EQ(t.sizes(), e.sizes()) << name;
    const double err = (t - e).abs().max().template item<double>();
    const double scale = std::max(1.0, e.abs().max().template item<double>());
    EXPECT_LE(err / scale, 1e-5) << to_string(strategy) << " " << name << " on " << n << " ranks; max abs " << e.abs().max().template item<double>();
  }
  // The frozen parameter did not move, and parameters really changed.
  if (expected.count("in.scale")) {
    EXPECT_TRUE(torch::allclose(expected["in.scale"], torch::ones({37}) * 0.9));
  }
}

}  // namespace

TEST(FullyShard, MLPParityEveryStrategy) {
  for (auto s : strategies()) check_parity<MLPCase>(s, Accumulate::SYNC_EVERY);
}

TEST(FullyShard, MLPParityAccumulatingWithoutSync) {
  for (auto s : strategies()) check_parity<MLPCase>(s, Accumulate::WITHOUT_SYNC);
}

TEST(FullyShard, MLPParityWithSGDMomentum) {
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::ZERO1}) {
    check_parity<MLPCase>(s, Accumulate::SYNC_EVERY, Optim::SGD_MOMENTUM);
  }
}

TEST(FullyShard, TransformerParityEveryStrategy) {
  for (auto s : strategies()) check_parity<TransformerCase>(s, Accumulate::SYNC_EVERY);
}

TEST(FullyShard, TransformerParityAccumulatingWithoutSync) {
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::NO_SHARD}) {
    check_parity<TransformerCase>(s, Accumulate::WITHOUT_SYNC);
  }
}

// Gradients reduced in buckets as they are computed (one parameter per bucket, and a few
// parameters per bucket) and units kept gathered from forward to backward give the same
// training as one process.
TEST(FullyShard, ParityWithReduceBucketsAndUnitsKeptAfterForward) {
  // Every strategy with a bucket per parameter (1) and with buckets of several (600), each on one
  // model (the grid of both on both is 4x the collectives, each one latency on an oversubscribed
  // machine); FULL_SHARD's transformer with both. On 4 ranks, where 2 and 3 have run the
  // others, only what needs 4: the hybrid strategies, and FULL_SHARD.
  auto all = strategies();
  if (test::world().size() == 4) {
    all = {ShardingStrategy::FULL_SHARD, ShardingStrategy::HYBRID_SHARD,
           ShardingStrategy::HYBRID_SHARD_ZERO2};
  }
  auto kept = [](int64_t bucket) {
    return Layout{.reduce_bucket_size = bucket, .reshard_root = false, .reshard_inner = false};
  };
  for (auto s : all) {
    check_parity<MLPCase>(s, Accumulate::SYNC_EVERY, Optim::ADAMW, kept(1));
    check_parity<TransformerCase>(s, Accumulate::SYNC_EVERY, Optim::ADAMW, kept(600));
  }
  check_parity<TransformerCase>(ShardingStrategy::FULL_SHARD, Accumulate::SYNC_EVERY, Optim::ADAMW,
                                kept(1));
  check_parity<MLPCase>(ShardingStrategy::FULL_SHARD, Accumulate::WITHOUT_SYNC, Optim::ADAMW,
                        {.reduce_bucket_size = 1, .reshard_inner = false});
  check_parity<MLPCase>(ShardingStrategy::FULL_SHARD, Accumulate::HELD, Optim::ADAMW,
                        {.reduce_bucket_size = 1});
  // SHARD_GRAD_OP with units that free their parameters after forward after all.
  check_parity<TransformerCase>(ShardingStrategy::SHARD_GRAD_OP, Accumulate::SYNC_EVERY,
                                Optim::ADAMW, {.reshard_root = true, .reshard_inner = true});
}

// Held by fsdpp::unshard: the accumulation batches' separate backward passes reduce nothing and the
// gradients are reduced once by reduce_gradients, as pipeline stages do.
TEST(FullyShard, ParityHeldGatheredAcrossMicroBatches) {
  for (auto s : strategies()) check_parity<MLPCase>(s, Accumulate::HELD);
  check_parity<TransformerCase>(ShardingStrategy::FULL_SHARD, Accumulate::HELD);
}

// Between steps a rank holds ceil(dim0/N) rows of every parameter, gradient and AdamW state;
// in FULL_SHARD no unsharded parameter storage is left after forward.
TEST(FullyShard, MemoryHoldsOnlyShards) {
  auto& w = test::world();
  const int n = w.size();
  torch::manual_seed(7);
  auto model = TransformerCase::make();
  std::map<std::string, std::vector<int64_t>> full_shapes;
  for (const auto& kv : model->named_parameters()) full_shapes[kv.key()] = kv.value().sizes().vec();
  model->shard(options_for(ShardingStrategy::FULL_SHARD));
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto b = TransformerCase::batch(0, 0);
  auto logits = fsdpp::forward(model, b.x);
  for (const auto& u : inspect_units(*model)) {
    EXPECT_EQ(u.unsharded_bytes, 0) << u.name << " after forward";
  }
  TransformerCase::loss(logits, b.y).backward();
  opt.step();
  for (const auto& u : inspect_units(*model)) EXPECT_EQ(u.unsharded_bytes, 0) << u.name;
  int64_t checked = 0;
  for (const auto& kv : model->named_parameters()) {
    const auto& full = full_shapes.at(kv.key());
    const int64_t dim0 = full.empty() ? 1 : full[0];
    const int64_t numel = std::accumulate(full.begin(), full.end(), int64_t{1}, std::multiplies<>());
    const int64_t rows = (dim0 + n - 1) / n;
    const auto& p = kv.value();
    EXPECT_EQ(p.size(0), rows) << kv.key();
    EXPECT_EQ(p.numel(), rows * (numel / dim0)) << kv.key();
    EXPECT_LE(p.numel(), (numel + n - 1) / n + numel / dim0) << kv.key();  // ceil(numel/N) + padding
    EXPECT_EQ(p.grad().sizes(), p.sizes()) << kv.key();
    auto& state = static_cast<torch::optim::AdamWParamState&>(
        *opt.state().at(p.unsafeGetTensorImpl()));
    EXPECT_EQ(state.exp_avg().sizes(), p.sizes()) << kv.key();
    EXPECT_EQ(state.exp_avg_sq().sizes(), p.sizes()) << kv.key();
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int64_t>(full_shapes.size()));
}

// Bytes per rank per step from the counters: FULL_SHARD 3·S·(N-1)/N, SHARD_GRAD_OP, ZERO1 and
// NO_SHARD 2·S·(N-1)/N, with S the (padded) parameter bytes.
TEST(FullyShard, CommunicationVolumeMatchesTheory) {
  auto& w = test::world();
  const int64_t n = w.size();
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                 ShardingStrategy::ZERO1, ShardingStrategy::NO_SHARD}) {
    torch::manual_seed(3);
    auto model = TransformerCase::make();
    int64_t unpadded = 0;
    for (const auto& p : model->parameters()) unpadded += p.numel() * 4;
    model->shard(options_for(s));
    int64_t padded = 0;
    for (const auto& u : inspect_units(*model)) padded += u.shard_numel * 4 * u.shard_world;
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
    for (int step = 0; step < 2; ++step) {  // the second step shows the steady state
      auto before = comm_counters(*model);
      auto b = TransformerCase::batch(step, 0);
      TransformerCase::loss(fsdpp::forward(model, b.x), b.y).backward();
      opt.step();
      opt.zero_grad();
      auto d = comm_counters(*model) - before;
      const int64_t ag = d.bytes_of(dist::Collective::ALL_GATHER);
      const int64_t rs = d.bytes_of(dist::Collective::REDUCE_SCATTER);
      const int64_t ar = d.bytes_of(dist::Collective::ALL_REDUCE);
      const int64_t unit = padded * (n - 1) / n;
      switch (s) {
        case ShardingStrategy::FULL_SHARD:
          EXPECT_EQ(ag + rs, 3 * unit);
          EXPECT_EQ(ar, 0);
          break;
        case ShardingStrategy::SHARD_GRAD_OP:
        case ShardingStrategy::ZERO1:
          EXPECT_EQ(ag + rs, 2 * unit) << to_string(s);
          EXPECT_EQ(ar, 0);
          break;
        default:
          EXPECT_EQ(ag + rs, 0);
          // Each unit's all-reduce rounds 2·B·(N-1)/N down to whole bytes.
          EXPECT_NEAR(static_cast<double>(ar), 2.0 * unpadded * (n - 1) / n,
                      static_cast<double>(inspect_units(*model).size()));
      }
    }
  }
}

// FULL_SHARD with the root and the last block kept gathered from forward to backward: those
// two units skip their backward all-gather, (S_root + S_last)·(N-1)/N fewer bytes, and hold
// their parameters between forward and backward only. Reduce buckets split the reduce-scatter
// without changing its bytes.
TEST(FullyShard, UnitsKeptAfterForwardSaveTheirBackwardGather) {
  auto& w = test::world();
  const int64_t n = w.size();
  torch::manual_seed(3);
  auto model = TransformerCase::make();
  auto options = options_for(ShardingStrategy::FULL_SHARD);
  options.reduce_bucket_size = 100;
  model->shard(options);
  set_reshard_after_forward(*model, false);
  set_reshard_after_forward(TransformerCase::inner_unit(model), false);
  const std::string last = "blocks." + std::to_string(model->blocks->size() - 1);
  int64_t padded = 0, kept = 0;
  for (const auto& u : inspect_units(*model)) {
    padded += u.shard_numel * 4 * u.shard_world;
    if (u.name == "(root)" || u.name == last) kept += u.shard_numel * 4 * u.shard_world;
  }
  ASSERT_GT(kept, 0);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 2; ++step) {
    auto before = comm_counters(*model);
    auto b = TransformerCase::batch(step, 0);
    auto logits = fsdpp::forward(model, b.x);
    for (const auto& u : inspect_units(*model)) {
      const bool keeps = u.name == "(root)" || u.name == last;
      EXPECT_EQ(u.unsharded_bytes > 0, keeps && n > 1) << u.name << " after forward";
    }
    TransformerCase::loss(logits, b.y).backward();
    for (const auto& u : inspect_units(*model)) EXPECT_EQ(u.unsharded_bytes, 0) << u.name;
    opt.step();
    opt.zero_grad();
    auto d = comm_counters(*model) - before;
    EXPECT_EQ(d.bytes_of(dist::Collective::ALL_GATHER) + d.bytes_of(dist::Collective::REDUCE_SCATTER),
              (3 * padded - kept) * (n - 1) / n);
    EXPECT_EQ(d.bytes_of(dist::Collective::REDUCE_SCATTER), padded * (n - 1) / n);
  }
}

TEST(FullyShard, ClearErrors) {
  auto& w = test::world();
  torch::manual_seed(1);
  auto model = test::OddMLP();
  FullyShardOptions bad;
  try {
    fully_shard(model, bad);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mesh is not set"), std::string::npos);
  }
  auto o = options_for(ShardingStrategy::FULL_SHARD);
  model->shard(o);
  EXPECT_THROW(fully_shard(model, o), fsdpp::Error);  // twice
  // A unit called outside its root's forward says what to do.
  try {
    fsdpp::forward(model->twice, torch::randn({2, 37}));
    FAIL();
  } catch (const fsdpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside its root's forward"), std::string::npos);
  }
  struct Empty : torch::nn::Module {};
  Empty empty;
  EXPECT_THROW(fully_shard(empty, o), fsdpp::Error);
  EXPECT_THROW(set_reshard_after_forward(empty, false), fsdpp::Error);  // not a unit
  auto negative = o;
  negative.reduce_bucket_size = -1;
  auto other = test::OddMLP();
  EXPECT_THROW(other->shard(negative), ConfigError);
  // NO_SHARD has nothing to free; ZERO1 keeps its parameters gathered between steps.
  for (auto s : {ShardingStrategy::NO_SHARD, ShardingStrategy::ZERO1}) {
    auto m = test::OddMLP();
    m->shard(options_for(s));
    set_reshard_after_forward(*m, false);
    try {
      set_reshard_after_forward(*m, true);
      FAIL() << to_string(s);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("only set_reshard_after_forward(false)"),
                std::string::npos) << e.what();
    }
  }
  (void)w;
}

// sync_module_states with nested units: every rank starts from other weights; after fully_shard
// each holds rank 0's (the root's broadcast must not overwrite the inner units' shards, which
// are this rank's rows by then).
TEST(FullyShard, SyncModuleStatesNestedUnits) {
  auto& w = test::world();
  auto make = [](uint64_t seed) {
    torch::manual_seed(seed);
    return torch::nn::Sequential(torch::nn::Linear(8, 12), torch::nn::Linear(12, 8), torch::nn::Linear(8, 4));
  };
  auto want = make(11);  // rank 0's weights, built here on every rank
  auto model = make(11 + w.rank());
  FullyShardOptions o;
  o.mesh = w.mesh();
  o.sync_module_states = true;
  fully_shard(*model->ptr(0), o);
  fully_shard(*model->ptr(1), o);
  fully_shard(*model.ptr(), o);
  const auto got = fsdpp::full_parameters(*model.ptr());
  std::map<std::string, at::Tensor> expected;
  for (const auto& p : want->named_parameters()) expected[p.key()] = p.value();
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, t] : got) EXPECT_TRUE(at::equal(t, expected.at(name))) << name;
}
