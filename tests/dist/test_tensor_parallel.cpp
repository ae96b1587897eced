// Tensor and sequence parallelism (fsdpp/tp) against the same computation on one process: every
// rank of the world is one tensor-parallel rank, runs the unsharded reference itself, and
// compares its slices (and the gathered whole) with it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/tp/cross_entropy.h"
#include "fsdpp/tp/embedding.h"
#include "fsdpp/tp/linear.h"
#include "fsdpp/models/llama_tp_plan.h"
#include "fsdpp/tp/plan.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;
using dist::Collective;

namespace {

const tp::GroupPtr& tp_group() { return test::world().group(); }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// (M, V) logits, targets with some ignored positions.
void check_vocab_parallel_loss(int64_t vocab) {
  auto g = tp_group();
  const int64_t M = 24;
  auto logits = torch::randn({M, vocab}, gen(7)) * 3;
  auto targets = torch::randint(0, vocab, {M}, gen(8));
  targets.index_put_({torch::arange(0, M, 5)}, -100);
  auto full = logits.clone().requires_grad_();
  auto ref = torch::nn::functional::cross_entropy(
      full, targets, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  ref.backward();

  auto r = tp::shard_range(vocab, g->size(), g->rank());
  auto local = logits.narrow(1, r.offset, r.size).clone().requires_grad_();
  auto loss = tp::vocab_parallel_cross_entropy(local, targets, r.offset, g);
  loss.backward();
  EXPECT_LT(std::abs(loss.item<double>() - ref.item<double>()), 1e-6) << "vocab " << vocab;
  EXPECT_LT(max_diff(local.grad(), full.grad().narrow(1, r.offset, r.size)), 1e-7)
      << "vocab " << vocab;
}

}  // namespace

TEST(TensorParallel, VocabParallelLossEqualsCrossEntropy) {
  check_vocab_parallel_loss(32);
  check_vocab_parallel_loss(29);  // not divisible by 2 or 4: uneven shards
  // bf16 logits: computed in float32 as the model's own loss is, gradient back in bf16.
  auto g = tp_group();
  auto logits = (torch::randn({8, 29}, gen(21)) * 3).to(at::kBFloat16);
  auto targets = torch::randint(0, 29, {8}, gen(22));
  auto r = tp::shard_range(29, g->size(), g->rank());
  auto local = logits.narrow(1, r.offset, r.size).clone().requires_grad_();
  auto loss = tp::vocab_parallel_cross_entropy(local, targets, r.offset, g);
  loss.backward();
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_EQ(local.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(std::abs(loss.item<double>() -
                     models::token_cross_entropy(logits, targets).item<double>()), 1e-5);
}

// Each region's forward and backward against the same sums computed from every rank's tensors,
// which each rank can draw itself (seeded by rank).
TEST(TensorParallel, RegionsMatchUnsharded) {
  auto g = tp_group();
  const int n = g->size(), r = g->rank();
  const int64_t B = 2, T = 3, C = 5;  // chunks along dim 1
  auto x_of = [&](int k) { return torch::randn({B, T, C}, gen(50 + k)); };
  auto w_of = [&](int k, int64_t t) { return torch::randn({B, t, C}, gen(70 + k)); };
  std::vector<at::Tensor> xs, ws, wide;
  for (int k = 0; k < n; ++k) {
    xs.push_back(x_of(k));
    ws.push_back(w_of(k, T));
    wide.push_back(w_of(k, T * n));
  }
  auto sum = [](const std::vector<at::Tensor>& v) {
    auto out = at::zeros_like(v[0]);
    for (const auto& t : v) out += t;
    return out;
  };
  const double tol = 1e-6;
  {  // copy: identity forward, gradients summed over ranks
    auto x = xs[r].clone().requires_grad_();
    auto y = tp::copy_to_region(x, g);
    (y * ws[r]).sum().backward();
    EXPECT_LT(max_diff(y, xs[r]), tol);
    EXPECT_LT(max_diff(x.grad(), sum(ws)), tol);
  }
  {  // reduce: sum forward, gradient passed through
    auto x = xs[r].clone().requires_grad_();
    auto y = tp::reduce_from_region(x, g);
    (y * ws[r]).sum().backward();
    EXPECT_LT(max_diff(y, sum(xs)), tol);
    EXPECT_LT(max_diff(x.grad(), ws[r]), tol);
  }
  {  // gather along dim 1, backward: this rank's chunk of the summed gradient
    auto x = xs[r].clone().requires_grad_();
    auto y = tp::gather_from_sequence(x, g, 1);
    (y * wide[r]).sum().backward();
    EXPECT_LT(max_diff(y, at::cat(xs, 1)), tol);
    EXPECT_LT(max_diff(x.grad(), sum(wide).narrow(1, r * T, T)), tol);
  }
  {  // scatter: this rank's chunk of the sum, backward: every rank's chunk gradient gathered
    std::vector<at::Tensor> xs_wide;
    for (int k = 0; k < n; ++k) {
      xs_wide.push_back(at::cat(std::vector<at::Tensor>(n, xs[k]), 1) * (k + 1));  // (B,N*T,C)
    }
    auto x = xs_wide[r].clone().requires_grad_();
    auto y = tp::scatter_to_sequence(x, g, 1);
    (y * ws[r]).sum().backward();
    EXPECT_LT(max_diff(y, sum(xs_wide).narrow(1, r * T, T)), tol);
    EXPECT_LT(max_diff(x.grad(), at::cat(ws, 1)), tol);
  }
}

// Column- then row-parallel MLP with biases, with and without sequence parallelism, against the
// whole MLP: output, input gradient and every parameter gradient.
TEST(TensorParallel, ParallelLinearsMatchUnsharded) {
  auto g = tp_group();
  const int n = g->size(), rank = g->rank();
  const int64_t B = 2, T = 4 * n, C = 8, H = 13;  // H uneven for 2 and 4 ranks
  for (bool sp : {false, true}) {
    auto w1 = torch::randn({H, C}, gen(1)), b1 = torch::randn({H}, gen(2));
    auto w2 = torch::randn({C, H}, gen(3)), b2 = torch::randn({C}, gen(4));
    auto x = torch::randn({B, T, C}, gen(5)), probe = torch::randn({B, T, C}, gen(6));
    // Reference.
    auto rw1 = w1.clone().requires_grad_(), rb1 = b1.clone().requires_grad_();
    auto rw2 = w2.clone().requires_grad_(), rb2 = b2.clone().requires_grad_();
    auto rx = x.clone().requires_grad_();
    auto ry = at::linear(at::silu(at::linear(rx, rw1, rb1)), rw2, rb2);
    (ry * probe).sum().backward();
    // Tensor-parallel.
    tp::ParallelLinearOptions o1(C, H, g), o2(H, C, g);
    o1.bias = o2.bias = true;
    o1.sequence_parallel = o2.sequence_parallel = sp;
    tp::ColumnParallelLinear up(o1);
    tp::RowParallelLinear down(o2);
    up->load_full(w1, b1);
    down->load_full(w2, b2);
    const int64_t t0 = sp ? rank * T / n : 0, tn = sp ? T / n : T;
    auto lx = x.narrow(1, t0, tn).clone().requires_grad_();
    auto y = down(at::silu(up(lx)));  // (B,T,C) or (B,T/N,C)
    (y * probe.narrow(1, t0, tn)).sum().backward();
    const double tol = 1e-5;
    EXPECT_LT(max_diff(y, ry.narrow(1, t0, tn)), tol) << "sp " << sp;
    EXPECT_LT(max_diff(lx.grad(), rx.grad().narrow(1, t0, tn)), tol) << "sp " << sp;
    EXPECT_LT(max_diff(up->weight.grad(), rw1.grad().narrow(0, up->rows.offset, up->rows.size)),
              tol);
    EXPECT_LT(max_diff(up->bias.grad(), rb1.grad().narrow(0, up->rows.offset, up->rows.size)), tol);
    EXPECT_LT(max_diff(down->weight.grad(),
                       rw2.grad().narrow(1, down->cols.offset, down->cols.size)), tol);
    EXPECT_LT(max_diff(down->bias.grad(), rb2.grad()), tol) << "sp " << sp;
  }
}

TEST(TensorParallel, VocabParallelEmbeddingMatchesUnsharded) {
  auto g = tp_group();
  const int n = g->size(), rank = g->rank();
  const int64_t V = 29, C = 8, B = 2, T = 2 * n;
  for (bool sp : {false, true}) {
    auto table = torch::randn({V, C}, gen(11));
    auto tokens = torch::randint(0, V, {B, T}, gen(12));
    auto probe = torch::randn({B, T, C}, gen(13));
    auto rt = table.clone().requires_grad_();
    auto ry = at::embedding(rt, tokens);
    (ry * probe).sum().backward();
    tp::VocabParallelEmbedding emb(V, C, g, sp);
    emb->load_full(table);
    const int64_t t0 = sp ? rank * T / n : 0, tn = sp ? T / n : T;
    auto y = emb(tokens);
    (y * probe.narrow(1, t0, tn)).sum().backward();
    EXPECT_LT(max_diff(y, ry.narrow(1, t0, tn)), 1e-6) << "sp " << sp;
    EXPECT_LT(max_diff(emb->weight.grad(), rt.grad().narrow(0, emb->rows.offset, emb->rows.size)),
              1e-6);
  }
}

namespace {

// Small enough for seconds: uneven vocab (61) and FFN (90) for 2 and 4 ranks, grouped-query
// attention (8 heads, 4 kv heads).
models::LlamaConfig tiny_llama() {
  return fsdpp::test::uneven_llama(/*n_layers=*/2, /*max_seq_len=*/32, /*seed=*/3);
}
constexpr int64_t kBatch = 2, kSeq = 16;
constexpr int kSteps = 10;
constexpr double kClip = 0.5;
// Adam divides each gradient by its own running scale, so where a weight's gradients nearly
// cancel across steps a rounding difference of the split matmuls (~1e-7 relative) becomes a
// difference of up to ~lr in the update: 5e-5 at lr 1e-2, measured; 1e-3 keeps it below 1e-5.
constexpr double kLr = 1e-3;

struct Tokens {
  at::Tensor x, y;
};
Tokens batch(int step) {
  auto t = torch::randint(0, 61, {kBatch, kSeq + 1}, gen(100 + step));
  return {t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
}

torch::optim::AdamW adamw(const std::vector<at::Tensor>& params) {
  return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.1));
}

}  // namespace

TEST(TensorParallel, LlamaTrainingEqualsSingleProcess) {
  auto g = tp_group();
  const auto cfg = tiny_llama();
  // The single-process reference, on every rank.
  models::Llama ref(cfg);
  auto ref_opt = adamw(ref->parameters());
  std::vector<double> ref_losses, ref_norms;
  for (int s = 0; s < kSteps; ++s) {
    auto b = batch(s);
    auto loss = ref->forward(b.x, b.y).loss;
    loss.backward();
    ref_norms.push_back(torch::nn::utils::clip_grad_norm_(ref->parameters(), kClip));
    ref_opt.step();
    ref_opt.zero_grad();
    ref_losses.push_back(loss.item<double>());
  }
  for (bool sp : {false, true}) {
    models::Llama model(cfg);
    auto tpi = models::parallelize_llama(*model, g, {.sequence_parallel = sp});
    auto opt = adamw(model->parameters());
    double loss_diff = 0, norm_seen = 0, norm_diff = 0;  // norm_diff: relative
    for (int s = 0; s < kSteps; ++s) {
      auto b = batch(s);
      auto loss = model->forward(b.x, b.y).loss;
      loss.backward();
      const double norm =
          fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tpi.outer_layout(*model)), kClip);
      norm_diff = std::max(norm_diff, std::abs(norm - ref_norms[s]) / ref_norms[s]);
      norm_seen = std::max(norm_seen, norm);
      opt.step();
      opt.zero_grad();
      loss_diff = std::max(loss_diff, std::abs(loss.item<double>() - ref_losses[s]));
    }
    double param_diff = 0;
    std::string worst;
    auto full = tp::full_parameters(*model, tpi);
    for (const auto& p : ref->named_parameters()) {
      ASSERT_TRUE(full.count(p.key())) << p.key();
      const double d = max_diff(full.at(p.key()), p.value());
      if (d > param_diff) worst = p.key();
      param_diff = std::max(param_diff, d);
    }
    EXPECT_GT(norm_seen, kClip);  // clipping took effect at least once
    EXPECT_LT(norm_diff, 1e-5) << "sp " << sp;  // every parameter counted once across tp
    EXPECT_LT(loss_diff, 1e-5) << "sp " << sp;
    EXPECT_LT(param_diff, 1e-5) << "sp " << sp;
    if (g->rank() == 0) {
      std::printf("[tp parity] TP %d sp=%d: max |loss - ref| %.3g over %d steps, max |param - ref| "
                  "%.3g (%s), max relative |grad norm - ref| %.3g\n",
                  g->size(), sp, loss_diff, kSteps, param_diff, worst.c_str(), norm_diff);
    }
  }
}

// Tied embeddings (the head reuses the vocab-parallel table), a frozen sharded weight and a
// frozen replicated norm, and activation checkpointing of every block (its recomputation issues
// the block's forward collectives again inside backward), with and without SP.
TEST(TensorParallel, LlamaTiedFrozenCheckpointedEqualsSingleProcess) {
  auto g = tp_group();
  constexpr int kVariantSteps = 4;  // the 10-step parity is above; this keeps CI time short
  auto cfg = tiny_llama();
  cfg.tie_embeddings = true;
  const std::vector<std::string> frozen{"layers.0.attention.wq.weight", "layers.1.ffn_norm.weight"};
  auto freeze = [&](torch::nn::Module& m) {
    for (auto& p : m.named_parameters()) {
      for (const auto& f : frozen) {
        if (p.key() == f) p.value().set_requires_grad(false);
      }
    }
  };
  auto trainable = [](torch::nn::Module& m) {
    std::vector<at::Tensor> out;
    for (auto& p : m.parameters()) {
      if (p.requires_grad()) out.push_back(p);
    }
    return out;
  };
  models::Llama ref(cfg);
  freeze(*ref);
  auto ref_opt = adamw(trainable(*ref));
  std::vector<double> ref_losses;
  for (int s = 0; s < kVariantSteps; ++s) {
    auto b = batch(s);
    auto loss = ref->forward(b.x, b.y).loss;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(trainable(*ref), kClip);
    ref_opt.step();
    ref_opt.zero_grad();
    ref_losses.push_back(loss.item<double>());
  }
  for (bool sp : {false, true}) {
    models::Llama model(cfg);
    auto tpi = models::parallelize_llama(*model, g, {.sequence_parallel = sp});
    freeze(*model);
    ASSERT_EQ(apply_activation_checkpointing(*model, {"TransformerBlock"}).size(), 2u);
    auto opt = adamw(trainable(*model));
    double loss_diff = 0;
    for (int s = 0; s < kVariantSteps; ++s) {
      auto b = batch(s);
      std::weak_ptr<torch::autograd::Node> graph;
      {
        auto out = model->forward(b.x, b.y);
        graph = out.loss.grad_fn();
        out.loss.backward();
        fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tpi.outer_layout(*model)), kClip);
        opt.step();
        opt.zero_grad();
        loss_diff = std::max(loss_diff, std::abs(out.loss.item<double>() - ref_losses[s]));
      }
      // Nothing keeps the step's graph (and what it saved) alive into the next step: memory
      // does not grow from step to step under TP with checkpointing (torchtitan#2763).
      EXPECT_TRUE(graph.expired()) << "step " << s << " sp " << sp;
    }
    if (!sp) {
      // The recomputation repeats the blocks' 2L forward all-reduces inside backward:
      // (2L+1) forward + 2L recomputed + (2L+1) backward + 2 for the loss.
      const uint64_t L = cfg.n_layers;
      g->reset_counters();
      auto b = batch(0);
      model->forward(b.x, b.y).loss.backward();
      opt.zero_grad();
      EXPECT_EQ(g->counters().calls_of(Collective::ALL_REDUCE), 6 * L + 4);
    }
    double param_diff = 0;
    auto full = tp::full_parameters(*model, tpi);
    for (const auto& p : ref->named_parameters()) {
      ASSERT_TRUE(full.count(p.key())) << p.key();
      param_diff = std::max(param_diff, max_diff(full.at(p.key()), p.value()));
    }
    // The frozen ones did not move.
    models::Llama init(cfg);
    for (const auto& f : frozen) {
      EXPECT_EQ(max_diff(full.at(f), init->named_parameters()[f]), 0.0) << f;
    }
    EXPECT_LT(loss_diff, 1e-5) << "sp " << sp;
    EXPECT_LT(param_diff, 1e-5) << "sp " << sp;
    if (g->rank() == 0) {
      std::printf("[tp parity] TP %d sp=%d tied+frozen+checkpointed: max |loss - ref| %.3g, max "
                  "|param - ref| %.3g\n",
                  g->size(), sp, loss_diff, param_diff);
    }
  }
}

// Whole parameters move between layouts bit for bit: trained under TP (TP 2 over pairs of
// ranks when there are 4, else TP over the world), gathered, loaded into a TP model over the
// world (TP 2 -> TP 2, or TP 2 -> TP 4) and into one process. Optimizer state does not move.
TEST(TensorParallel, WholeParametersMoveBetweenLayouts) {
  auto& w = test::world();
  auto cfg = tiny_llama();
  auto train = [&](models::Llama& m, const tp::TensorParallel& t, int steps) {
    auto opt = adamw(m->parameters());
    for (int s = 0; s < steps; ++s) {
      auto b = batch(s);
      m->forward(b.x, b.y).loss.backward();
      fsdpp::clip_grad_norm_(fsdpp::placed_params(*m, t.outer_layout(*m)), kClip);
      opt.step();
      opt.zero_grad();
    }
  };
  auto equal = [](const std::map<std::string, at::Tensor>& a,
                  const std::map<std::string, at::Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [k, v] : a) EXPECT_TRUE(at::equal(v, b.at(k))) << k;
  };
  // The layout to save from: TP over pairs of ranks on 4 ranks, else TP over the world.
  tp::GroupPtr from = tp_group();
  if (w.size() == 4) from = w.init_device_mesh({2, 2}, {"dp", "tp"})->group("tp");
  models::Llama a(cfg);
  auto ta = models::parallelize_llama(*a, from);
  train(a, ta, 3);
  auto whole = tp::full_parameters(*a, ta);
  // Into the world's layout (TP 2 on 2 ranks, TP 4 on 4), from another seed.
  cfg.seed = 99;
  models::Llama b(cfg);
  auto tb = models::parallelize_llama(*b, tp_group());
  tp::load_full_parameters(*b, tb, whole);
  equal(tp::full_parameters(*b, tb), whole);
  // Into one process.
  models::Llama one(cfg);
  tp::load_full_parameters(*one, tp::TensorParallel(tp_group(), {}), whole);
  for (const auto& p : one->named_parameters()) {
    EXPECT_TRUE(at::equal(p.value(), whole.at(p.key()))) << p.key();
  }
  // Missing and mis-shaped tensors are named.
  auto bad = whole;
  bad.erase("norm.weight");
  EXPECT_THROW(tp::load_full_parameters(*b, tb, bad), ConfigError);
}

// One forward and backward of the Llama plan, counted against the formulas of
// docs/tensor-parallel.md.
TEST(TensorParallel, LlamaCommunicationMatchesFormulas) {
  auto g = tp_group();
  const auto cfg = tiny_llama();
  const uint64_t N = g->size(), L = cfg.n_layers;
  const uint64_t M = kBatch * kSeq;   // token positions
  const uint64_t A = M * cfg.dim * 4; // bytes of one (B,T,C) fp32 activation
  const uint64_t ar = 2 * (N - 1);    // an all-reduce sends 2(N-1)/N of its buffer
  for (bool sp : {false, true}) {
    models::Llama model(cfg);
    auto tpi = models::parallelize_llama(*model, g, {.sequence_parallel = sp});
    auto b = batch(0);
    g->reset_counters();
    model->forward(b.x, b.y).loss.backward();
    auto c = g->counters();
    // The loss: all-reduce MAX of M floats and all-reduce SUM of 2M floats.
    const uint64_t loss_calls = 2, loss_bytes = ar * (M * 4) / N + ar * (2 * M * 4) / N;
    if (!sp) {
      // Forward: embedding + (wo, w2) per layer; backward: (attention, ffn) inputs per layer +
      // the head's input.
      EXPECT_EQ(c.calls_of(Collective::ALL_REDUCE), (2 * L + 1) * 2 + loss_calls);
      EXPECT_EQ(c.bytes_of(Collective::ALL_REDUCE), (4 * L + 2) * (ar * A / N) + loss_bytes);
      EXPECT_EQ(c.calls_of(Collective::ALL_GATHER), 0u);
      EXPECT_EQ(c.calls_of(Collective::REDUCE_SCATTER), 0u);
    } else {
      // 2L+1 all-gathers (attention, ffn, head inputs) and 2L+1 reduce-scatters (embedding, wo,
      // w2) forward, the same swapped backward; (B,T,C) each, (N-1)/N of it sent.
      EXPECT_EQ(c.calls_of(Collective::ALL_GATHER), 4 * L + 2);
      EXPECT_EQ(c.bytes_of(Collective::ALL_GATHER), (4 * L + 2) * (A * (N - 1) / N));
      EXPECT_EQ(c.calls_of(Collective::REDUCE_SCATTER), 4 * L + 2);
      EXPECT_EQ(c.bytes_of(Collective::REDUCE_SCATTER), (4 * L + 2) * (A * (N - 1) / N));
      // The loss, and the 2L+1 norm weights' gradients (dim floats each).
      EXPECT_EQ(c.calls_of(Collective::ALL_REDUCE), loss_calls + 2 * L + 1);
      EXPECT_EQ(c.bytes_of(Collective::ALL_REDUCE),
                loss_bytes + (2 * L + 1) * (ar * (cfg.dim * 4) / N));
    }
    // Clipping: one all-reduce of one double.
    g->reset_counters();
    fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, tpi.outer_layout(*model)), 1.0);
    c = g->counters();
    EXPECT_EQ(c.calls_of(Collective::ALL_REDUCE), 1u);
    EXPECT_EQ(c.total_bytes(), ar * 8 / N);
    // One transformer block alone (per layer): without SP 2 all-reduces of A forward (wo, w2)
    // and 2 backward (attention and ffn inputs); with SP 2 all-gathers and 2 reduce-scatters
    // each way, and the 2 norms' weight gradients.
    {
      auto& block = *model->layers->ptr<models::TransformerBlockImpl>(0);
      const int64_t t = sp ? kSeq / static_cast<int64_t>(N) : kSeq;
      auto x = torch::randn({kBatch, t, cfg.dim}, gen(9)).requires_grad_();
      g->reset_counters();
      block.forward(x).sum().backward();
      const auto fwd_bwd = g->counters();
      if (!sp) {
        EXPECT_EQ(fwd_bwd.calls_of(Collective::ALL_REDUCE), 4u);
        EXPECT_EQ(fwd_bwd.bytes_of(Collective::ALL_REDUCE), 4 * (ar * A / N));
      } else {
        EXPECT_EQ(fwd_bwd.calls_of(Collective::ALL_GATHER), 4u);
        EXPECT_EQ(fwd_bwd.bytes_of(Collective::ALL_GATHER), 4 * (A * (N - 1) / N));
        EXPECT_EQ(fwd_bwd.calls_of(Collective::REDUCE_SCATTER), 4u);
        EXPECT_EQ(fwd_bwd.bytes_of(Collective::REDUCE_SCATTER), 4 * (A * (N - 1) / N));
        EXPECT_EQ(fwd_bwd.calls_of(Collective::ALL_REDUCE), 2u);
        EXPECT_EQ(fwd_bwd.bytes_of(Collective::ALL_REDUCE), 2 * (ar * (cfg.dim * 4) / N));
      }
      model->zero_grad();
    }
    if (g->rank() == 0) {
      std::printf("[tp comm] TP %d sp=%d: counters equal the formulas\n", g->size(), sp);
    }
  }
}

TEST(TensorParallel, BadConfigurationsAreErrors) {
  auto g = tp_group();
  const int n = g->size();
  auto expect_error = [](auto&& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
    } catch (const ConfigError& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << e.what() << " lacks '" << p << "'";
    }
  };
  const std::string degree = "degree " + std::to_string(n);
  {
    auto cfg = tiny_llama();
    cfg.n_heads = n + 1;
    cfg.n_kv_heads = 0;
    cfg.dim = 4 * (n + 1);
    models::Llama m(cfg);
    expect_error([&] { models::parallelize_llama(*m, g); },
                 {"[tp]", "n_heads=" + std::to_string(n + 1), degree});
  }
  {
    auto cfg = tiny_llama();
    cfg.n_heads = 4 * n;
    cfg.n_kv_heads = 1;  // grouped-query with fewer kv heads than ranks
    models::Llama m(cfg);
    expect_error([&] { models::parallelize_llama(*m, g); }, {"[tp]", "n_kv_heads=1", degree});
  }
  {
    models::Llama m(tiny_llama());
    models::parallelize_llama(*m, g, {.sequence_parallel = true});
    auto x = torch::randint(0, 61, {1, 4 * n + 1}, gen(1));
    expect_error([&] { m->forward(x, x); },
                 {"[tp]", "size " + std::to_string(4 * n + 1), degree});
  }
  {
    tp::ParallelLinearOptions o(8, n - 1, g);
    expect_error([&] { tp::ColumnParallelLinear l(o); },
                 {"[tp]", "out_features=" + std::to_string(n - 1), degree});
  }
  {
    models::Llama m(tiny_llama());
    expect_error([&] {
      tp::parallelize_module(*m, g, {{"layers.0.nope", tp::ParallelStyle::COLWISE}});
    },
                 {"[tp]", "layers.0.nope"});
    expect_error([&] { tp::parallelize_module(*m, g, {{"norm", tp::ParallelStyle::COLWISE}}); },
                 {"[tp]", "'norm'", "Linear"});
    // Applying a plan twice would slice the slices.
    tp::parallelize_module(*m, g, {{"layers.0.attention.wq", tp::ParallelStyle::COLWISE}});
    expect_error([&] {
      tp::parallelize_module(*m, g, {{"layers.0.attention.wq", tp::ParallelStyle::COLWISE}});
    }, {"[tp]", "layers.0.attention.wq", "split already"});
  }
}

// TP 2 x FSDP 2 on a (dp_shard, tp) mesh of 4 ranks: FSDP (FULL_SHARD, one unit per block and
// the root) shards each rank's TP-local parameters over dp_shard; the two dp_shard ranks take
// halves of the global batch, the two tp ranks of one dp_shard rank the same half.
TEST(TensorParallelFsdp, LlamaTp2Fsdp2EqualsSingleProcess) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  auto mesh = w.init_device_mesh({2, 2}, {"dp_shard", "tp"});
  auto tpg = mesh->group("tp");
  auto dpg = mesh->group("dp_shard");
  const int64_t global_batch = 4, local_batch = global_batch / dpg->size();
  auto global = [&](int step) {
    auto t = torch::randint(0, 61, {global_batch, kSeq + 1}, gen(200 + step));
    return Tokens{t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
  };
  const auto cfg = tiny_llama();
  models::Llama ref(cfg);
  auto ref_opt = adamw(ref->parameters());
  std::vector<double> ref_losses, ref_norms;
  for (int s = 0; s < kSteps; ++s) {
    auto b = global(s);
    auto loss = ref->forward(b.x, b.y).loss;
    loss.backward();
    ref_norms.push_back(torch::nn::utils::clip_grad_norm_(ref->parameters(), kClip));
    ref_opt.step();
    ref_opt.zero_grad();
    ref_losses.push_back(loss.item<double>());
  }
  for (bool sp : {false, true}) {
    models::Llama model(cfg);
    auto tpi = models::parallelize_llama(*model, tpg, {.sequence_parallel = sp});
    FullyShardOptions o;
    o.mesh = mesh->sub({"dp_shard"});
    o.strategy = ShardingStrategy::FULL_SHARD;
    o.outer_layout = tpi.outer_layout(*model);  // the tp placements, which clipping reads
    for (size_t i = 0; i < model->layers->size(); ++i) {
      fully_shard(*model->layers->ptr<models::TransformerBlockImpl>(i), o);
    }
    fully_shard(model, o);
    auto opt = adamw(model->parameters());
    double loss_diff = 0, norm_seen = 0, norm_diff = 0;
    for (int s = 0; s < kSteps; ++s) {
      auto b = global(s);
      auto x = b.x.narrow(0, dpg->rank() * local_batch, local_batch);
      auto y = b.y.narrow(0, dpg->rank() * local_batch, local_batch);
      auto out = fsdpp::forward(model, x, y);
      out.loss.backward();
      const double norm = fsdpp::clip_grad_norm_(*model, kClip);
      norm_diff = std::max(norm_diff, std::abs(norm - ref_norms[s]) / ref_norms[s]);
      norm_seen = std::max(norm_seen, norm);
      opt.step();
      opt.zero_grad();
      auto mean = out.loss.detach().reshape({1}).clone();  // this half's mean: average the halves
      dpg->all_reduce(mean, dist::ReduceOp::AVG);
      loss_diff = std::max(loss_diff, std::abs(mean.item<double>() - ref_losses[s]));
    }
    std::map<std::string, at::Tensor> expected;
    for (const auto& p : ref->named_parameters()) expected[p.key()] = p.value();
    double param_diff = 0;
    size_t seen = 0;
    // Gathered over dp_shard and tp: fully_shard knows the tp placements (outer_layout).
    for (const auto& [name, whole] : fsdpp::full_parameters(*model)) {
      ASSERT_TRUE(expected.count(name)) << name;
      param_diff = std::max(param_diff, max_diff(whole, expected.at(name)));
      ++seen;
    }
    EXPECT_EQ(seen, expected.size());
    EXPECT_GT(norm_seen, kClip);
    EXPECT_LT(norm_diff, 1e-5) << "sp " << sp;  // counted once across dp_shard and tp
    // One more forward and backward, counted per dim: tp carries the plan's traffic for this
    // rank's half of the batch (docs/tensor-parallel.md), dp_shard FSDP's FULL_SHARD traffic
    // over the TP-local parameters: per unit an all-gather in forward and again in backward and
    // one reduce-scatter, each sending (N-1) shards' bytes.
    {
      auto b = global(0);
      auto x = b.x.narrow(0, dpg->rank() * local_batch, local_batch);
      auto y = b.y.narrow(0, dpg->rank() * local_batch, local_batch);
      tpg->reset_counters();
      dpg->reset_counters();
      fsdpp::forward(model, x, y).loss.backward();
      opt.zero_grad();
      const auto ct = tpg->counters(), cd = dpg->counters();
      const uint64_t N = tpg->size(), L = cfg.n_layers, M = local_batch * kSeq, A = M * cfg.dim * 4;
      const uint64_t loss_bytes = 2 * (N - 1) * (M * 4) / N + 2 * (N - 1) * (2 * M * 4) / N;
      if (!sp) {
        EXPECT_EQ(ct.calls_of(Collective::ALL_REDUCE), (2 * L + 1) * 2 + 2);
        EXPECT_EQ(ct.bytes_of(Collective::ALL_REDUCE),
                  (4 * L + 2) * (2 * (N - 1) * A / N) + loss_bytes);
      } else {
        EXPECT_EQ(ct.bytes_of(Collective::ALL_GATHER), (4 * L + 2) * (A * (N - 1) / N));
        EXPECT_EQ(ct.bytes_of(Collective::REDUCE_SCATTER), (4 * L + 2) * (A * (N - 1) / N));
        EXPECT_EQ(ct.bytes_of(Collective::ALL_REDUCE),
                  loss_bytes + (2 * L + 1) * (2 * (N - 1) * (cfg.dim * 4) / N));
      }
      uint64_t shard_bytes = 0, units = 0;
      for (const auto& u : inspect_units(*model)) {
        shard_bytes += static_cast<uint64_t>(u.shard_numel) * 4;
        ++units;
      }
      const uint64_t D = dpg->size();
      EXPECT_EQ(cd.calls_of(Collective::ALL_GATHER), 2 * units);
      EXPECT_EQ(cd.bytes_of(Collective::ALL_GATHER), 2 * shard_bytes * (D - 1));
      EXPECT_EQ(cd.calls_of(Collective::REDUCE_SCATTER), units);
      EXPECT_EQ(cd.bytes_of(Collective::REDUCE_SCATTER), shard_bytes * (D - 1));
      EXPECT_EQ(cd.calls_of(Collective::ALL_REDUCE), 0u);
      if (w.rank() == 0) {
        std::printf("[tp comm] TP 2 x FSDP 2 sp=%d: tp %llu B, dp_shard %llu B (%llu units, "
                    "%llu shard bytes): equal to the formulas\n",
                    sp, static_cast<unsigned long long>(ct.total_bytes()),
                    static_cast<unsigned long long>(cd.total_bytes()),
                    static_cast<unsigned long long>(units),
                    static_cast<unsigned long long>(shard_bytes));
      }
    }
    EXPECT_LT(loss_diff, 1e-5) << "sp " << sp;
    EXPECT_LT(param_diff, 1e-5) << "sp " << sp;
    if (w.rank() == 0) {
      std::printf("[tp parity] TP 2 x FSDP 2 sp=%d: max |loss - ref| %.3g over %d steps, max "
                  "|param - ref| %.3g, max relative |grad norm - ref| %.3g\n",
                  sp, loss_diff, kSteps, param_diff, norm_diff);
    }
  }
}

// TP 2 x HYBRID_SHARD on a (replicate 2, shard 1, tp 2) mesh of 4 ranks: FSDP replicates the
// TP-local parameters across "replicate" (gradients all-reduced there) and shards them over a
// "shard" dim of one rank; the two replicas take halves of the global batch.
TEST(TensorParallelFsdp, LlamaTp2Hybrid2EqualsSingleProcess) {
  auto& w = test::world();
  ASSERT_EQ(w.size(), 4) << "this test needs 4 ranks";
  auto mesh = w.init_device_mesh({2, 1, 2}, {"replicate", "shard", "tp"});
  auto tpg = mesh->group("tp");
  auto dpg = mesh->group("replicate");
  const int64_t global_batch = 4, local_batch = global_batch / dpg->size();
  auto global = [&](int step) {
    auto t = torch::randint(0, 61, {global_batch, kSeq + 1}, gen(300 + step));
    return Tokens{t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
  };
  const auto cfg = tiny_llama();
  constexpr int kHybridSteps = 4;
  models::Llama ref(cfg);
  auto ref_opt = adamw(ref->parameters());
  std::vector<double> ref_losses;
  for (int s = 0; s < kHybridSteps; ++s) {
    auto b = global(s);
    auto loss = ref->forward(b.x, b.y).loss;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(ref->parameters(), kClip);
    ref_opt.step();
    ref_opt.zero_grad();
    ref_losses.push_back(loss.item<double>());
  }
  models::Llama model(cfg);
  auto tpi = models::parallelize_llama(*model, tpg, {.sequence_parallel = true});
  FullyShardOptions o;
  o.mesh = mesh->sub({"replicate", "shard"});
  o.strategy = ShardingStrategy::HYBRID_SHARD;
  o.outer_layout = tpi.outer_layout(*model);
  for (size_t i = 0; i < model->layers->size(); ++i) {
    fully_shard(*model->layers->ptr<models::TransformerBlockImpl>(i), o);
  }
  fully_shard(model, o);
  auto opt = adamw(model->parameters());
  double loss_diff = 0;
  for (int s = 0; s < kHybridSteps; ++s) {
    auto b = global(s);
    auto x = b.x.narrow(0, dpg->rank() * local_batch, local_batch);
    auto y = b.y.narrow(0, dpg->rank() * local_batch, local_batch);
    auto out = fsdpp::forward(model, x, y);
    out.loss.backward();
    // Gradients are equal on the replicas after FSDP's all-reduce: summed over "shard" and tp
    // only, as the placements say.
    fsdpp::clip_grad_norm_(*model, kClip);
    opt.step();
    opt.zero_grad();
    auto mean = out.loss.detach().reshape({1}).clone();
    dpg->all_reduce(mean, dist::ReduceOp::AVG);
    loss_diff = std::max(loss_diff, std::abs(mean.item<double>() - ref_losses[s]));
  }
  std::map<std::string, at::Tensor> expected;
  for (const auto& p : ref->named_parameters()) expected[p.key()] = p.value();
  double param_diff = 0;
  for (const auto& [name, whole] : fsdpp::full_parameters(*model)) {  // over dp and tp
    ASSERT_TRUE(expected.count(name)) << name;
    param_diff = std::max(param_diff, max_diff(whole, expected.at(name)));
  }
  EXPECT_LT(loss_diff, 1e-5);
  EXPECT_LT(param_diff, 1e-5);
  if (w.rank() == 0) {
    std::printf("[tp parity] TP 2 (SP) x HYBRID_SHARD (replicate 2, shard 1): max |loss - ref| "
                "%.3g over %d steps, max |param - ref| %.3g\n",
                loss_diff, kHybridSteps, param_diff);
  }
}
