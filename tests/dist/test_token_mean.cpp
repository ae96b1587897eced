// The loss as the mean over every loss-bearing token of the global batch
// (docs/training.md#the-loss-the-global-token-mean): 2 ranks x 2 microbatches whose rows carry
// very different numbers of loss tokens (targets -100 elsewhere; one microbatch part with none at
// all) train 4 steps (AdamW, clipping) under FSDP 2, TP 2 and PP 2 and give the loss, the
// gradient norm and the parameters of one process computing sum(token losses) / N over the whole
// batch, for the Llama and the Qwen3-MoE (whose load-balancing loss keeps its definition: the
// mean over the microbatches of each global microbatch's loss, times router_aux_loss_coef). The
// mean of per-microbatch means, which the step used to take, differs from it by more than a
// hundred times the tolerance on these batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "packed_reference.h"
#include "parallelize_cells.h"

using namespace fsdpp;
using namespace fsdpp::test::cells;
namespace packed = fsdpp::test::packed;

namespace {

constexpr int kTokenSteps = 4;

// Step s's global batch: kMicro x kRows rows of kSeq tokens, row r keeping a fraction of its
// targets that depends on r and s (so every rank and microbatch has its own count); in step 0
// the second data-parallel rank's part of microbatch 1 (its rows 6 and 7) keeps none.
std::pair<at::Tensor, at::Tensor> global_batch(int s) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(500 + s);
  const int64_t rows = kMicro * kRows;
  auto t = torch::randint(0, 61, {rows, kSeq + 1}, g);
  auto y = t.narrow(1, 1, kSeq).clone();
  for (int64_t r = 0; r < rows; ++r) {
    const double keep =
        (s == 0 && r >= 6) ? 0.0 : 0.1 + 0.9 * static_cast<double>((r * 3 + s) % 8) / 7;
    const auto drop = torch::rand({kSeq}, g) >= keep;
    y[r].masked_fill_(drop, -100);
  }
  return {t.narrow(1, 0, kSeq).contiguous(), y};
}

struct Reference {
  std::vector<double> losses, norms, old_losses;
  std::map<std::string, at::Tensor> params;
};

// One process over the whole batch: each microbatch's token losses summed over the global
// count N (and its load-balancing term over the microbatches), one backward per microbatch.
Reference whole_batch_reference(Arch a) {
  auto plan = fresh(a);
  auto& lm = *plan->causal_lm();
  auto params = plan->module().parameters();
  auto opt = adamw(params);
  const double coef = plan->aux_loss_coef();
  Reference ref;
  for (int s = 0; s < kTokenSteps; ++s) {
    const auto [x, y] = global_batch(s);
    const double n = (y != -100).sum().item<double>();
    double loss = 0, old = 0;
    for (int m = 0; m < kMicro; ++m) {
      const auto xm = x.narrow(0, m * kRows, kRows), ym = y.narrow(0, m * kRows, kRows);
      auto out = lm.forward_features(xm, /*aux_loss=*/true, {});
      auto part = lm.cross_entropy(out.logits, ym, n);
      if (out.aux_loss.defined()) part = part + coef * out.aux_loss / kMicro;
      part.backward();
      loss += part.item<double>();
      at::NoGradGuard no_grad;
      old += lm.cross_entropy(out.logits, ym).item<double>() / kMicro;
      if (out.aux_loss.defined()) old += coef * out.aux_loss.item<double>() / kMicro;
    }
    ref.losses.push_back(loss);
    ref.old_losses.push_back(old);
    ref.norms.push_back(torch::nn::utils::clip_grad_norm_(params, kMaxNorm));
    opt.step();
    opt.zero_grad();
  }
  for (const auto& p : plan->module().named_parameters())
    ref.params[p.key()] = p.value().detach().clone();
  return ref;
}

void run_layouts(Arch a, const std::vector<Layout>& layouts) {
  const auto ref = whole_batch_reference(a);
  double gap = 0;  // how far the old mean of means is from the token mean
  for (int s = 0; s < kTokenSteps; ++s)
    gap = std::max(gap, std::abs(ref.old_losses[s] - ref.losses[s]));
  // An untrained model's token losses are all near log(vocab), so the two means are close; still
  // a hundred times the tolerance apart.
  EXPECT_GT(gap, 100 * kTol) << name_of(a) << ": the batches do not tell the two means apart";
  for (const auto& l : layouts) {
    auto placed = place(a, l);
    auto& p = *placed.p;
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < kTokenSteps; ++s) {
      const auto [x, y] = global_batch(s);
      const auto step = p.forward_backward(packed::my_part(p, x), packed::my_part(p, y));
      const double norm = p.clip_grad_norm_(kMaxNorm);
      placed.opt->step();
      placed.opt->zero_grad();
      auto loss = torch::tensor({step.loss}, torch::kDouble);
      p.mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
      worst_loss =
          std::max(worst_loss, std::abs(loss.item<double>() / p.dims().dp() - ref.losses[s]));
      worst_norm = std::max(worst_norm, std::abs(norm / ref.norms[s] - 1));
      if (p.mesh().group("pp")->rank() == p.last_stage_rank()) {
        EXPECT_EQ(step.loss_tokens, (y != -100).sum().item<int64_t>()) << l.name;
      }
    }
    std::string where;
    const double worst_param = packed::worst_of(packed::gathered_params(p), ref.params, &where);
    if (test::world().rank() == 0) {
      std::cout << fmt::format(
          "[token mean] {:9} | {:8} | loss {:.1e} | grad norm {:.1e} | params "
          "{:.1e} | mean of means off by {:.1e}\n",
          name_of(a), l.name, worst_loss, worst_norm, worst_param, gap);
    }
    EXPECT_LE(worst_loss, kTol) << name_of(a) << " " << l.name;
    EXPECT_LE(worst_norm, kTol) << name_of(a) << " " << l.name;
    EXPECT_LE(worst_param, kTol) << name_of(a) << " " << l.name << ": " << where;
  }
}

}  // namespace

TEST(TokenMean, Llama) {
  ASSERT_EQ(test::world().size(), 2) << "this test needs 2 ranks";
  run_layouts(Arch::kLlama, {L("FSDP 2", {}), L("TP 2", {.tp = 2}), L("PP 2", {.pp = 2})});
}

TEST(TokenMean, Qwen3Moe) {
  ASSERT_EQ(test::world().size(), 2) << "this test needs 2 ranks";
  run_layouts(Arch::kQwen3Moe, {L("FSDP 2", {}), L("TP 2", {.tp = 2}), L("PP 2", {.pp = 2})});
}
