// The distillation losses (fsdpp/train/distill_loss.h) against the formulas written out
// position by position in double precision, and their gradients against finite differences.
// tests/train/distill_loss_torch.py checks them against TRL's and torchtune's PyTorch code.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/distill/distill_loss.h"

using fsdpp::ConfigError;
using fsdpp::distill::distillation_divergence;
using fsdpp::distill::distillation_loss;
using fsdpp::distill::distillation_objective;
using fsdpp::distill::DistillLossOptions;
using fsdpp::distill::DistillLossType;

namespace {

constexpr int64_t kB = 2, kT = 3, kV = 7;

torch::Tensor logits(uint64_t seed, double scale = 2.0) {
  torch::manual_seed(seed);
  return torch::randn({kB, kT, kV}, torch::kDouble) * scale;
}

torch::Tensor labels_with_ignored() {
  // Two of the six positions ignored.
  return torch::tensor({{1, -100, 3}, {0, 6, -100}}, torch::kLong);
}

// The options every test walks through: each loss, JSD at its ends and inside, temperatures,
// the whole vocabulary and the teacher's top 3.
std::vector<DistillLossOptions> all_options() {
  std::vector<DistillLossOptions> out;
  for (double T : {1.0, 2.5}) {
    for (int64_t k : {int64_t{0}, int64_t{3}}) {
      out.push_back({.type = DistillLossType::FORWARD_KL, .temperature = T, .top_k = k});
      out.push_back({.type = DistillLossType::REVERSE_KL, .temperature = T, .top_k = k});
      for (double beta : {0.0, 0.1, 0.5, 0.9, 1.0}) {
        out.push_back({.type = DistillLossType::GENERALIZED_JSD, .beta = beta, .temperature = T,
                       .top_k = k});
      }
    }
  }
  return out;
}

std::string describe(const DistillLossOptions& o) {
  return fmt::format("{} beta={} T={} top_k={}", o.type, o.beta, o.temperature, o.top_k);
}

// Softmax of one position's logits over `keep` (indices), in plain double arithmetic.
std::vector<double> softmax_over(const std::vector<double>& z, const std::vector<int64_t>& keep) {
  double m = -INFINITY;
  for (int64_t i : keep) m = std::max(m, z[i]);
  double sum = 0;
  for (int64_t i : keep) sum += std::exp(z[i] - m);
  std::vector<double> p;
  for (int64_t i : keep) p.push_back(std::exp(z[i] - m) / sum);
  return p;
}

double kl(const std::vector<double>& p, const std::vector<double>& q) {
  double d = 0;
  for (size_t i = 0; i < p.size(); ++i) d += p[i] * std::log(p[i] / q[i]);
  return d;
}

// The loss written out: per position, the teacher's top-k (by value) or every index, the two
// softmaxes at temperature T, the divergence, times T^2; the mean over kept positions.
double reference_loss(const torch::Tensor& s, const torch::Tensor& t, const torch::Tensor& labels,
                      const DistillLossOptions& o) {
  auto sa = s.accessor<double, 3>();
  auto ta = t.accessor<double, 3>();
  auto la = labels.accessor<int64_t, 2>();
  const double T = o.temperature;
  double sum = 0;
  int kept = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t p = 0; p < kT; ++p) {
      if (la[b][p] == -100) continue;
      std::vector<double> zs(kV), zt(kV);
      for (int64_t v = 0; v < kV; ++v) zs[v] = sa[b][p][v] / T, zt[v] = ta[b][p][v] / T;
      std::vector<int64_t> keep(kV);
      for (int64_t v = 0; v < kV; ++v) keep[v] = v;
      if (o.top_k > 0) {
        std::sort(keep.begin(), keep.end(), [&](int64_t a, int64_t c) { return zt[a] > zt[c]; });
        keep.resize(o.top_k);
      }
      const auto ps = softmax_over(zs, keep), pt = softmax_over(zt, keep);
      double d = 0;
      const bool jsd = o.type == DistillLossType::GENERALIZED_JSD;
      if (o.type == DistillLossType::FORWARD_KL || (jsd && o.beta == 0)) {
        d = kl(pt, ps);
      } else if (o.type == DistillLossType::REVERSE_KL || (jsd && o.beta == 1)) {
        d = kl(ps, pt);
      } else {
        std::vector<double> m(ps.size());
        for (size_t i = 0; i < m.size(); ++i) m[i] = o.beta * pt[i] + (1 - o.beta) * ps[i];
        d = o.beta * kl(pt, m) + (1 - o.beta) * kl(ps, m);
      }
      sum += T * T * d;
      ++kept;
    }
  }
  return kept ? sum / kept : 0.0;
}

}  // namespace

TEST(DistillLoss, MatchesTheFormulasWrittenOut) {
  const auto s = logits(1), t = logits(2), labels = labels_with_ignored();
  for (const auto& o : all_options()) {
    SCOPED_TRACE(describe(o));
    const double got = distillation_loss(s, t, labels, o).item<double>();
    EXPECT_NEAR(got, reference_loss(s, t, labels, o), 1e-12);
    EXPECT_GT(got, 0);
  }
}

TEST(DistillLoss, IdenticalLogitsGiveZero) {
  const auto s = logits(3), labels = labels_with_ignored();
  for (const auto& o : all_options()) {
    SCOPED_TRACE(describe(o));
    EXPECT_NEAR(distillation_loss(s, s.clone(), labels, o).item<double>(), 0.0, 1e-14);
  }
  // In float32 too.
  const auto f = s.to(torch::kFloat);
  EXPECT_NEAR(distillation_loss(f, f.clone(), labels, {}).item<double>(), 0.0, 1e-7);
}

TEST(DistillLoss, JsdAtBetaZeroAndOneIsForwardAndReverseKl) {
  const auto s = logits(4), t = logits(5), labels = labels_with_ignored();
  for (double T : {1.0, 3.0}) {
    const auto fkl =
        distillation_loss(s, t, labels, {.type = DistillLossType::FORWARD_KL, .temperature = T});
    const auto rkl =
        distillation_loss(s, t, labels, {.type = DistillLossType::REVERSE_KL, .temperature = T});
    const auto j0 = distillation_loss(
        s, t, labels, {.type = DistillLossType::GENERALIZED_JSD, .beta = 0, .temperature = T});
    const auto j1 = distillation_loss(
        s, t, labels, {.type = DistillLossType::GENERALIZED_JSD, .beta = 1, .temperature = T});
    EXPECT_EQ(j0.item<double>(), fkl.item<double>());
    EXPECT_EQ(j1.item<double>(), rkl.item<double>());
    EXPECT_NE(fkl.item<double>(), rkl.item<double>());  // KL is not symmetric
  }
  // Inside (0, 1) the mixture's divergence is bounded by the entropy bound of JSD: at beta 0.5
  // it is the symmetric Jensen-Shannon divergence, at most log 2 per position.
  const auto jsd = distillation_divergence(
      s * 50, t * 50, {.type = DistillLossType::GENERALIZED_JSD, .beta = 0.5});
  EXPECT_LE(jsd.max().item<double>(), std::log(2.0) + 1e-12);
}

TEST(DistillLoss, TemperatureDividesTheLogitsAndScalesByItsSquare) {
  const auto s = logits(6), t = logits(7), labels = labels_with_ignored();
  for (const auto type : {DistillLossType::FORWARD_KL, DistillLossType::REVERSE_KL,
                          DistillLossType::GENERALIZED_JSD}) {
    const double T = 4.0;
    const auto at_T = distillation_loss(s, t, labels, {.type = type, .temperature = T});
    const auto at_1 = distillation_loss(s / T, t / T, labels, {.type = type, .temperature = 1.0});
    EXPECT_NEAR(at_T.item<double>(), T * T * at_1.item<double>(), 1e-12);
  }
}

TEST(DistillLoss, TopKRenormalisesOverTheTeachersMostLikelyTokens) {
  const auto s = logits(8), t = logits(9), labels = labels_with_ignored();
  // k = V is the whole vocabulary; k = 1 leaves one token on each side: nothing to match.
  EXPECT_NEAR(distillation_loss(s, t, labels, {.top_k = kV}).item<double>(),
              distillation_loss(s, t, labels, {}).item<double>(), 1e-12);
  EXPECT_NEAR(distillation_loss(s, t, labels, {.top_k = 1}).item<double>(), 0.0, 1e-14);
  // Only the teacher's top tokens matter: the student's other logits change nothing.
  const auto idx = std::get<1>(t.topk(3, -1));
  auto other = torch::ones_like(s, torch::kBool).scatter_(-1, idx, false);
  const auto s2 = s.masked_fill(other, 123.0);
  EXPECT_NEAR(distillation_loss(s2, t, labels, {.top_k = 3}).item<double>(),
              distillation_loss(s, t, labels, {.top_k = 3}).item<double>(), 1e-12);
}

TEST(DistillLoss, IgnoredPositionsAreLeftOutOfTheMean) {
  const auto s = logits(10), t = logits(11), labels = labels_with_ignored();
  // Changing the logits at ignored positions changes nothing.
  auto s2 = s.clone();
  s2.index_put_({0, 1}, 50.0);
  s2.index_put_({1, 2}, -50.0);
  EXPECT_EQ(distillation_loss(s2, t, labels, {}).item<double>(),
            distillation_loss(s, t, labels, {}).item<double>());
  // The mean over the 4 kept positions.
  const auto d = distillation_divergence(s, t, {});
  const double mean4 = (d[0][0] + d[0][2] + d[1][0] + d[1][1]).item<double>() / 4;
  EXPECT_NEAR(distillation_loss(s, t, labels, {}).item<double>(), mean4, 1e-12);
  // Every position ignored: 0, and a zero (not NaN) gradient.
  auto leaf = s.clone().requires_grad_(true);
  auto none = torch::full({kB, kT}, -100, torch::kLong);
  auto loss = distillation_loss(leaf, t, none, {});
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(leaf.grad().abs().max().item<double>(), 0.0);
  // Another ignore_index.
  auto labels7 = labels.masked_fill(labels == -100, 7);
  EXPECT_EQ(distillation_loss(s, t, labels7, {.ignore_index = 7}).item<double>(),
            distillation_loss(s, t, labels, {}).item<double>());
}

TEST(DistillLoss, GradientsMatchFiniteDifferencesAndSpareTheTeacher) {
  const auto s0 = logits(12), t0 = logits(13), labels = labels_with_ignored();
  constexpr double kH = 1e-6;
  for (const auto& o : all_options()) {
    SCOPED_TRACE(describe(o));
    auto s = s0.clone().requires_grad_(true);
    auto t = t0.clone().requires_grad_(true);
    distillation_loss(s, t, labels, o).backward();
    EXPECT_FALSE(t.grad().defined()) << "the teacher's logits got a gradient";
    const auto grad = s.grad();
    auto flat = s0.clone().view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double x = flat[i].item<double>();
      flat[i] = x + kH;
      const double up = distillation_loss(flat.view({kB, kT, kV}), t0, labels, o).item<double>();
      flat[i] = x - kH;
      const double down = distillation_loss(flat.view({kB, kT, kV}), t0, labels, o).item<double>();
      flat[i] = x;
      ASSERT_NEAR(grad.view({-1})[i].item<double>(), (up - down) / (2 * kH), 1e-7)
          << "element " << i;
    }
  }
}

TEST(DistillLoss, ObjectiveMixesCrossEntropyAndDistillation) {
  const auto s = logits(14), t = logits(15), labels = labels_with_ignored();
  const DistillLossOptions o{.type = DistillLossType::REVERSE_KL, .temperature = 2.0};
  const auto ce = torch::nn::functional::cross_entropy(
      s.view({-1, kV}), labels.view({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  const auto kd = distillation_loss(s, t, labels, o);
  for (double r : {0.0, 0.25, 0.5, 1.0}) {
    const auto parts = distillation_objective(s, t, labels, o, r);
    EXPECT_NEAR(parts.ce.item<double>(), ce.item<double>(), 1e-12);
    EXPECT_EQ(parts.kd.item<double>(), kd.item<double>());
    EXPECT_NEAR(parts.loss.item<double>(), (1 - r) * ce.item<double>() + r * kd.item<double>(),
                1e-12);
  }
  // Every label ignored: 0 rather than cross_entropy's NaN.
  const auto none = torch::full({kB, kT}, -100, torch::kLong);
  EXPECT_EQ(distillation_objective(s, t, none, o, 0.5).loss.item<double>(), 0.0);
}

TEST(DistillLoss, Bf16LogitsAreComputedInFloat) {
  const auto s = logits(16).to(torch::kBFloat16), t = logits(17).to(torch::kBFloat16);
  const auto labels = labels_with_ignored();
  const auto low = distillation_loss(s, t, labels, {.type = DistillLossType::GENERALIZED_JSD});
  EXPECT_EQ(low.scalar_type(), torch::kFloat);
  const auto ref = distillation_loss(s.to(torch::kDouble), t.to(torch::kDouble), labels,
                                     {.type = DistillLossType::GENERALIZED_JSD});
  EXPECT_NEAR(low.item<double>(), ref.item<double>(), 1e-6);
}

TEST(DistillLoss, RefusesWhatCannotBeComputed) {
  const auto s = logits(18), t = logits(19), labels = labels_with_ignored();
  auto message = [&](const DistillLossOptions& o) -> std::string {
    try {
      distillation_loss(s, t, labels, o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({.beta = 1.5}).find("[distill] beta=1.5: expected a number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(message({.temperature = 0}).find("[distill] temperature=0"), std::string::npos);
  EXPECT_NE(message({.top_k = 8}).find("top_k=8 is larger than the vocabulary (7 tokens)"),
            std::string::npos);
  EXPECT_THROW(distillation_loss(s, t.narrow(2, 0, 5), labels, {}), ConfigError);
  EXPECT_THROW(distillation_loss(s, t, labels.narrow(1, 0, 2), {}), ConfigError);
  EXPECT_THROW(distillation_objective(s, t, labels, {}, 1.5), ConfigError);
  // The names as a config reads them.
  EXPECT_EQ(fsdpp::config::Choice<DistillLossType>("generalized_jsd"),
            DistillLossType::GENERALIZED_JSD);
  EXPECT_THROW(fsdpp::config::Choice<DistillLossType>("kl"), ConfigError);
}
