// distill::vocab_parallel_distillation_{divergence,loss} against distill_loss.h's losses of the
// gathered logits on one process: every rank of the world is one tensor-parallel rank, holds
// its columns of the same (positions, vocabulary) logits, and compares the loss (the same on
// every rank) and its columns' gradient with the unsharded computation run here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/tp/regions.h"
#include "fsdpp/distill/distill_loss.h"
#include "fsdpp/distill/vocab_parallel_distill_loss.h"
#include "world_fixture.h"

using namespace fsdpp;
using distill::DistillLossOptions;
using distill::DistillLossType;

namespace {

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The spread of a scalar over the group: 0 when every rank got the same value.
double spread(const at::Tensor& scalar) {
  auto hi = scalar.detach().to(at::kDouble).reshape({1}).clone();
  auto lo = -hi;
  test::world().group()->all_reduce(hi, dist::ReduceOp::MAX);
  test::world().group()->all_reduce(lo, dist::ReduceOp::MAX);
  return (hi + lo).item<double>();
}

struct Case {
  std::string name;
  DistillLossOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (double T : {1.0, 2.0}) {
    for (int64_t k : {0, 5}) {
      auto o = [&](DistillLossType type, double beta) {
        return DistillLossOptions{.type = type, .beta = beta, .temperature = T, .top_k = k};
      };
      const std::string at = " T=" + std::to_string(T) + " top_k=" + std::to_string(k);
      out.push_back({"forward_kl" + at, o(DistillLossType::FORWARD_KL, 0.5)});
      out.push_back({"reverse_kl" + at, o(DistillLossType::REVERSE_KL, 0.5)});
      for (double beta : {0.0, 0.3, 1.0}) {
        out.push_back({"generalized_jsd beta=" + std::to_string(beta) + at,
                       o(DistillLossType::GENERALIZED_JSD, beta)});
      }
    }
  }
  return out;
}

// (B, T, V) logits, labels with ignored positions; every case's loss and gradient.
void check_vocab(int64_t vocab) {
  auto g = test::world().group();
  const int64_t B = 3, T = 8;
  const auto student = torch::randn({B, T, vocab}, gen(11)) * 3;
  const auto teacher = torch::randn({B, T, vocab}, gen(12)) * 3;
  auto labels = torch::randint(0, vocab, {B, T}, gen(13));
  labels.index_put_({0, torch::indexing::Slice(0, 3)}, -100);
  const auto r = tp::shard_range(vocab, g->size(), g->rank());
  for (const auto& c : cases()) {
    auto full = student.clone().requires_grad_();
    auto ref = distill::distillation_loss(full, teacher, labels, c.options);
    ref.backward();
    auto local = student.narrow(2, r.offset, r.size).clone().requires_grad_();
    auto loss = distill::vocab_parallel_distillation_loss(
        local, teacher.narrow(2, r.offset, r.size), labels, c.options, g);
    loss.backward();
    EXPECT_LT(std::abs(loss.item<double>() - ref.item<double>()), 1e-6)
        << c.name << " vocab " << vocab << ": " << loss.item<double>() << " vs " << ref.item<double>();
    EXPECT_GT(ref.item<double>(), 1e-3) << c.name;  // a real divergence, not 0 == 0
    EXPECT_LT(max_diff(local.grad(), full.grad().narrow(2, r.offset, r.size)), 1e-7)
        << c.name << " vocab " << vocab;
    EXPECT_EQ(spread(loss), 0.0) << c.name;
  }
}

}  // namespace

TEST(TensorParallel, VocabParallelDistillationEqualsGathered) {
  check_vocab(32);
  check_vocab(29);  // uneven shards; with 4 ranks, a rank holds fewer columns (7) than... top_k 5 fits
  check_vocab(6);   // a rank holds fewer columns than top_k (5): padded candidates
}

TEST(TensorParallel, VocabParallelDistillationPerPositionAndBf16) {
  auto g = test::world().group();
  const int64_t V = 29;
  const auto r = tp::shard_range(V, g->size(), g->rank());
  const DistillLossOptions o{.type = DistillLossType::GENERALIZED_JSD, .beta = 0.5, .temperature = 1.5};
  // Per position, as distillation_divergence.
  const auto s = torch::randn({5, V}, gen(21)) * 2, t = torch::randn({5, V}, gen(22)) * 2;
  const auto ref = distill::distillation_divergence(s, t, o);
  const auto got = distill::vocab_parallel_distillation_divergence(
      s.narrow(1, r.offset, r.size), t.narrow(1, r.offset, r.size), o, g);
  EXPECT_LT(max_diff(got, ref), 1e-6);
  // bf16 logits: computed in float32, the gradient back in bf16.
  const auto sb = s.to(at::kBFloat16), tb = t.to(at::kBFloat16);
  auto full = sb.clone().requires_grad_();
  auto whole = distill::distillation_divergence(full, tb, o).sum();
  whole.backward();
  auto local = sb.narrow(1, r.offset, r.size).clone().requires_grad_();
  auto part = distill::vocab_parallel_distillation_divergence(local, tb.narrow(1, r.offset, r.size), o, g).sum();
  part.backward();
  EXPECT_EQ(local.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(std::abs(part.item<double>() - whole.item<double>()), 1e-5);
  EXPECT_LT(max_diff(local.grad(), full.grad().narrow(1, r.offset, r.size)), 1e-2);
}

TEST(TensorParallel, VocabParallelDistillationRefusals) {
  auto g = test::world().group();
  const auto x = torch::randn({4, 3});
  const auto msg = [&](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const int64_t v = 3 * g->size();
  auto e = msg([&] { (void)distill::vocab_parallel_distillation_divergence(x, x, {.top_k = v + 1}, g); });
  EXPECT_NE(e.find("top_k=" + std::to_string(v + 1) + " is larger than the vocabulary (" +
                   std::to_string(v) + " tokens)"), std::string::npos) << e;
  e = msg([&] { (void)distill::vocab_parallel_distillation_divergence(x, torch::randn({4, 2}), {}, g); });
  EXPECT_NE(e.find("differ in shape"), std::string::npos) << e;
  e = msg([&] { (void)distill::vocab_parallel_distillation_divergence(x, x, {.temperature = 0}, g); });
  EXPECT_NE(e.find("temperature=0"), std::string::npos) << e;
}
