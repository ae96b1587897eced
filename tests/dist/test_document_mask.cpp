// Document masking across layouts (docs/training.md#packed-sequences-and-document-masking): on 2
// ranks, packed rows of several documents with positions restarting at 0 go through
// parallelize's FSDP, TP with sequence parallelism, the pipeline (every stage given its
// microbatch's positions), EP and activation checkpointing, and each document's tokens get the
// logits, and the step the loss and the gradients, of one process running every document alone
// (float32; the Qwen3-MoE's load-balancing loss over each global microbatch's tokens included).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "fsdpp/models/qwen3_moe.h"
#include "packed_reference.h"
#include "parallelize_cells.h"
#include "../unit/packed_documents.h"

using namespace fsdpp;
using namespace fsdpp::test::cells;
namespace packed = fsdpp::test::packed;

namespace {

constexpr double kTolLogits = 1e-5, kTolGrad = 1e-6;

// kMicro microbatches of kRows rows of kSeq tokens: whole rows, rows of 2 to 3 documents, and a
// document of one token (no loss token of its own).
test::PackedBatch global_batch() {
  return test::packed_batch(
      {{5, 7, 4}, {16}, {3, 3, 10}, {9, 7}, {2, 14}, {8, 8}, {1, 6, 9}, {12, 4}}, 61, 77);
}

struct Reference {
  std::map<std::pair<int64_t, int64_t>, at::Tensor> logits;  // (row, start) -> (L,V)
  double loss = 0, aux = 0;
  std::map<std::string, at::Tensor> grads;
};

// One process, every document alone: the sum of its token losses over the global batch's loss
// tokens, plus (Qwen3-MoE) router_aux_loss_coef times the load-balancing loss of each global
// microbatch's tokens (the router logits of its documents together), averaged over the
// microbatches; one backward.
Reference documents_alone(Arch a, const test::PackedBatch& b) {
  auto plan = fresh(a);
  auto& lm = *plan->causal_lm();
  const double n = (b.targets != -100).sum().item<double>();
  Reference ref;
  at::Tensor total = at::zeros({}, at::kFloat);
  const int64_t rows = b.tokens.size(0) / kMicro;
  for (int m = 0; m < kMicro; ++m) {
    std::vector<std::vector<at::Tensor>> router(0);
    test::for_each_document(b, [&](int64_t row, int64_t start, const at::Tensor& x,
                                   const at::Tensor& y) {
      if (row / rows != m) return;
      at::Tensor logits;
      if (a == Arch::kQwen3Moe) {
        auto out =
            (*models::as_qwen3_moe(lm))->forward(x, at::Tensor(), /*output_router_logits=*/true);
        logits = out.logits;
        if (router.empty()) router.resize(out.router_logits.size());
        for (size_t l = 0; l < out.router_logits.size(); ++l)
          router[l].push_back(out.router_logits[l]);
      } else {
        logits = lm.forward_features(x, false, {}).logits;
      }
      ref.logits[{row, start}] = logits[0].detach();
      total = total + lm.cross_entropy(logits, y, n);
    });
    if (a == Arch::kQwen3Moe) {
      std::vector<at::Tensor> per_layer;
      for (const auto& parts : router) per_layer.push_back(at::cat(parts));
      const auto& c = qwen3_config();
      const auto aux = models::load_balancing_loss(per_layer, c.num_experts, c.num_experts_per_tok);
      total = total + c.router_aux_loss_coef * aux / kMicro;
      ref.aux += aux.item<double>() / kMicro;
    }
  }
  total.backward();
  ref.loss = total.item<double>();
  for (const auto& p : plan->module().named_parameters()) {
    ref.grads[p.key()] =
        p.value().grad().defined() ? p.value().grad().clone() : at::zeros_like(p.value());
  }
  return ref;
}

struct Worst {
  double logits = 0, loss = 0, aux = 0, grad = 0;
  std::string where;
};

Worst run(Arch a, const Layout& l, const test::PackedBatch& b, const Reference& ref) {
  auto placed = place(a, l);
  auto& p = *placed.p;
  const auto x = packed::my_part(p, b.tokens), y = packed::my_part(p, b.targets);
  const auto pos = packed::my_part(p, b.positions);
  Worst w;
  // The logits, on the ranks of the last stage (whole under tensor parallelism).
  {
    at::NoGradGuard no_grad;
    auto logits = p.forward_stages(x, pos);
    if (logits.defined()) {
      if (auto* tp = p.model().causal_lm()->tensor_parallel()) logits = tp->whole_logits(logits);
      const auto& dp = p.mesh().group("dp");
      const int64_t per_micro = b.tokens.size(0) / kMicro, mine = per_micro / dp->size();
      for (int64_t i = 0; i < x.size(0); ++i) {
        const int64_t row = (i / mine) * per_micro + dp->rank() * mine + i % mine;
        int64_t start = 0;
        for (int64_t len : b.lengths[static_cast<size_t>(row)]) {
          const auto want = ref.logits.at({row, start});
          w.logits = std::max(w.logits,
                              (logits[i].narrow(0, start, len) - want).abs().max().item<double>());
          start += len;
        }
      }
    }
  }
  const auto step = p.forward_backward(x, y, pos);
  auto loss = torch::tensor({step.loss}, torch::kDouble);
  p.mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
  w.loss = std::abs(loss.item<double>() / p.dims().dp() - ref.loss);
  w.aux = std::abs(step.aux_loss - ref.aux);
  w.grad = packed::worst_of(packed::gathered_grads(p), ref.grads, &w.where);
  return w;
}

void run_layouts(Arch a, const std::vector<Layout>& layouts) {
  const auto b = global_batch();
  const auto ref = documents_alone(a, b);
  for (const auto& l : layouts) {
    const auto w = run(a, l, b, ref);
    if (test::world().rank() == 0) {
      std::cout << fmt::format(
          "[document mask] {:9} | {:22} | logits {:.1e} | loss {:.1e} | aux "
          "{:.1e} | grads {:.1e} ({})\n",
          name_of(a), l.name, w.logits, w.loss, w.aux, w.grad, w.where);
    }
    const std::string cell = std::string(name_of(a)) + " " + l.name;
    EXPECT_LE(w.logits, kTolLogits) << cell;
    EXPECT_LE(w.loss, kTol) << cell;
    EXPECT_LE(w.aux, kTol) << cell;
    EXPECT_LE(w.grad, kTolGrad) << cell << ": " << w.where;
  }
}

Layout sp(Layout l) {
  l.sequence_parallel = true;
  return l;
}
Layout ac(Layout l) {
  l.checkpoint_every = 1;
  return l;
}

}  // namespace

TEST(DocumentMaskLayouts, Llama) {
  ASSERT_EQ(test::world().size(), 2) << "this test needs 2 ranks";
  run_layouts(Arch::kLlama,
              {L("FSDP 2", {}), ac(L("FSDP 2, AC", {})), sp(L("TP 2, SP", {.tp = 2})),
               L("PP 2, 1F1B", {.pp = 2}),
               ac(L("PP 2, ZBH1, AC", {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "ZBH1"))});
}

TEST(DocumentMaskLayouts, Qwen3Moe) {
  ASSERT_EQ(test::world().size(), 2) << "this test needs 2 ranks";
  run_layouts(Arch::kQwen3Moe, {L("FSDP 2", {}), sp(L("TP 2, SP", {.tp = 2})),
                                L("PP 2, 1F1B", {.pp = 2}), L("EP 2", {.ep = 2})});
}
