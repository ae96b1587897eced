// Issue 5's options under several ranks: mixed precision (with the float16 loss scaler),
// activation checkpointing, CPU offload and prefetch, each against a reference computed
// another way (full precision, no checkpointing, no offload, no prefetch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>

#include "../support/test_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/grad_scaler.h"
#include "fsdpp/fsdp/inspect.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

constexpr int64_t kGlobalBatch = 12;
constexpr int64_t kVocab = 29;

struct Batch {
  torch::Tensor x, y;
};

Batch batch(int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(5000 + step);
  auto tokens = torch::randint(0, kVocab, {kGlobalBatch, 9}, g);
  return {tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)};
}

Batch local(const Batch& b) {
  auto& w = test::world();
  const int64_t n = kGlobalBatch / w.size();
  return {b.x.narrow(0, w.rank() * n, n), b.y.narrow(0, w.rank() * n, n)};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::cross_entropy_loss(logits.reshape({-1, kVocab}).to(torch::kFloat), y.reshape({-1}));
}

FullyShardOptions base(ShardingStrategy s = ShardingStrategy::FULL_SHARD) {
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  o.strategy = s;
  o.backward_prefetch = BackwardPrefetch::NONE;
  return o;
}

test::TinyTransformer make_model() {
  torch::manual_seed(42);
  return test::TinyTransformer(kVocab, 16, 2, 3);
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  dist::CommCounters comm;  // of the last step
};

// Trains `steps` steps of AdamW on this rank's part of the global batch.
Run train(const FullyShardOptions& o, int steps,
          const std::function<void(test::TinyTransformer&)>& prepare = {},
          bool use_scaler = false) {
  auto model = make_model();
  if (prepare) prepare(model);
  model->shard(o);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  std::optional<ShardedGradScaler> scaler;
  if (use_scaler) scaler.emplace(*model, GradScalerOptions{1024.0});
  Run r;
  for (int step = 0; step < steps; ++step) {
    auto b = local(batch(step));
    auto before = comm_counters(*model);
    auto loss = loss_of(fsdpp::forward(model, b.x), b.y);
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->unscale_();
    } else {
      loss.backward();
    }
    clip_grad_norm_(*model, 1.0);
    if (scaler) {
      scaler->step(opt);
      scaler->update();
    } else {
      opt.step();
    }
    opt.zero_grad();
    r.comm = comm_counters(*model) - before;
    auto avg = loss.detach().clone();
    test::world().group()->all_reduce(avg, dist::ReduceOp::AVG);
    r.losses.push_back(avg.item<double>());
  }
  for (auto& [name, t] : full_parameters(*model)) r.params[name] = t;
  return r;
}

double max_rel_diff(const Run& a, const Run& b) {
  double worst = 0;
  for (const auto& [name, t] : a.params) {
    const auto& u = b.params.at(name);
    const double scale = std::max(1.0, u.abs().max().item<double>());
    worst = std::max(worst, (t - u).abs().max().item<double>() / scale);
  }
  return worst;
}

void expect_identical(const Run& a, const Run& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << " step " << i;
  for (const auto& [name, t] : a.params) {
    EXPECT_TRUE(torch::equal(t, b.params.at(name))) << what << ": " << name;
  }
}

}  // namespace

// bf16 compute with float32 master weights and float32 gradient reduction tracks float32
// training; the all-gather moves half the bytes; the optimizer sees float32 shards.
TEST(MixedPrecision, Bf16TracksFp32AndHalvesGatherBytes) {
  const int steps = 12;
  auto fp32 = train(base(), steps);
  auto o = base();
  o.mp_policy.param_dtype = torch::kBFloat16;
  o.mp_policy.reduce_dtype = torch::kFloat;
  auto bf16 = train(o, steps);
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 0.02 * fp32.losses[i]) << "step " << i;
  }
  const double drift = max_rel_diff(bf16, fp32);
  EXPECT_LT(drift, 0.03);
  for (const auto& [name, t] : bf16.params) EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
  const auto ag32 = fp32.comm.bytes_of(dist::Collective::ALL_GATHER);
  const auto rs32 = fp32.comm.bytes_of(dist::Collective::REDUCE_SCATTER);
  EXPECT_EQ(bf16.comm.bytes_of(dist::Collective::ALL_GATHER) * 2, ag32);
  EXPECT_EQ(bf16.comm.bytes_of(dist::Collective::REDUCE_SCATTER), rs32);
  // bf16 reduction halves those bytes too.
  o.mp_policy.reduce_dtype = torch::kBFloat16;
  auto bf16_reduce = train(o, 3);
  EXPECT_EQ(bf16_reduce.comm.bytes_of(dist::Collective::REDUCE_SCATTER) * 2, rs32);
  if (test::world().rank() == 0) {
    std::printf("[bf16] final loss %.5f vs fp32 %.5f, max param drift %.2e\n", bf16.losses.back(),
                fp32.losses.back(), drift);
  }
}

// Inside forward the unit computes in bf16; outside, its parameters are float32 shards; the
// output dtype policy casts what the unit returns.
TEST(MixedPrecision, DtypesInsideAndOutsideForward) {
  auto model = make_model();
  auto o = base();
  o.mp_policy.param_dtype = torch::kBFloat16;
  for (size_t i = 0; i < model->blocks->size(); ++i) fully_shard(*model->blocks->ptr<test::TinyBlockImpl>(i), o);
  o.mp_policy.output_dtype = torch::kFloat;  // the root's logits only
  fully_shard(*model, o);
  auto b = local(batch(0));
  auto logits = fsdpp::forward(model, b.x);
  EXPECT_EQ(logits.scalar_type(), torch::kFloat);
  for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
  loss_of(logits, b.y).backward();
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
    EXPECT_EQ(p.grad().sizes(), p.sizes());
  }
  auto bad = base();
  bad.mp_policy.param_dtype = torch::kInt;
  auto other = make_model();
  EXPECT_THROW(other->shard(bad), ConfigError);
}

// float16 with the sharded loss scaler tracks float32; an inf injected into one rank's
// gradient shard skips the step on every rank and halves the scale, and training recovers.
TEST(MixedPrecision, Fp16LossScalerSkipsInjectedInfOnAllRanks) {
  auto& w = test::world();
  const int steps = 8;
  auto fp32 = train(base(), steps);
  auto o = base();
  o.mp_policy.param_dtype = torch::kHalf;
  o.mp_policy.reduce_dtype = torch::kFloat;
  auto fp16 = train(o, steps, {}, /*use_scaler=*/true);
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(fp16.losses[i], fp32.losses[i], 0.01 * fp32.losses[i]) << "step " << i;
  }

  auto model = make_model();
  model->shard(o);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  ShardedGradScaler scaler(*model, GradScalerOptions{1024.0, 2.0, 0.5, 2});
  auto step = [&](int i, bool inject) {
    auto b = local(batch(i));
    scaler.scale(loss_of(fsdpp::forward(model, b.x), b.y)).backward();
    if (inject && w.rank() == w.size() - 1) {
      torch::NoGradGuard ng;
      model->parameters()[0].grad().view({-1})[0] = std::numeric_limits<float>::infinity();
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    return stepped;
  };
  EXPECT_TRUE(step(0, false));
  auto before = full_parameters(*model);
  EXPECT_FALSE(step(1, true));  // every rank skips
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  auto after = full_parameters(*model);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(before[i].second, after[i].second)) << before[i].first;
  }
  EXPECT_TRUE(step(2, false));  // recovers
  EXPECT_TRUE(step(3, false));
  EXPECT_EQ(scaler.get_scale(), 1024.0);  // grew again after growth_interval good steps
  for (auto& [name, t] : full_parameters(*model)) EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << name;
}

// Checkpointed blocks give the same losses and parameters, bit for bit, and gather exactly as
// much as without checkpointing: the recomputation's gather is kept for the backward.
TEST(Checkpointing, SameResultsAndNoExtraGather) {
  for (auto s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                 ShardingStrategy::NO_SHARD}) {
    auto plain = train(base(s), 4);
    auto ckpt = train(base(s), 4, [](test::TinyTransformer& m) {
      auto marked = apply_activation_checkpointing(*m, {"TinyBlock"});
      EXPECT_EQ(marked.size(), 3u);
    });
    expect_identical(ckpt, plain, std::string("checkpointing under ") + to_string(s));
    EXPECT_EQ(ckpt.comm.bytes_of(dist::Collective::ALL_GATHER),
              plain.comm.bytes_of(dist::Collective::ALL_GATHER))
        << to_string(s);
    EXPECT_EQ(ckpt.comm.calls_of(dist::Collective::ALL_GATHER),
              plain.comm.calls_of(dist::Collective::ALL_GATHER))
        << to_string(s);
  }
  // Every second block.
  auto every2 = train(base(), 3, [](test::TinyTransformer& m) {
    EXPECT_EQ(apply_activation_checkpointing(*m, {"TinyBlock"}, 2),
              (std::vector<std::string>{"blocks.0", "blocks.2"}));
  });
  expect_identical(every2, train(base(), 3), "every 2nd block");
}

// Offloaded shards live in host memory and give the same results as resident ones.
TEST(Offload, CpuOffloadSameResults) {
  auto o = base();
  o.offload_policy.offload_params = true;
  auto off = train(o, 4);
  expect_identical(off, train(base(), 4), "CPU offload");
  auto model = make_model();
  model->shard(o);
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.is_cpu());
}

// Prefetching changes when parameters are gathered, never what is computed or sent.
TEST(Prefetch, SameResultsAndBytesEveryMode) {
  auto ref = train(base(), 3);
  for (auto bp : {BackwardPrefetch::BACKWARD_PRE, BackwardPrefetch::BACKWARD_POST}) {
    for (int fp : {0, 1, 2}) {
      auto o = base();
      o.backward_prefetch = bp;
      o.forward_prefetch = fp;
      auto r = train(o, 3);
      const auto what = std::string(to_string(bp)) + " forward_prefetch=" + std::to_string(fp);
      expect_identical(r, ref, what);
      EXPECT_EQ(r.comm.bytes_of(dist::Collective::ALL_GATHER),
                ref.comm.bytes_of(dist::Collective::ALL_GATHER)) << what;
    }
  }
}

// Observed from inside the blocks: with forward prefetch, when block i computes, block i+1's
// gather has been issued (one rank: nothing to gather, so only checked with more); the limit
// caps the gathers in flight.
namespace {
struct ProbeBlockImpl : torch::nn::Module {
  ProbeBlockImpl() { fc = register_module("fc", torch::nn::Linear(8, 8)); }
  torch::Tensor forward(const torch::Tensor& x) {
    if (probe) probe();
    return torch::tanh(fc(x));
  }
  torch::nn::Linear fc{nullptr};
  std::function<void()> probe;
};
TORCH_MODULE(ProbeBlock);

struct ProbeNetImpl : torch::nn::Module {
  ProbeNetImpl() {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 5; ++i) blocks->push_back(ProbeBlock());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x;
    for (size_t i = 0; i < blocks->size(); ++i) h = fsdpp::forward(blocks->ptr<ProbeBlockImpl>(i), h);
    return h;
  }
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(ProbeNet);
}  // namespace

TEST(Prefetch, ForwardPrefetchRunsAheadWithinTheLimit) {
  if (test::world().size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  for (int limit : {0, 1, 2}) {
    torch::manual_seed(1);
    ProbeNet net;
    auto o = base();
    o.forward_prefetch = 3;
    o.limit_all_gathers = limit;
    for (size_t i = 0; i < net->blocks->size(); ++i) fully_shard(*net->blocks->ptr<ProbeBlockImpl>(i), o);
    fully_shard(*net, o);
    std::vector<int> in_flight;
    for (size_t i = 0; i < net->blocks->size(); ++i) {
      net->blocks->ptr<ProbeBlockImpl>(i)->probe = [&] {
        int n = 0;
        for (const auto& u : inspect_units(*net)) n += u.gather_in_flight ? 1 : 0;
        in_flight.push_back(n);
      };
    }
    for (int step = 0; step < 2; ++step) {
      in_flight.clear();
      fsdpp::forward(net, torch::randn({4, 8})).sum().backward();
    }
    // Second step (the first records the order): block 0 computes while the next ones gather.
    ASSERT_EQ(in_flight.size(), 5u);
    const int expect0 = limit == 0 ? 3 : limit;
    EXPECT_EQ(in_flight[0], expect0) << "limit " << limit;
    for (int n : in_flight) EXPECT_LE(n, limit == 0 ? 3 : limit) << "limit " << limit;
    EXPECT_EQ(in_flight.back(), 0);
  }
}
