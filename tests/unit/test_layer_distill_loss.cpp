// The intermediate-layer distillation loss (fsdpp/train/layer_distill_loss.h) against its
// formulas written out position by position in plain loops (cosine: 1 - <s, t> / (|s| |t|);
// MSE: the mean of squared differences over the features), averaged over the kept positions
// and then over the pairs; its gradient against central finite differences; the teacher's
// states a constant; bad shapes refused.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/train/layer_distill_loss.h"

using namespace fsdpp::train;

namespace {

constexpr int64_t kB = 2, kT = 4, kD = 6;

torch::Tensor states(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({kB, kT, kD}, torch::kDouble);
}

torch::Tensor mask() {
  auto m = torch::ones({kB, kT}, torch::kBool);
  m.index_put_({0, 1}, false);
  m.index_put_({1, 3}, false);
  return m;
}

// The loss of one pair, written out.
double pair_by_hand(const torch::Tensor& s, const torch::Tensor& t, const torch::Tensor& keep,
                    LayerLossType type) {
  const auto S = s.accessor<double, 3>(), Tt = t.accessor<double, 3>();
  const auto K = keep.accessor<bool, 2>();
  double sum = 0;
  int kept = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t p = 0; p < kT; ++p) {
      if (!K[b][p]) continue;
      ++kept;
      double dot = 0, ns = 0, nt = 0, sq = 0;
      for (int64_t d = 0; d < kD; ++d) {
        dot += S[b][p][d] * Tt[b][p][d];
        ns += S[b][p][d] * S[b][p][d];
        nt += Tt[b][p][d] * Tt[b][p][d];
        sq += (S[b][p][d] - Tt[b][p][d]) * (S[b][p][d] - Tt[b][p][d]);
      }
      sum += type == LayerLossType::COSINE ? 1 - dot / (std::sqrt(ns) * std::sqrt(nt))
                                           : sq / static_cast<double>(kD);
    }
  }
  return sum / kept;
}

}  // namespace

TEST(LayerDistillLoss, EqualsTheFormulasWrittenOut) {
  const std::vector<torch::Tensor> s = {states(1), states(2)}, t = {states(3), states(4)};
  for (auto type : {LayerLossType::COSINE, LayerLossType::MSE}) {
    const double want =
        (pair_by_hand(s[0], t[0], mask(), type) + pair_by_hand(s[1], t[1], mask(), type)) / 2;
    const double got = layer_distillation_loss(s, t, mask(), type).item<double>();
    EXPECT_NEAR(got, want, 1e-12) << (type == LayerLossType::COSINE ? "cosine" : "mse");
  }
  // The same states: 0 for both.
  EXPECT_NEAR(layer_distillation_loss(s, s, mask(), LayerLossType::COSINE).item<double>(), 0, 1e-12);
  EXPECT_EQ(layer_distillation_loss(s, s, mask(), LayerLossType::MSE).item<double>(), 0);
}

TEST(LayerDistillLoss, GradientMatchesFiniteDifferencesAndTheTeacherIsConstant) {
  for (auto type : {LayerLossType::COSINE, LayerLossType::MSE}) {
    auto s = states(5).requires_grad_(true);
    auto t = states(6).requires_grad_(true);
    layer_distillation_loss({s}, {t}, mask(), type).backward();
    EXPECT_FALSE(t.grad().defined());  // the teacher's states are detached
    const auto g = s.grad();
    const double eps = 1e-6;
    auto base = states(5);
    for (int64_t i = 0; i < base.numel(); i += 5) {
      auto plus = base.clone(), minus = base.clone();
      plus.view({-1})[i] += eps;
      minus.view({-1})[i] -= eps;
      const double fd = (pair_by_hand(plus, t.detach(), mask(), type) -
                         pair_by_hand(minus, t.detach(), mask(), type)) / (2 * eps);
      EXPECT_NEAR(g.view({-1})[i].item<double>(), fd, 1e-7) << "element " << i;
    }
    // Positions outside the mask get no gradient.
    EXPECT_EQ(g.index({0, 1}).abs().sum().item<double>(), 0);
  }
}

TEST(LayerDistillLoss, BadShapesAreRefused) {
  const auto s = states(1);
  EXPECT_THROW(layer_distillation_loss({}, {}, mask(), LayerLossType::MSE), fsdpp::ConfigError);
  EXPECT_THROW(layer_distillation_loss({s}, {s, s}, mask(), LayerLossType::MSE), fsdpp::ConfigError);
  EXPECT_THROW(layer_distillation_loss({s}, {s.narrow(2, 0, 3)}, mask(), LayerLossType::COSINE),
               fsdpp::ConfigError);
}
