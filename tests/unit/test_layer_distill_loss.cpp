// The intermediate-layer distillation loss (fsdpp/train/layer_distill_loss.h) against its
// formulas written out position by position in plain loops (cosine: 1 - <s, t> / (|s| |t|);
// MSE: the mean of squared differences over the features), averaged over the kept positions
// and then over the pairs; its gradient against central finite differences; the teacher's
// states a constant; bad shapes refused. With a learned projection (distillation.layer_projection,
// a student 3 wide mapped to a teacher 6 wide): the loss equals the map h_s W^T written out as
// sums followed by the formulas, and its gradients with respect to W and to the student's states
// match central finite differences of that written-out loss (float64).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/distill/layer_distill_loss.h"

using namespace fsdpp::distill;

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
  const int64_t D = s.size(2);
  double sum = 0;
  int kept = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t p = 0; p < kT; ++p) {
      if (!K[b][p]) continue;
      ++kept;
      double dot = 0, ns = 0, nt = 0, sq = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += S[b][p][d] * Tt[b][p][d];
        ns += S[b][p][d] * S[b][p][d];
        nt += Tt[b][p][d] * Tt[b][p][d];
        sq += (S[b][p][d] - Tt[b][p][d]) * (S[b][p][d] - Tt[b][p][d]);
      }
      sum += type == LayerLossType::COSINE ? 1 - dot / (std::sqrt(ns) * std::sqrt(nt))
                                           : sq / static_cast<double>(D);
    }
  }
  return sum / kept;
}

// h_s W^T, written out: out[b][p][i] = sum_j s[b][p][j] W[i][j].
torch::Tensor project_by_hand(const torch::Tensor& s, const torch::Tensor& w) {
  auto out = torch::zeros({kB, kT, w.size(0)}, torch::kDouble);
  const auto S = s.accessor<double, 3>();
  const auto W = w.accessor<double, 2>();
  auto O = out.accessor<double, 3>();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t p = 0; p < kT; ++p) {
      for (int64_t i = 0; i < w.size(0); ++i) {
        for (int64_t j = 0; j < w.size(1); ++j) O[b][p][i] += S[b][p][j] * W[i][j];
      }
    }
  }
  return out;
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

TEST(LayerDistillLoss, ProjectionMatchesTheMapWrittenOutAndFiniteDifferences) {
  constexpr int64_t kStudent = 3;
  for (auto type : {LayerLossType::COSINE, LayerLossType::MSE}) {
    torch::manual_seed(11);
    const auto s0 = torch::randn({kB, kT, kStudent}, torch::kDouble);
    const auto w0 = torch::randn({kD, kStudent}, torch::kDouble);
    const auto t = states(12);
    const auto hand = [&](const torch::Tensor& s, const torch::Tensor& w) {
      return pair_by_hand(project_by_hand(s, w), t, mask(), type);
    };
    auto s = s0.clone().requires_grad_(true);
    auto w = w0.clone().requires_grad_(true);
    const auto loss = layer_distillation_loss({s}, {t}, mask(), type, {w});
    EXPECT_NEAR(loss.item<double>(), hand(s0, w0), 1e-12);
    loss.backward();
    // Every element of `base` moved by +-eps in `loss_at`, against `grad`.
    double worst = 0;
    const auto check = [&](const torch::Tensor& base, const torch::Tensor& grad, auto loss_at,
                           const char* what) {
      const double eps = 1e-6;
      for (int64_t i = 0; i < base.numel(); ++i) {
        auto plus = base.clone(), minus = base.clone();
        plus.view({-1})[i] += eps;
        minus.view({-1})[i] -= eps;
        const double fd = (loss_at(plus) - loss_at(minus)) / (2 * eps);
        const double got = grad.view({-1})[i].item<double>();
        worst = std::max(worst, std::abs(got - fd));
        EXPECT_NEAR(got, fd, 1e-7) << what << " element " << i;
      }
    };
    check(w0, w.grad(), [&](const torch::Tensor& x) { return hand(s0, x); }, "W");
    check(s0, s.grad(), [&](const torch::Tensor& x) { return hand(x, w0); }, "state");
    EXPECT_GT(w.grad().abs().sum().item<double>(), 0);
    std::printf("%s: projected loss %.6f, worst |autograd - finite difference| %.2e\n",
                type == LayerLossType::COSINE ? "cosine" : "mse", loss.item<double>(), worst);
  }
  // A projection of the wrong shape, or one for some pairs only, is refused.
  const auto s = torch::randn({kB, kT, kStudent}, torch::kDouble);
  EXPECT_THROW(layer_distillation_loss({s}, {states(1)}, mask(), LayerLossType::MSE,
                                       {torch::randn({kStudent, kD}, torch::kDouble)}),
               fsdpp::ConfigError);
  EXPECT_THROW(layer_distillation_loss({s, s}, {states(1), states(2)}, mask(), LayerLossType::MSE,
                                       {torch::randn({kD, kStudent}, torch::kDouble)}),
               fsdpp::ConfigError);
}
