// fsdpp::fsdp::wrap, fsdpp::ddp and zero_stage against single-process training of the same model
// on the same global batch; the dtype trap of one output_dtype for every unit; clear errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "../support/test_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/wrap.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

constexpr int64_t kVocab = 29, kBatch = 12, kSteps = 4;

test::TinyTransformer make_model() {
  torch::manual_seed(7);
  return test::TinyTransformer(kVocab, 16, 2, 4);
}

std::pair<at::Tensor, at::Tensor> batch(int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(500 + step);
  auto tokens = torch::randint(0, kVocab, {kBatch, 9}, g);
  return {tokens.narrow(1, 0, 8), tokens.narrow(1, 1, 8)};
}

at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& y) {
  return torch::cross_entropy_loss(logits.reshape({-1, kVocab}).to(at::kFloat), y.reshape({-1}));
}

// Per step: the loss over the global batch and the gradient norm before clipping.
struct Curve {
  std::vector<double> loss, norm;
};

// One process on the whole batch, plain LibTorch.
Curve reference() {
  auto model = make_model();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  Curve c;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step);
    auto loss = loss_of(model->forward(x), y);
    loss.backward();
    c.norm.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), 0.5));
    c.loss.push_back(loss.item<double>());
    opt.step();
    opt.zero_grad();
  }
  return c;
}

// The wrapped model on this rank's rows of each batch; the loss averaged over the ranks.
Curve wrapped(const std::function<fsdp::Wrapped(test::TinyTransformer&)>& wrap_fn) {
  auto& w = test::world();
  auto model = make_model();
  const auto made = wrap_fn(model);
  EXPECT_EQ(made.units.back(), "");
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  const int64_t rows = kBatch / w.size();
  Curve c;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step);
    x = x.narrow(0, w.rank() * rows, rows);
    y = y.narrow(0, w.rank() * rows, rows);
    auto loss = loss_of(fsdpp::forward(model, x), y);
    loss.backward();
    c.norm.push_back(fsdpp::clip_grad_norm_(*model, 0.5));
    auto l = loss.detach().clone().reshape({1});
    w.group()->all_reduce(l, dist::ReduceOp::SUM, {"test loss"});
    c.loss.push_back(l.item<double>() / w.size());
    opt.step();
    opt.zero_grad();
  }
  return c;
}

void expect_equal(const Curve& a, const Curve& b, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(a.loss[s], b.loss[s], 1e-5) << what << " step " << s;
    EXPECT_NEAR(a.norm[s], b.norm[s], 1e-5) << what << " step " << s;
  }
}

}  // namespace

// Every ZeRO stage by number, the class written as the code names it ("TinyBlockImpl"),
// activation checkpointing of every 2nd block: one process's losses and norms.
TEST(WrapOneCall, EveryZeroStageEqualsOneProcess) {
  const Curve ref = reference();
  for (int stage : {0, 1, 2, 3}) {
    const Curve got = wrapped([&](test::TinyTransformer& m) {
      auto made = fsdp::wrap(m, {.mesh = test::world().mesh(),
                                 .strategy = fsdp::zero_stage(stage),
                                 .layer_classes = {"TinyBlockImpl"},
                                 .checkpoint_every = 2});
      EXPECT_EQ(made.units.size(), 5u);         // 4 blocks and the root
      EXPECT_EQ(made.checkpointed.size(), 2u);  // blocks 0 and 2
      EXPECT_EQ(made.checkpointed[1], "blocks.2");
      EXPECT_EQ(made.strategy, fsdp::zero_stage(stage));
      EXPECT_NE(made.describe().find(std::to_string(test::world().size()) + " rank"),
                std::string::npos)
          << made.describe();
      return made;
    });
    expect_equal(ref, got, "ZeRO stage " + std::to_string(stage));
  }
}

// DDP: every rank holds the whole model; gradients all-reduced in buckets as they are computed.
TEST(WrapOneCall, DdpEqualsOneProcess) {
  const Curve ref = reference();
  for (double cap : {0.0, 0.001, 25.0}) {  // one all-reduce; ~262 elements a bucket; DDP's
    const Curve got = wrapped([&](test::TinyTransformer& m) {
      auto made = fsdpp::ddp(m, test::world().mesh(), {.bucket_cap_mb = cap});
      EXPECT_EQ(made.strategy, ShardingStrategy::NO_SHARD);
      EXPECT_EQ(made.params_held, made.params);  // replicas hold everything
      return made;
    });
    expect_equal(ref, got, "ddp bucket_cap_mb " + std::to_string(cap));
  }
}

// Size-based wrapping among the named classes: 4 blocks of ~3.3 K elements each pass 1000.
TEST(WrapOneCall, SizeBasedPolicyChoosesTheBlocks) {
  auto model = make_model();
  auto made = fsdp::wrap(model, {.mesh = test::world().mesh(),
                                 .layer_classes = {"TinyBlock"},
                                 .min_num_params = 1000});
  EXPECT_EQ(made.units.size(), 5u);
  auto none = make_model();
  auto root_only = fsdp::wrap(none, {.mesh = test::world().mesh(),
                                     .layer_classes = {"TinyBlock"},
                                     .min_num_params = 1'000'000});
  EXPECT_EQ(root_only.units.size(), 1u);
}

// bf16(): blocks hand each other bf16 and the root's norm and head compute in bf16, while the
// logits come back in float32 (output_dtype on the root only).
TEST(WrapOneCall, MixedPrecisionOutputDtypeOnTheRootOnly) {
  auto model = make_model();
  fsdp::wrap(model, {.mesh = test::world().mesh(),
                     .layer_classes = {"TinyBlock"},
                     .mixed_precision = fsdp::bf16()});
  auto [x, y] = batch(0);
  auto logits = fsdpp::forward(model, x);
  EXPECT_EQ(logits.scalar_type(), at::kFloat);
  auto loss = loss_of(logits, y);
  loss.backward();
  EXPECT_TRUE(std::isfinite(fsdpp::clip_grad_norm_(*model, 1.0)));
}

// The trap: one FullyShardOptions with output_dtype float32 for blocks and root hands the
// root's bf16 LayerNorm a float32 input. LibTorch's error becomes one naming the unit and the
// units whose output_dtype caused it.
TEST(WrapOneCall, MixedDtypesAtAUnitBoundaryNameTheUnits) {
  auto model = make_model();
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  o.mp_policy.param_dtype = at::kBFloat16;
  o.mp_policy.output_dtype = at::kFloat;
  model->shard(o);
  auto [x, y] = batch(0);
  try {
    fsdpp::forward(model, x);
    FAIL() << "expected the mixed dtypes to fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[fsdp] the forward of unit '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'blocks.3' returns Float"), std::string::npos) << msg;
    EXPECT_NE(msg.find("set output_dtype on the root only"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;  // no LibTorch backtrace
  }
}

TEST(WrapOneCall, ClearErrors) {
  auto model = make_model();
  auto message = [&](const fsdp::WrapOptions& o) {
    try {
      fsdp::wrap(model, o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("WrapOptions::mesh is not set"), std::string::npos);
  const auto mesh = test::world().mesh();
  const auto unknown = message({.mesh = mesh, .layer_classes = {"Block"}});
  EXPECT_NE(unknown.find("no module of 'TinyTransformer' has class 'Block'"), std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("TinyBlock, "), std::string::npos) << unknown;  // what it has
  EXPECT_NE(message({.mesh = mesh, .checkpoint_every = 2}).find("needs layer_classes"),
            std::string::npos);
  EXPECT_NE(message({.mesh = mesh, .strategy = ShardingStrategy::HYBRID_SHARD})
                .find("needs a 2-D mesh"),
            std::string::npos);
  EXPECT_THROW(fsdp::zero_stage(4), ConfigError);
  EXPECT_THROW(fsdpp::ddp(model, mesh, {.bucket_cap_mb = -1}), ConfigError);
}
