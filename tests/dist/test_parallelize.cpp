// The layout matrix of fsdpp::parallel::parallelize (docs/parallelize.md#tested-layouts): for
// the Llama and Qwen3-MoE, every combination of pipeline, data (FSDP, HSDP), tensor (+sequence)
// and expert parallelism that the world sizes of the test reach, each trained 6 steps with
// clipping and AdamW and equal to one process within 1e-5: the loss and the gradient norm of
// every step, and every parameter after the last (read from a FULL save of the layout). Then a
// checkpoint saved SHARDED by each layout loads into others and into one process bit for bit
// (a FULL save of what was loaded holds exactly the source's FULL save: parameters and AdamW
// state), and the combinations that stay refused are errors that say why.
//
// The cells of 4 ranks run in ParallelizeMatrix.* (dist.parallelize.np4) and of 2 in
// ParallelizeMatrix2.* (dist.parallelize.np2); more of 4 in ParallelizeMatrixSlow.* and those of 8
// in ParallelizeMatrix8.* (dist.parallelize_slow.np4 and .np8, label slow).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>

#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "parallelize_cells.h"

using namespace fsdpp;
using namespace fsdpp::test::cells;
namespace fs = std::filesystem;
using SS = ShardingStrategy;

namespace {

fs::path scratch(const std::string& what) { return test::scratch_dir("fsdpp_parallelize", what); }

// Runs every cell of `layouts`, prints the matrix row by row (model x layout -> worst
// differences) and checks each cell; the parameters come from a FULL save of the layout.
void run_cells(Arch a, const std::vector<Layout>& layouts, const std::string& tag) {
  auto& w = test::world();
  int index = 0;
  for (const auto& l : layouts) {
    const auto t0 = std::chrono::steady_clock::now();
    auto placed = place(a, l);
    auto worst = train(a, placed);
    const auto full = scratch(fmt::format("{}_{}_full", tag, index));
    state::save_state_dict(full, placed.p->roots(), placed.opt.get(), w.group(),
                           save_options(state::StateDictType::FULL));
    if (w.rank() == 0) {
      worst.param = worst_param(a, full, &worst.where);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cout << fmt::format("[matrix] {:9} | {:44} | loss {:.1e} | grad norm {:.1e} | params "
                               "{:.1e} | aux {:.1e} | {:.1f} s\n",
                               name_of(a), l.name, worst.loss, worst.norm, worst.param, worst.aux,
                               secs);
    }
    EXPECT_LE(worst.loss, kTol) << name_of(a) << " " << l.name << ": loss";
    EXPECT_LE(worst.norm, kTol) << name_of(a) << " " << l.name << ": gradient norm (relative)";
    EXPECT_LE(worst.aux, kTol) << name_of(a) << " " << l.name << ": load-balancing loss";
    if (w.rank() == 0) {
      EXPECT_LE(worst.param, kTol) << name_of(a) << " " << l.name << ": parameter " << worst.where;
    }
    ++index;
  }
  w.group()->barrier();
  if (w.rank() == 0) state::remove_tree(scratch(""));
  w.group()->barrier();
}

Layout with_sp(Layout l) { l.sequence_parallel = true; l.name += ", SP"; return l; }
Layout with_ac(Layout l) { l.checkpoint_every = 1; l.name += ", AC"; return l; }
Layout whole_experts(Layout l) { l.split_experts = false; l.name += ", whole experts"; return l; }
Layout schedule(Layout l, const char* s) {
  l.schedule = s;
  l.name += fmt::format(", {}", s);
  return l;
}

}  // namespace

// ---- 4 ranks --------------------------------------------------------------------------------

TEST(ParallelizeMatrix, Llama) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  run_cells(Arch::kLlama,
            {
                L("FSDP 4", {}),
                L("HSDP 2x2", {.dp_replicate = 2, .dp_shard = 2}, SS::HYBRID_SHARD),
                with_sp(L("TP 2 x FSDP 2", {.tp = 2})),
                with_ac(schedule(L("PP 2 x FSDP 2", {.pp = 2}), "ZBVZeroBubble")),
                with_sp(schedule(L("PP 2 x TP 2", {.pp = 2, .tp = 2}), "Interleaved1F1B")),
                L("PP 2 x HSDP 2x1", {.pp = 2, .dp_replicate = 2, .dp_shard = 1}, SS::HYBRID_SHARD),
            },
            "llama");
}

TEST(ParallelizeMatrix, Qwen3Moe) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  run_cells(Arch::kQwen3Moe,
            {
                L("FSDP 4", {}),
                L("EP 2 x HSDP 2x2", {.dp_replicate = 2, .dp_shard = 2, .ep = 2}, SS::HYBRID_SHARD),
                L("TP 2 x FSDP 2 (experts split over tp)", {.tp = 2}),
                with_sp(L("TP 2 x EP 2 x FSDP 2", {.tp = 2, .ep = 2})),
                L("PP 2 x EP 2 x FSDP 2", {.pp = 2, .ep = 2}),
                with_sp(schedule(L("PP 2 x TP 2", {.pp = 2, .tp = 2}), "ZBVZeroBubble")),
            },
            "qwen3");
}

TEST(ParallelizeMatrixSlow, Llama) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  run_cells(Arch::kLlama,
            {
                L("NO_SHARD 4", {}, SS::NO_SHARD),
                L("ZERO1 4", {}, SS::ZERO1),
                with_sp(L("TP 4", {.tp = 4})),
                L("TP 2 x FSDP 2", {.tp = 2}, SS::SHARD_GRAD_OP),
                with_sp(L("TP 2 x HSDP 2x1", {.dp_replicate = 2, .tp = 2}, SS::HYBRID_SHARD_ZERO2)),
                with_ac(L("TP 2 x FSDP 2", {.tp = 2})),
                schedule(L("PP 4", {.pp = 4}), "GPipe"),
                schedule(L("PP 4", {.pp = 4}), "ZBH1"),
                schedule(L("PP 2 x FSDP 2", {.pp = 2}), "InterleavedZeroBubble"),
                schedule(L("PP 2 x TP 2", {.pp = 2, .tp = 2}), "1F1B"),
            },
            "llama_slow");
}

TEST(ParallelizeMatrixSlow, Qwen3Moe) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  run_cells(Arch::kQwen3Moe,
            {
                L("HSDP 2x2", {.dp_replicate = 2, .dp_shard = 2}, SS::HYBRID_SHARD),
                L("EP 4", {.ep = 4}),
                L("EP 2 x FSDP 2", {.ep = 2}),
                with_sp(L("TP 4 (experts split over tp)", {.tp = 4})),
                with_sp(L("TP 2 x FSDP 2 (experts split over tp)", {.tp = 2})),
                whole_experts(L("TP 2 x FSDP 2", {.tp = 2})),
                L("TP 2 x EP 4", {.tp = 2, .ep = 4}),
                with_ac(L("TP 2 x EP 2 x HSDP 2x1", {.dp_replicate = 2, .tp = 2, .ep = 2},
                          SS::HYBRID_SHARD)),
                schedule(L("PP 4", {.pp = 4}), "GPipe"),
                schedule(L("PP 2 x HSDP 2x1", {.pp = 2, .dp_replicate = 2, .dp_shard = 1},
                           SS::HYBRID_SHARD),
                         "Interleaved1F1B"),
                L("PP 2 x TP 2 x EP 2", {.pp = 2, .tp = 2, .ep = 2}),
            },
            "qwen3_slow");
}

// ---- 2 and 8 ranks ----------------------------------------------------------------------------

TEST(ParallelizeMatrix2, BothModels) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 2) << "this test needs 2 ranks";
  run_cells(Arch::kLlama, {with_sp(L("TP 2", {.tp = 2})), schedule(L("PP 2", {.pp = 2}), "ZBH1")},
            "llama2");
  run_cells(Arch::kQwen3Moe,
            {L("EP 2", {.ep = 2}), whole_experts(L("TP 2", {.tp = 2})), L("PP 2", {.pp = 2})},
            "qwen3_2");
}

// forward_backward's objective (what distillation gives the last stage, or the one stage):
// microbatch k's token loss is (k + 1) times its cross entropy, and the Qwen3-MoE still adds its
// load-balancing loss; one step's loss, aux loss and gradient norm equal one process computing
// the same from forward_features, on a pipeline and without one (FSDP 2, the loss averaged over
// dp), and without the objective the model's own loss comes back. Without a pipeline the
// objective reads the hidden states it asks for, and after_loss replaces each microbatch's loss.
TEST(ParallelizeMatrix2, Objective) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 2) << "this test needs 2 ranks";
  const parallel::MicrobatchObjective weighted = [](const at::Tensor& logits,
                                                    const at::Tensor& targets, int k,
                                                    const std::vector<at::Tensor>&, double) {
    return (k + 1) * models::token_cross_entropy(logits, targets);
  };
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    const double coef = a == Arch::kQwen3Moe ? qwen3_config().router_aux_loss_coef : 0.0;
    // One process.
    auto plan = fresh(a);
    double want_loss = 0, want_aux = 0;
    for (int m = 0; m < kMicro; ++m) {
      auto t = micro_tokens(0, m);
      auto out = plan->causal_lm()->forward_features(t.narrow(1, 0, kSeq), true, {});
      auto loss = weighted(out.logits, t.narrow(1, 1, kSeq), m, {}, 0);
      if (out.aux_loss.defined()) {
        loss = loss + coef * out.aux_loss;
        want_aux += out.aux_loss.item<double>() / kMicro;
      }
      (loss / kMicro).backward();
      want_loss += loss.item<double>() / kMicro;
    }
    const double want_norm = torch::nn::utils::clip_grad_norm_(plan->module().parameters(), INFINITY);
    for (const auto& layout : {L("PP 2", {.pp = 2}), L("FSDP 2", {})}) {
      auto placed = place(a, layout);
      auto& p = *placed.p;
      auto [x, y] = my_rows(p, 0);
      const auto step = p.forward_backward(x, y, 1.0, {.objective = weighted});
      const double norm = p.clip_grad_norm_(INFINITY);
      auto loss = torch::tensor({step.loss}, torch::kDouble);
      p.mesh().group("dp")->all_reduce(loss, dist::ReduceOp::SUM, {"test loss"});
      const double mean = loss.item<double>() / p.mesh().group("dp")->size();
      const std::string name = std::string(name_of(a)) + " " + layout.name;
      EXPECT_NEAR(mean, want_loss, kTol) << name;
      EXPECT_NEAR(step.aux_loss, want_aux, kTol) << name;
      EXPECT_NEAR(norm / want_norm, 1.0, kTol) << name;
      placed.opt->zero_grad();
      auto own = torch::tensor({p.forward_backward(x, y).loss}, torch::kDouble);
      p.mesh().group("dp")->all_reduce(own, dist::ReduceOp::SUM, {"test loss"});
      EXPECT_NEAR(own.item<double>() / p.mesh().group("dp")->size(), reference(a).losses[0], kTol)
          << name;
    }
    if (a == Arch::kQwen3Moe) EXPECT_GT(want_aux, 0.0);
  }
  // Without a pipeline: the hidden states asked for, and a loss after_loss replaces.
  auto placed = place(Arch::kLlama, L("FSDP 2", {}));
  auto [x, y] = my_rows(*placed.p, 0);
  std::vector<int64_t> widths;
  parallel::MicrobatchCalls calls;
  calls.hidden_layers = {0, 1};
  calls.objective = [&](const at::Tensor& logits, const at::Tensor& targets, int,
                        const std::vector<at::Tensor>& hidden, double) {
    for (const auto& h : hidden) widths.push_back(h.size(-1));
    return models::token_cross_entropy(logits, targets);
  };
  calls.after_loss = [](int k, at::Tensor& loss) { loss = loss * 0 + (k + 1); };
  const auto step = placed.p->forward_backward(x, y, 1.0, calls);
  EXPECT_DOUBLE_EQ(step.loss, (1.0 + kMicro) / 2);
  EXPECT_EQ(widths, std::vector<int64_t>(2 * kMicro, llama_config().dim));
  // A pipeline's loss is inside its last stage: no after_loss there.
  auto piped = place(Arch::kLlama, L("PP 2", {.pp = 2}));
  auto [px, py] = my_rows(*piped.p, 0);
  EXPECT_THROW(piped.p->forward_backward(px, py, 1.0, {.after_loss = calls.after_loss}), ConfigError);
}

TEST(ParallelizeMatrix8, BothModels) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 8) << "this test needs 8 ranks";
  run_cells(Arch::kLlama,
            {
                with_sp(L("PP 2 x HSDP 2x1 x TP 2", {.pp = 2, .dp_replicate = 2, .dp_shard = 1, .tp = 2},
                          SS::HYBRID_SHARD)),
                with_sp(L("HSDP 2x2 x TP 2", {.dp_replicate = 2, .dp_shard = 2, .tp = 2},
                          SS::HYBRID_SHARD)),
                schedule(L("PP 2 x FSDP 2 x TP 2", {.pp = 2, .tp = 2}), "ZBVZeroBubble"),
            },
            "llama8");
  run_cells(Arch::kQwen3Moe,
            {
                with_sp(L("PP 2 x FSDP 2 x TP 2 x EP 4", {.pp = 2, .tp = 2, .ep = 4})),
                L("EP 4 x HSDP 2x2 x TP 2", {.dp_replicate = 2, .dp_shard = 2, .tp = 2, .ep = 4},
                  SS::HYBRID_SHARD),
                // Every dim at once: pp, dp_replicate, tp and ep > 1 (dp_shard 1, ep from tp).
                with_sp(L("PP 2 x HSDP 2x1 x TP 2 x EP 2",
                          {.pp = 2, .dp_replicate = 2, .dp_shard = 1, .tp = 2, .ep = 2},
                          SS::HYBRID_SHARD)),
            },
            "qwen3_8");
}
