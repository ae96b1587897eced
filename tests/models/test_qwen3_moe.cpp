// Qwen3-MoE pieces alone (the whole model against transformers is qwen3_moe_hf.py): the grouped
// expert computation against a per-token reference, forward and backward, under degenerate
// routing; the load-balancing loss against its formula; the configuration and the converter's
// refusals.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/models/qwen3_moe.h"

using fsdpp::ConfigError;
using namespace fsdpp::models;

namespace {

Qwen3MoeConfig tiny() { return fsdpp::test::narrow_moe(); }

// One token and one choice at a time: sum_j w[n,j] * SwiGLU_{e(n,j)}(x[n]).
at::Tensor per_token_reference(Qwen3MoeExpertsImpl& ex, const at::Tensor& x, const at::Tensor& ids,
                               const at::Tensor& w) {
  std::vector<at::Tensor> rows;
  for (int64_t n = 0; n < x.size(0); ++n) {
    auto acc = at::zeros({x.size(1)});
    for (int64_t j = 0; j < ids.size(1); ++j) {
      const int64_t e = ids[n][j].item<int64_t>();
      auto h = at::silu(at::mv(ex.gate_proj[e], x[n])) * at::mv(ex.up_proj[e], x[n]);
      acc = acc + w[n][j] * at::mv(ex.down_proj[e], h);
    }
    rows.push_back(acc);
  }
  return at::stack(rows);
}

// Output and every gradient of the grouped computation against the per-token one.
void expect_matches_reference(const at::Tensor& ids, ExpertKernel kernel = ExpertKernel::LOOP) {
  torch::manual_seed(3);
  Qwen3MoeExperts ex(4, 16, 8);
  ex->kernel = kernel;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : ex->parameters()) p.normal_(0, 0.3);
  }
  const int64_t N = ids.size(0);
  auto x = torch::randn({N, 16}, torch::requires_grad());
  auto w = torch::rand({N, ids.size(1)}, torch::requires_grad());
  auto y = ex->forward(x, ids, w);
  auto gy = torch::randn_like(y);
  auto grads = torch::autograd::grad({y}, {x, w, ex->gate_proj, ex->up_proj, ex->down_proj}, {gy},
                                     /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  auto r = per_token_reference(*ex, x, ids, w);
  auto rgrads = torch::autograd::grad({r}, {x, w, ex->gate_proj, ex->up_proj, ex->down_proj},
                                      {gy}, false, false, true);
  EXPECT_LT((y - r).abs().max().item<double>(), 1e-5);
  for (size_t i = 0; i < grads.size(); ++i) {
    // An expert no token reached gets no gradient path; its gradient is zero either way.
    auto g = grads[i].defined() ? grads[i] : torch::zeros_like(rgrads[i]);
    EXPECT_LT((g - rgrads[i]).abs().max().item<double>(), 1e-5) << "gradient " << i;
  }
}

std::string config_error(Qwen3MoeConfig cfg) {
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Qwen3Moe, GroupedExpertsEqualPerTokenComputation) {
  for (auto kernel : {ExpertKernel::LOOP, ExpertKernel::GROUPED}) {
    expect_matches_reference(torch::randint(4, {10, 2}, torch::kLong), kernel);
  }
}

TEST(Qwen3Moe, EveryTokenToOneExpertAndExpertsWithNone) {
  for (auto kernel : {ExpertKernel::LOOP, ExpertKernel::GROUPED}) {
    // Top-1 all on expert 2: experts 0, 1, 3 receive nothing.
    expect_matches_reference(torch::full({7, 1}, 2, torch::kLong), kernel);
    // Top-2 on experts 3 and 0 only.
    expect_matches_reference(torch::tensor({3, 0}, torch::kLong).repeat({5, 1}), kernel);
  }
}

// The grouped GEMMs' math on the CPU (at::_grouped_mm in float32) against the per-expert loop:
// the routed forward, the rows-by-expert forward expert parallelism calls, and a whole model,
// outputs and every gradient. AUTO keeps the loop on the CPU (the exact path).
TEST(Qwen3Moe, GroupedGemmsEqualThePerExpertLoop) {
  torch::manual_seed(5);
  Qwen3MoeExperts loop(8, 32, 16), grouped(8, 32, 16);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : loop->parameters()) p.normal_(0, 0.3);
    for (size_t i = 0; i < loop->parameters().size(); ++i) grouped->parameters()[i].copy_(loop->parameters()[i]);
  }
  loop->kernel = ExpertKernel::LOOP;
  grouped->kernel = ExpertKernel::GROUPED;
  EXPECT_FALSE(Qwen3MoeExperts(2, 8, 4)->runs_grouped(torch::zeros({3, 8})));  // AUTO on the CPU
  auto x = torch::randn({64, 32}, torch::requires_grad());
  const auto ids = torch::randint(8, {64, 2}, torch::kLong);
  auto w = torch::rand({64, 2}, torch::requires_grad());
  const auto run = [&](Qwen3MoeExperts& ex, bool by_counts) {
    // Rows grouped by expert as dispatch delivers them: 3, 0, 9, ... rows for experts 0, 1, 2, ...
    const std::vector<int64_t> counts = {3, 0, 9, 20, 1, 0, 17, 14};
    auto y = by_counts ? ex->forward(x, counts) : ex->forward(x, ids, w);
    auto gy = torch::ones_like(y).mul(0.5).contiguous();
    const std::vector<at::Tensor> inputs = by_counts
        ? std::vector<at::Tensor>{x, ex->gate_proj, ex->up_proj, ex->down_proj}
        : std::vector<at::Tensor>{x, w, ex->gate_proj, ex->up_proj, ex->down_proj};
    auto grads = torch::autograd::grad({y}, inputs, {gy}, false, false, /*allow_unused=*/true);
    grads.insert(grads.begin(), y.detach());
    return grads;
  };
  for (bool by_counts : {false, true}) {
    const auto a = run(loop, by_counts), b = run(grouped, by_counts);
    for (size_t i = 0; i < a.size(); ++i) {
      const auto ai = a[i].defined() ? a[i] : torch::zeros_like(b[i]);
      EXPECT_LT((ai - b[i]).abs().max().item<double>(), 1e-5) << (by_counts ? "by counts, " : "routed, ") << i;
    }
  }
  // A whole model: its logits with every layer's experts grouped equal the loop's.
  Qwen3Moe model(tiny());
  const auto tokens = torch::randint(tiny().vocab_size, {2, 12}, torch::kLong);
  const auto before = model->forward(tokens).detach();
  for (auto& m : model->modules()) {
    if (auto* ex = dynamic_cast<Qwen3MoeExpertsImpl*>(m.get())) ex->kernel = ExpertKernel::GROUPED;
  }
  EXPECT_LT((model->forward(tokens).detach() - before).abs().max().item<double>(), 1e-5);
}

TEST(Qwen3Moe, RouterForcedToOneExpertStillRunsTheModel) {
  Qwen3Moe model(tiny());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->layers->size(); ++i) {
      auto& layer = *model->layers->ptr<Qwen3MoeDecoderLayerImpl>(i);
      if (!layer.moe) continue;
      layer.moe->gate->weight.zero_();
      layer.moe->gate->weight[1].fill_(50);  // expert 1 takes nearly every token, others few
    }
  }
  auto tokens = torch::randint(40, {2, 6}, torch::kLong);
  auto out = model->forward(tokens, tokens, /*output_router_logits=*/true);
  ASSERT_EQ(out.router_logits.size(), 2u);  // layers 0 and 2; layer 1 is dense
  EXPECT_TRUE(out.loss.isfinite().item<bool>());
  out.loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(!p.value().grad().defined() || p.value().grad().isfinite().all().item<bool>())
        << p.key();
  }
}

TEST(Qwen3Moe, LoadBalancingLossIsSwitchTransformersFormula) {
  // Two layers' logits; the loss is E * sum_e f_e * P_e over both together.
  auto a = torch::tensor({{2.0, 0.0, 0.0}, {0.0, 3.0, 0.0}});
  auto b = torch::tensor({{0.0, 0.0, 1.0}, {1.0, 0.0, 0.0}});
  const double got = load_balancing_loss({a, b}, 3, 1).item<double>();
  auto probs = torch::cat({a.softmax(-1), b.softmax(-1)});  // (4, 3)
  auto f = torch::tensor({2.0, 1.0, 1.0}) / 4;            // argmaxes: 0, 1, 2, 0
  const double want = 3 * (f * probs.mean(0)).sum().item<double>();
  EXPECT_NEAR(got, want, 1e-6);
  // Uniform probabilities give 1 whatever the counts: E * sum_e f_e / E.
  EXPECT_NEAR(load_balancing_loss({torch::zeros({3, 3})}, 3, 1).item<double>(), 1.0, 1e-6);
}

TEST(Qwen3Moe, SparseLayersFollowStepAndMlpOnlyLayers) {
  auto cfg = tiny();
  cfg.num_hidden_layers = 6;
  cfg.decoder_sparse_step = 2;
  cfg.mlp_only_layers = {3};
  std::vector<bool> sparse;
  for (int64_t i = 0; i < 6; ++i) sparse.push_back(cfg.is_sparse_layer(i));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
  Qwen3Moe model(cfg);
  EXPECT_TRUE(model->layers->ptr<Qwen3MoeDecoderLayerImpl>(1)->moe);
  EXPECT_TRUE(model->layers->ptr<Qwen3MoeDecoderLayerImpl>(3)->dense);
  EXPECT_EQ(model->layers->ptr(0)->name(), "fsdpp::models::Qwen3MoeDecoderLayerImpl");
}

TEST(Qwen3Moe, ConfigErrorsNameTheField) {
  auto c = tiny();
  c.num_experts_per_tok = 5;
  EXPECT_NE(config_error(c).find("num_experts_per_tok=5"), std::string::npos) << config_error(c);
  c = tiny();
  c.mlp_only_layers = {3};
  EXPECT_NE(config_error(c).find("mlp_only_layers holds 3"), std::string::npos);
  c = tiny();
  c.num_key_value_heads = 3;
  EXPECT_NE(config_error(c).find("num_key_value_heads=3"), std::string::npos);
  c = tiny();
  c.head_dim = 7;
  EXPECT_NE(config_error(c).find("head_dim=7"), std::string::npos);
}

TEST(Qwen3Moe, ConverterRefusesMissingAndUnknownTensors) {
  const auto cfg = tiny();
  Qwen3Moe model(cfg);
  NamedTensors params;
  for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
  auto hf = qwen3_moe_tensors_to_hf(cfg, params);
  // Split and stacked again, every tensor comes back equal.
  auto back = qwen3_moe_tensors_from_hf(cfg, hf);
  ASSERT_EQ(back.size(), params.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].first, params[i].first);
    EXPECT_TRUE(torch::equal(back[i].second, params[i].second)) << back[i].first;
  }
  auto missing = hf;
  std::erase_if(missing, [](const auto& t) {
    return t.first == "model.layers.2.mlp.experts.3.up_proj.weight";
  });
  try {
    qwen3_moe_tensors_from_hf(cfg, missing);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.mlp.experts.3.up_proj.weight"),
              std::string::npos) << e.what();
  }
  auto extra = hf;
  extra.emplace_back("model.layers.1.mlp.experts.0.gate_proj.weight", torch::zeros({8, 16}));
  EXPECT_THROW(qwen3_moe_tensors_from_hf(cfg, extra), ConfigError);  // layer 1 is dense
  EXPECT_THROW(qwen3_moe_config_from_hf(R"({"model_type": "llama"})", "x"), ConfigError);
}

TEST(Qwen3Moe, Bfloat16RunsCloseToFloat32) {
  // Router softmax and norms in float32 inside; the routing weights and experts in bf16.
  Qwen3Moe model(tiny());
  auto tokens = torch::randint(40, {2, 8}, torch::kLong);
  auto ref = model->forward(tokens, tokens, /*output_router_logits=*/true);
  model->to(torch::kBFloat16);
  auto out = model->forward(tokens, tokens, /*output_router_logits=*/true);
  EXPECT_EQ(out.logits.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(out.loss.scalar_type(), torch::kFloat);  // cross entropy in float32 or wider
  EXPECT_NEAR(out.loss.item<double>(), ref.loss.item<double>(), 0.05);
  out.loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    ASSERT_TRUE(p.value().grad().isfinite().all().item<bool>()) << p.key();
  }
}
