// The chunked distillation objective (fsdpp/train/chunked_distill_loss.h) against the unchunked
// one (distill_loss.h, itself checked against the formulas written out), for every loss, top-k
// and temperature, at chunk sizes from 1 position to all of them; its recomputing backward
// against the unchunked gradient and central finite differences; the sparse teacher (top-K
// log-probabilities, as an offline cache stores them) against the online top-k loss.
// tests/train/distill_loss_torch.py checks it against TRL's formulas in PyTorch.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/distill/chunked_distill_loss.h"

using namespace fsdpp::distill;

namespace {

constexpr int64_t kB = 3, kT = 5, kV = 11;

torch::Tensor logits(uint64_t seed, torch::ScalarType dtype = torch::kDouble) {
  torch::manual_seed(seed);
  return (torch::randn({kB, kT, kV}, torch::kDouble) * 2.5).to(dtype);
}

torch::Tensor labels() {
  torch::manual_seed(77);
  auto l = torch::randint(0, kV, {kB, kT}, torch::kLong);
  l.index_put_({0, 1}, -100);
  l.index_put_({2, 4}, -100);
  l.index_put_({1, 0}, -100);
  return l;
}

std::vector<DistillLossOptions> all_options() {
  std::vector<DistillLossOptions> out;
  for (double T : {1.0, 2.0}) {
    for (int64_t k : {int64_t{0}, int64_t{4}}) {
      out.push_back({.type = DistillLossType::FORWARD_KL, .temperature = T, .top_k = k});
      out.push_back({.type = DistillLossType::REVERSE_KL, .temperature = T, .top_k = k});
      for (double beta : {0.0, 0.3, 1.0}) {
        out.push_back({.type = DistillLossType::GENERALIZED_JSD, .beta = beta, .temperature = T,
                       .top_k = k});
      }
    }
  }
  return out;
}

std::string describe(const DistillLossOptions& o, int64_t chunk) {
  return fmt::format("{} beta={} T={} top_k={} chunk={}", o.type, o.beta, o.temperature, o.top_k,
                     chunk);
}

struct Result {
  torch::Tensor kd, ce, loss, grad;
};

Result unchunked(const torch::Tensor& s, const torch::Tensor& t, const torch::Tensor& y,
                 const DistillLossOptions& o, double ratio) {
  auto leaf = s.clone().requires_grad_(true);
  auto p = distillation_objective(leaf, t, y, o, ratio);
  p.loss.backward();
  return {p.kd.detach(), p.ce.detach(), p.loss.detach(), leaf.grad()};
}

Result chunked(const torch::Tensor& s, const TeacherTargets& t, const torch::Tensor& y,
               const torch::Tensor& mask, const DistillLossOptions& o, double ratio,
               int64_t chunk) {
  auto leaf = s.clone().requires_grad_(true);
  auto p = chunked_distillation_objective(leaf, t, y, mask, o, ratio, chunk);
  p.loss.backward();
  return {p.kd.detach(), p.ce.detach(), p.loss.detach(), leaf.grad()};
}

}  // namespace

TEST(ChunkedDistillLoss, EqualsTheUnchunkedLossAtEveryChunkSize) {
  const auto s = logits(1), t = logits(2), y = labels();
  for (const auto& o : all_options()) {
    const auto want = unchunked(s, t, y, o, 0.4);
    for (int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{7}, kB * kT, int64_t{1000}}) {
      SCOPED_TRACE(describe(o, chunk));
      const auto got = chunked(s, {.logits = t}, y, {}, o, 0.4, chunk);
      // The KD term: the same per-position values averaged the same way, bit for bit.
      EXPECT_EQ(got.kd.item<double>(), want.kd.item<double>());
      EXPECT_NEAR(got.ce.item<double>(), want.ce.item<double>(), 1e-13);
      EXPECT_NEAR(got.loss.item<double>(), want.loss.item<double>(), 1e-13);
      EXPECT_LE((got.grad - want.grad).abs().max().item<double>(), 1e-13);
    }
  }
}

TEST(ChunkedDistillLoss, Float32WithinOneMillionthOfUnchunked) {
  const auto s = logits(3, torch::kFloat), t = logits(4, torch::kFloat), y = labels();
  for (const auto& o : all_options()) {
    SCOPED_TRACE(describe(o, 3));
    const auto want = unchunked(s, t, y, o, 0.7);
    const auto got = chunked(s, {.logits = t}, y, {}, o, 0.7, 3);
    EXPECT_EQ(got.kd.item<float>(), want.kd.item<float>());
    EXPECT_NEAR(got.loss.item<double>(), want.loss.item<double>(), 1e-6);
    EXPECT_LE((got.grad - want.grad).abs().max().item<double>(), 1e-6);
    EXPECT_EQ(got.grad.scalar_type(), torch::kFloat);
  }
}

TEST(ChunkedDistillLoss, BackwardMatchesFiniteDifferences) {
  const auto s = logits(5), t = logits(6), y = labels();
  const double h = 1e-6;
  // Each divergence once, with and without top-k and temperature (every option's gradient is
  // checked against the unchunked one above; here against no autograd at all).
  const std::vector<DistillLossOptions> options = {
      {.type = DistillLossType::FORWARD_KL, .temperature = 2.0, .top_k = 4},
      {.type = DistillLossType::REVERSE_KL, .temperature = 1.0, .top_k = 0},
      {.type = DistillLossType::GENERALIZED_JSD, .beta = 0.3, .temperature = 2.0, .top_k = 0},
      {.type = DistillLossType::GENERALIZED_JSD, .beta = 0.3, .temperature = 1.0, .top_k = 4},
  };
  for (const auto& o : options) {
    SCOPED_TRACE(describe(o, 2));
    const auto got = chunked(s, {.logits = t}, y, {}, o, 0.3, 2);
    auto flat = s.reshape({-1});
    double worst = 0;
    // Every seventh coordinate (7 is prime to the vocabulary of 11 and the 5 positions a row):
    // the gradient's whole pattern (kept, ignored, top-k and not).
    for (int64_t i = 0; i < flat.numel(); i += 7) {
      auto plus = flat.clone(), minus = flat.clone();
      plus[i] += h;
      minus[i] -= h;
      const double lp = chunked_distillation_objective(plus.view(s.sizes()), {.logits = t}, y, {},
                                                       o, 0.3, 2).loss.item<double>();
      const double lm = chunked_distillation_objective(minus.view(s.sizes()), {.logits = t}, y,
                                                       {}, o, 0.3, 2).loss.item<double>();
      worst = std::max(worst, std::abs((lp - lm) / (2 * h) - got.grad.reshape({-1})[i].item<double>()));
    }
    EXPECT_LT(worst, 1e-7);
  }
}

TEST(ChunkedDistillLoss, KdMaskSelectsTheKdPositionsAndLabelsTheCrossEntropy) {
  const auto s = logits(7), t = logits(8), y = labels();
  // KD on the last two positions of each row only (an on-policy batch's generated part).
  auto mask = torch::zeros({kB, kT}, torch::kBool);
  mask.narrow(1, kT - 2, 2).fill_(true);
  const DistillLossOptions o{.type = DistillLossType::GENERALIZED_JSD, .beta = 0.5};
  const auto got = chunked(s, {.logits = t}, y, mask, o, 0.5, 4);
  const auto d = distillation_divergence(s, t, o);
  EXPECT_NEAR(got.kd.item<double>(), d.narrow(1, kT - 2, 2).mean().item<double>(), 1e-14);
  const auto ce = distillation_objective(s, t, y, o, 0.5).ce;
  EXPECT_NEAR(got.ce.item<double>(), ce.item<double>(), 1e-13);
  // The gradient of the KD term vanishes outside the mask: with kd_ratio 1 and the mask on the
  // last positions, the first positions' gradient is 0.
  const auto kd_only = chunked(s, {.logits = t}, y, mask, o, 1.0, 4);
  EXPECT_EQ(kd_only.grad.narrow(1, 0, kT - 2).abs().max().item<double>(), 0.0);
  EXPECT_GT(kd_only.grad.narrow(1, kT - 2, 2).abs().max().item<double>(), 0.0);
}

TEST(ChunkedDistillLoss, SparseTeacherLogProbsEqualTheOnlineTopK) {
  // What an offline cache stores: the teacher's K most likely tokens and their log-probabilities
  // over the whole vocabulary at temperature 1.
  const auto s = logits(9), t = logits(10), y = labels();
  const int64_t K = 4;
  const auto logp = t.log_softmax(-1);
  const auto [values, ids] = logp.topk(K, -1);
  for (auto o : all_options()) {
    if (o.top_k == 0) continue;
    o.top_k = K;
    const auto online = unchunked(s, t, y, o, 0.5);
    auto so = o;
    so.top_k = 0;  // every stored token
    const auto offline = chunked(s, {.values = values, .ids = ids}, y, {}, so, 0.5, 3);
    SCOPED_TRACE(describe(o, 3));
    EXPECT_NEAR(offline.kd.item<double>(), online.kd.item<double>(), 1e-13);
    EXPECT_LE((offline.grad - online.grad).abs().max().item<double>(), 1e-13);
    // top_k below the stored K keeps the largest stored values.
    o.top_k = 2;
    so.top_k = 2;
    EXPECT_NEAR(chunked(s, {.values = values, .ids = ids}, y, {}, so, 0.5, 3).kd.item<double>(),
                unchunked(s, t, y, o, 0.5).kd.item<double>(), 1e-13);
  }
  // More than stored is refused, naming both.
  EXPECT_THROW(chunked_distillation_objective(s, {.values = values, .ids = ids}, y, {},
                                              {.top_k = K + 1}, 0.5),
               fsdpp::ConfigError);
}

TEST(ChunkedDistillLoss, BadInputIsRefused) {
  const auto s = logits(11), t = logits(12), y = labels();
  EXPECT_THROW(chunked_distillation_objective(s, {.logits = t.narrow(-1, 0, 5)}, y, {}, {}, 0.5),
               fsdpp::ConfigError);
  EXPECT_THROW(chunked_distillation_objective(s, {.logits = t}, y.narrow(1, 0, 2), {}, {}, 0.5),
               fsdpp::ConfigError);
  EXPECT_THROW(chunked_distillation_objective(s, {.logits = t}, y, {}, {}, 1.5),
               fsdpp::ConfigError);
  EXPECT_THROW(chunked_distillation_objective(s, {.logits = t}, y, {}, {.top_k = kV + 1}, 0.5),
               fsdpp::ConfigError);
  EXPECT_THROW(chunked_distillation_objective(s, {.logits = t}, y,
                                              torch::ones({kB, 2}, torch::kBool), {}, 0.5),
               fsdpp::ConfigError);
}

TEST(ChunkedDistillLoss, DefaultChunkHoldsSixtyFourMiBOfProbabilities) {
  EXPECT_EQ(default_chunk_positions(256), 65536);
  EXPECT_EQ(default_chunk_positions(151936), 110);
  EXPECT_EQ(default_chunk_positions(int64_t{1} << 40), 1);
}
