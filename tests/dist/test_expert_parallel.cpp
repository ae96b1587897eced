// Expert parallelism (fsdpp/moe, fsdpp/models/qwen3_moe_ep.h) against the same computation in
// one process: every rank runs the whole reference itself on the global batch and compares its
// part (losses averaged over the ranks, experts gathered over the ep group) with it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/qwen3_moe_ep.h"
#include "fsdpp/moe/dispatch.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;
using dist::Collective;

namespace {

const moe::GroupPtr& world_group() { return test::world().group(); }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  if (a.numel() == 0) return 0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

constexpr int64_t kE = 8, kD = 32, kI = 16;

// Every rank's routed tokens, drawn from seeds so that each rank can make every rank's.
struct RankInput {
  at::Tensor x, ids, w, probe;  // (N,D), (N,k), (N,k), (N,D)
};
using Routing = std::function<at::Tensor(int rank, int64_t n, int64_t k)>;

RankInput rank_input(int rank, int64_t n, int64_t k, const Routing& routing) {
  RankInput in;
  in.x = torch::randn({n, kD}, gen(10 + rank));
  in.ids = routing(rank, n, k);
  in.w = torch::rand({n, k}, gen(30 + rank));
  in.probe = torch::randn({n, kD}, gen(40 + rank));
  return in;
}

// Pairs of `in` whose expert lies in [lo, hi).
int64_t pairs_in(const RankInput& in, int64_t lo, int64_t hi) {
  return ((in.ids >= lo) & (in.ids < hi)).sum().item<int64_t>();
}

// Dispatch, grouped experts and combine on every rank against the whole experts module run on
// every rank's tokens: output, the gradients of the tokens and weights, every local expert's
// gradient (summed over every rank's tokens), and the all-to-all bytes the routing implies.
void check_dispatch(const char* name, const std::function<int64_t(int)>& tokens_of, int64_t k,
                    const Routing& routing) {
  auto g = world_group();
  const int P = g->size(), r = g->rank();
  const int64_t El = kE / P;
  models::Qwen3MoeExperts whole(kE, kD, kI);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : whole->parameters()) p.copy_(torch::randn(p.sizes(), gen(5)) * 0.2);
  }
  std::vector<RankInput> all;
  for (int s = 0; s < P; ++s) all.push_back(rank_input(s, tokens_of(s), k, routing));
  // The reference: each rank's tokens through the whole module, gradients summed over ranks.
  at::Tensor ref_out, ref_gx, ref_gw;
  for (int s = 0; s < P; ++s) {
    auto x = all[s].x.clone().requires_grad_();
    auto w = all[s].w.clone().requires_grad_();
    auto y = whole->forward(x, all[s].ids, w);
    // A rank without tokens: the routed forward returns zeros outside the graph.
    if (y.requires_grad()) (y * all[s].probe).sum().backward();
    if (s == r) {
      ref_out = y.detach();
      ref_gx = x.grad().defined() ? x.grad() : at::zeros_like(x);
      ref_gw = w.grad().defined() ? w.grad() : at::zeros_like(w);
    }
  }
  // Expert parallel: this rank's slice of the experts.
  models::Qwen3MoeExperts local(El, kD, kI);
  {
    torch::NoGradGuard no_grad;
    local->gate_proj.copy_(whole->gate_proj.narrow(0, r * El, El));
    local->up_proj.copy_(whole->up_proj.narrow(0, r * El, El));
    local->down_proj.copy_(whole->down_proj.narrow(0, r * El, El));
  }
  const auto& mine = all[r];
  auto x = mine.x.clone().requires_grad_();
  auto w = mine.w.clone().requires_grad_();
  g->reset_counters();
  moe::ExpertDispatch d(x, mine.ids, kE, g, name);
  auto y = d.combine(local->forward(d.tokens, d.tokens_per_expert), w);
  (y * mine.probe).sum().backward();
  const auto c = g->counters();
  // Relative to the reference's largest entry: an expert's gradient sums many tokens'.
  const double tol = 1e-5;
  auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return max_diff(a, b) / (1 + (b.numel() ? b.abs().max().item<double>() : 0.0));
  };
  EXPECT_LT(rel(y, ref_out), tol) << name;
  EXPECT_LT(rel(x.grad(), ref_gx), tol) << name;
  EXPECT_LT(rel(w.grad(), ref_gw), tol) << name;
  for (auto [l, h] : {std::pair{&local->gate_proj, &whole->gate_proj},
                      std::pair{&local->up_proj, &whole->up_proj},
                      std::pair{&local->down_proj, &whole->down_proj}}) {
    ASSERT_TRUE(l->grad().defined()) << name << ": an expert without tokens still gets zeros";
    EXPECT_LT(rel(l->grad(), h->grad().narrow(0, r * El, El)), tol) << name;
  }
  // What the routing implies: the counts (E int64, the other ranks' E/P each), the rows to
  // experts elsewhere and the rows from elsewhere, each twice (forward and backward).
  int64_t sent = 0, received = 0;
  for (int s = 0; s < P; ++s) {
    if (s == r) continue;
    sent += pairs_in(mine, s * El, (s + 1) * El);
    received += pairs_in(all[s], r * El, (r + 1) * El);
  }
  const uint64_t expected = (P - 1) * El * 8 + 2 * (sent + received) * kD * 4;
  EXPECT_EQ(c.calls_of(Collective::ALL_TO_ALL), 5u) << name;
  EXPECT_EQ(c.bytes_of(Collective::ALL_TO_ALL), expected) << name;
  int64_t rows = 0;
  for (auto n : d.tokens_per_expert) rows += n;
  if (r == 0) {
    std::printf("[ep dispatch] %s, ep %d: rank 0 sent %lld rows, received %lld, computed %lld; "
                "all-to-all %llu bytes, as the routing implies\n",
                name, P, static_cast<long long>(sent), static_cast<long long>(received),
                static_cast<long long>(rows), static_cast<unsigned long long>(expected));
  }
}

at::Tensor random_routing(int rank, int64_t n, int64_t k) {
  return std::get<1>(at::topk(torch::rand({n, kE}, gen(20 + rank)), k, -1));
}

}  // namespace

TEST(ExpertParallel, DispatchMatchesOneProcess) {
  const int P = world_group()->size();
  check_dispatch("random", [](int s) { return 12 + 3 * s; }, 2, random_routing);
  // Every token to expert 0: one expert computes all, the other ranks receive nothing.
  check_dispatch("all to expert 0", [](int) { return 10; }, 1,
                 [](int, int64_t n, int64_t) { return at::zeros({n, 1}, at::kLong); });
  // Every token to the last rank's last two experts; the other ranks' experts get nothing.
  check_dispatch("all to the last rank", [](int) { return 7; }, 2, [](int, int64_t n, int64_t) {
    return torch::tensor({kE - 1, kE - 2}, at::kLong).expand({n, 2}).contiguous();
  });
  // Rank 0 has no tokens at all; the others route at random.
  check_dispatch("rank 0 without tokens", [](int s) { return s == 0 ? 0 : 9; }, 2,
                 random_routing);
  // Only the experts of even ranks receive tokens.
  check_dispatch("odd ranks idle", [](int) { return 11; }, 1, [P](int s, int64_t n, int64_t) {
    auto rank = torch::randint(0, (P + 1) / 2, {n, 1}, gen(60 + s)) * 2;
    return rank * (kE / P) + torch::randint(0, kE / P, {n, 1}, gen(70 + s));
  });
}

namespace {

// kE experts of width kI over kD: the shapes the expert tests above build by hand.
models::Qwen3MoeConfig tiny_moe() { return fsdpp::test::routed_moe(/*seed=*/11); }
constexpr int64_t kGlobalBatch = 4, kSeq = 16;
constexpr int kSteps = 10;
constexpr double kClip = 0.5;
constexpr double kLr = 1e-3;  // as the TP parity: Adam magnifies rounding where grads cancel

struct Tokens {
  at::Tensor x, y;
};
Tokens global_batch(int step, int64_t vocab) {
  auto t = torch::randint(0, vocab, {kGlobalBatch, kSeq + 1}, gen(100 + step));
  return {t.narrow(1, 0, kSeq), t.narrow(1, 1, kSeq)};
}
Tokens part_of(const Tokens& b, int rank, int ranks) {
  const int64_t n = kGlobalBatch / ranks;
  return {b.x.narrow(0, rank * n, n), b.y.narrow(0, rank * n, n)};
}

std::vector<at::Tensor> trainable(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

torch::optim::AdamW adamw(const std::vector<at::Tensor>& params) {
  return torch::optim::AdamW(params, torch::optim::AdamWOptions(kLr).weight_decay(0.1));
}

struct Reference {
  std::vector<double> losses, aux, norms;
  std::map<std::string, at::Tensor> params;
};

// One process on the global batch.
Reference train_reference(const models::Qwen3MoeConfig& cfg, int steps,
                          const std::function<void(models::Qwen3MoeImpl&)>& prepare) {
  models::Qwen3Moe ref(cfg);
  prepare(*ref);
  auto opt = adamw(trainable(*ref));
  Reference out;
  for (int s = 0; s < steps; ++s) {
    auto b = global_batch(s, cfg.vocab_size);
    auto o = ref->forward(b.x, b.y, /*output_router_logits=*/true);
    o.loss.backward();
    out.norms.push_back(torch::nn::utils::clip_grad_norm_(trainable(*ref), kClip));
    opt.step();
    opt.zero_grad();
    out.losses.push_back(o.loss.item<double>());
    out.aux.push_back(o.aux_loss.item<double>());
  }
  for (const auto& p : ref->named_parameters()) out.params[p.key()] = p.value().detach().clone();
  return out;
}

struct Diffs {
  double loss = 0, aux = 0, norm = 0, param = 0, norm_seen = 0;
  std::string worst;
};

double mean_over(const at::Tensor& t, const moe::GroupPtr& g) {
  auto v = t.detach().to(at::kDouble).reshape({1}).clone();
  g->all_reduce(v, dist::ReduceOp::SUM);
  return v.item<double>() / g->size();
}

void compare_params(const std::map<std::string, at::Tensor>& whole, const Reference& ref,
                    Diffs& d) {
  ASSERT_EQ(whole.size(), ref.params.size());
  for (const auto& [name, p] : ref.params) {
    ASSERT_TRUE(whole.count(name)) << name;
    const double diff = max_diff(whole.at(name), p);
    if (diff > d.param) d.worst = name;
    d.param = std::max(d.param, diff);
  }
}

// EP over the world without FSDP: each rank a part of the global batch.
Diffs train_expert_parallel(const models::Qwen3MoeConfig& cfg, int steps, const Reference& ref,
                            const std::function<void(models::Qwen3MoeImpl&)>& prepare,
                            std::vector<int64_t>* load = nullptr, bool checkpoint = false) {
  auto g = world_group();
  models::Qwen3Moe model(cfg);
  prepare(*model);
  auto ep = models::parallelize_qwen3_moe_experts(*model, {.ep = g});
  if (checkpoint) {
    EXPECT_EQ(apply_activation_checkpointing(*model, {"Qwen3MoeDecoderLayer"}).size(), 2u);
  }
  auto opt = adamw(trainable(*model));
  Diffs d;
  for (int s = 0; s < steps; ++s) {
    auto b = part_of(global_batch(s, cfg.vocab_size), g->rank(), g->size());
    auto o = model->forward(b.x, b.y, /*output_router_logits=*/true);
    o.loss.backward();
    models::sync_expert_parallel_gradients(*model, ep);
    const double norm =
        fsdpp::clip_grad_norm_(fsdpp::placed_params(*model, ep.model_layout(*model)), kClip);
    opt.step();
    opt.zero_grad();
    d.norm = std::max(d.norm, std::abs(norm - ref.norms[s]) / ref.norms[s]);
    d.norm_seen = std::max(d.norm_seen, norm);
    d.loss = std::max(d.loss, std::abs(mean_over(o.loss, g) - ref.losses[s]));
    d.aux = std::max(d.aux, std::abs(o.aux_loss.item<double>() - ref.aux[s]));
    if (load && s == 0) *load = ep.last_expert_load();
  }
  std::vector<std::pair<std::string, at::Tensor>> local;
  for (const auto& p : model->named_parameters()) local.emplace_back(p.key(), p.value());
  compare_params(models::gather_experts(local, ep), ref, d);
  return d;
}

}  // namespace

// Zero, frozen router weights: every token gets the same probabilities, so top-1 sends every
// token of every layer to one expert.
static void force_one_expert(models::Qwen3MoeImpl& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    if (p.key().ends_with("mlp.gate.weight")) {
      p.value().zero_();
      p.value().set_requires_grad(false);
    }
  }
}

TEST(ExpertParallel, Qwen3MoeTrainingEqualsSingleProcess) {
  auto g = world_group();
  const auto cfg = tiny_moe();
  auto none = [](models::Qwen3MoeImpl&) {};
  const auto ref = train_reference(cfg, kSteps, none);
  std::vector<int64_t> load;
  const auto d = train_expert_parallel(cfg, kSteps, ref, none, &load);
  // Every top-k choice of the global batch counted once: B*T tokens, k choices, 2 layers.
  int64_t choices = 0;
  for (auto n : load) choices += n;
  EXPECT_EQ(choices, kGlobalBatch * kSeq * cfg.num_experts_per_tok * 2);
  EXPECT_GT(d.norm_seen, kClip);  // clipping took effect at least once
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);        // each expert counted once across the ep group
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (g->rank() == 0) {
    const auto s = models::summarize_expert_load(load);
    std::printf("[ep parity] EP %d: max |loss - ref| %.3g, |aux - ref| %.3g over %d steps, max "
                "relative |grad norm - ref| %.3g, max |param - ref| %.3g (%s); step 0 load per "
                "expert min %lld max %lld cv %.3f\n",
                g->size(), d.loss, d.aux, kSteps, d.norm, d.param, d.worst.c_str(),
                static_cast<long long>(s.min), static_cast<long long>(s.max), s.cv);
  }
}

// Activation checkpointing of every decoder layer: backward recomputes each layer's forward, its
// dispatch and all-to-alls included, in the same order on every rank.
TEST(ExpertParallel, CheckpointedLayersEqualSingleProcess) {
  auto g = world_group();
  const auto cfg = tiny_moe();
  auto none = [](models::Qwen3MoeImpl&) {};
  constexpr int kCheckpointSteps = 4;
  const auto ref = train_reference(cfg, kCheckpointSteps, none);
  const auto d = train_expert_parallel(cfg, kCheckpointSteps, ref, none, nullptr,
                                       /*checkpoint=*/true);
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (g->rank() == 0) {
    std::printf("[ep parity] EP %d, checkpointed layers: max |loss - ref| %.3g over %d steps, "
                "max |param - ref| %.3g\n", g->size(), d.loss, kCheckpointSteps, d.param);
  }
}

// Plain data parallelism (FSDP over the world, every rank all experts and a part of the batch)
// with the load-balancing loss over the global batch: every step's loss and aux loss and every
// final parameter equal one process's. Each rank's own aux loss, averaged over the ranks, does
// not (megablocks#85): checked at the first step.
TEST(MoeDataParallel, GlobalLoadBalancingLossEqualsSingleProcess) {
  auto g = world_group();
  const auto cfg = tiny_moe();
  auto none = [](models::Qwen3MoeImpl&) {};
  const auto ref = train_reference(cfg, kSteps, none);
  double per_rank_diff = 0;
  {
    models::Qwen3Moe local(cfg);
    auto b = part_of(global_batch(0, cfg.vocab_size), g->rank(), g->size());
    per_rank_diff = std::abs(mean_over(local->forward(b.x, b.y, true).aux_loss, g) - ref.aux[0]);
    EXPECT_GT(per_rank_diff, 1e-4) << "a per-rank aux loss is layout-free?";
  }
  models::Qwen3Moe model(cfg);
  auto load = models::use_global_load_balancing_loss(*model, g);
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  for (size_t i = 0; i < model->layers->size(); ++i) {
    fully_shard(*model->layers->ptr<models::Qwen3MoeDecoderLayerImpl>(i), o);
  }
  fully_shard(model, o);
  auto opt = adamw(model->parameters());
  Diffs d;
  for (int s = 0; s < kSteps; ++s) {
    auto b = part_of(global_batch(s, cfg.vocab_size), g->rank(), g->size());
    auto out = fsdpp::forward(model, b.x, b.y, /*output_router_logits=*/true);
    out.loss.backward();
    const double norm = fsdpp::clip_grad_norm_(*model, kClip);
    opt.step();
    opt.zero_grad();
    d.norm = std::max(d.norm, std::abs(norm - ref.norms[s]) / ref.norms[s]);
    d.loss = std::max(d.loss, std::abs(mean_over(out.loss, g) - ref.losses[s]));
    d.aux = std::max(d.aux, std::abs(out.aux_loss.item<double>() - ref.aux[s]));
  }
  int64_t choices = 0;
  for (auto n : *load) choices += n;
  EXPECT_EQ(choices, kGlobalBatch * kSeq * cfg.num_experts_per_tok * 2);
  std::map<std::string, at::Tensor> whole;
  for (auto& [name, t] : fsdpp::full_parameters(*model)) whole[name] = t;
  compare_params(whole, ref, d);
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (g->rank() == 0) {
    std::printf("[dp parity] FSDP %d, global load-balancing loss: max |loss - ref| %.3g, |aux - "
                "ref| %.3g over %d steps, max |param - ref| %.3g (per-rank aux averaged: |aux - "
                "ref| %.3g at step 0)\n",
                g->size(), d.loss, d.aux, kSteps, d.param, per_rank_diff);
  }
}

// A router whose weights are zero and frozen gives every token the same probabilities, so top-1
// sends every token of every layer to one expert: the ranks without it receive nothing and
// their experts get zero gradients (still decayed by AdamW, as in one process).
TEST(ExpertParallel, ForcedRoutingEqualsSingleProcess) {
  auto g = world_group();
  auto cfg = tiny_moe();
  cfg.num_experts_per_tok = 1;
  cfg.norm_topk_prob = false;
  auto force = force_one_expert;
  constexpr int kForcedSteps = 4;
  const auto ref = train_reference(cfg, kForcedSteps, force);
  std::vector<int64_t> load;
  const auto d = train_expert_parallel(cfg, kForcedSteps, ref, force, &load);
  int nonzero = 0;
  for (auto n : load) nonzero += n > 0;
  EXPECT_EQ(nonzero, 1) << "one expert takes every token";
  const auto summary = models::summarize_expert_load(load);
  EXPECT_EQ(summary.min, 0);
  EXPECT_EQ(summary.max, kGlobalBatch * kSeq * 2);  // every token of both layers, top-1
  EXPECT_DOUBLE_EQ(summary.cv, std::sqrt(static_cast<double>(cfg.num_experts - 1)));
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (g->rank() == 0) {
    std::printf("[ep parity] EP %d, every token to one expert: max |loss - ref| %.3g over %d "
                "steps, max |param - ref| %.3g\n",
                g->size(), d.loss, kForcedSteps, d.param);
  }
}

// One forward and backward of the model under EP: the ep group's all-to-all bytes equal what
// the router's choices imply, computed from the whole model's routing of the global batch.
TEST(ExpertParallel, AllToAllBytesMatchRouting) {
  auto g = world_group();
  const int P = g->size(), r = g->rank();
  const auto cfg = tiny_moe();
  const int64_t El = cfg.num_experts / P, rows = kGlobalBatch / P * kSeq;
  auto b = global_batch(0, cfg.vocab_size);
  models::Qwen3Moe ref(cfg);
  auto ro = ref->forward(b.x, b.y, /*output_router_logits=*/true);
  uint64_t expected = 0, layers = 0;
  for (const auto& logits : ro.router_logits) {  // (B*T, E), rank s holds rows [s*rows, ...)
    auto ids = models::route_top_k(logits, cfg.num_experts_per_tok, cfg.norm_topk_prob).expert_ids;
    auto owner = at::floor_divide(ids, El);
    int64_t sent = 0, received = 0;
    for (int s = 0; s < P; ++s) {
      auto from_s = owner.narrow(0, s * rows, rows);
      if (s == r) sent += (from_s != r).sum().item<int64_t>();
      else received += (from_s == r).sum().item<int64_t>();
    }
    expected += (P - 1) * El * 8 + 2 * (sent + received) * cfg.hidden_size * 4;
    ++layers;
  }
  models::Qwen3Moe model(cfg);
  auto ep = models::parallelize_qwen3_moe_experts(*model, {.ep = g});
  auto mine = part_of(b, r, P);
  g->reset_counters();
  auto o = model->forward(mine.x, mine.y, /*output_router_logits=*/true);
  o.loss.backward();
  const auto c = g->counters();
  EXPECT_EQ(c.calls_of(Collective::ALL_TO_ALL), 5 * layers);
  EXPECT_EQ(c.bytes_of(Collective::ALL_TO_ALL), expected);
  // The load-balancing statistics: one all-reduce forward, one backward.
  EXPECT_EQ(c.calls_of(Collective::ALL_REDUCE), 2u);
  if (r == 0) {
    std::printf("[ep comm] EP %d, %llu sparse layers, %lld tokens per rank: rank 0 all-to-all "
                "%llu bytes per step, as the routing implies\n",
                P, static_cast<unsigned long long>(layers), static_cast<long long>(rows),
                static_cast<unsigned long long>(expected));
  }
}

TEST(ExpertParallel, BadConfigurationsAreErrors) {
  auto g = world_group();
  const int P = g->size();
  auto cfg = tiny_moe();
  cfg.num_experts = 2 * P + 1;
  cfg.num_experts_per_tok = 1;
  models::Qwen3Moe m(cfg);
  try {
    models::parallelize_qwen3_moe_experts(*m, {.ep = g});
    ADD_FAILURE() << "no error for num_experts=" << cfg.num_experts;
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    const std::vector<std::string> parts{"[models]", "num_experts=" + std::to_string(2 * P + 1),
                                         "degree " + std::to_string(P)};
    for (const auto& part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << what << " lacks '" << part << "'";
    }
  }
  // Twice would slice the slices.
  models::Qwen3Moe twice(tiny_moe());
  models::parallelize_qwen3_moe_experts(*twice, {.ep = g});
  EXPECT_THROW(models::parallelize_qwen3_moe_experts(*twice, {.ep = g}), ConfigError);
}

namespace {

// EP 2 x FSDP 2 on 4 ranks, torchtitan's layout: the experts of each layer an FSDP unit over
// "efsdp" (the 2 ranks that hold the same experts), the rest of the model FSDP over all 4 ranks;
// every rank takes its own quarter of the global batch.
Diffs train_ep2_fsdp2(const models::Qwen3MoeConfig& cfg, int steps, const Reference& ref,
                      const std::function<void(models::Qwen3MoeImpl&)>& prepare,
                      bool count_traffic) {
  auto& w = test::world();
  auto mesh = w.init_device_mesh({2, 2}, {"efsdp", "ep"});
  auto epg = mesh->group("ep"), efsdp = mesh->group("efsdp");
  models::Qwen3Moe model(cfg);
  prepare(*model);
  auto ep = models::parallelize_qwen3_moe_experts(*model, {.ep = epg, .batch = w.group()});
  FullyShardOptions dense;
  dense.mesh = w.mesh();
  models::fully_shard_qwen3_moe(*model, ep, dense, mesh->sub({"efsdp"}));
  auto opt = adamw(trainable(*model));
  Diffs d;
  for (int s = 0; s < steps; ++s) {
    auto b = part_of(global_batch(s, cfg.vocab_size), w.rank(), w.size());
    auto o = fsdpp::forward(model, b.x, b.y, /*output_router_logits=*/true);
    o.loss.backward();
    const double norm = fsdpp::clip_grad_norm_(*model, kClip);
    opt.step();
    opt.zero_grad();
    d.norm = std::max(d.norm, std::abs(norm - ref.norms[s]) / ref.norms[s]);
    d.norm_seen = std::max(d.norm_seen, norm);
    d.loss = std::max(d.loss, std::abs(mean_over(o.loss, w.group()) - ref.losses[s]));
    d.aux = std::max(d.aux, std::abs(o.aux_loss.item<double>() - ref.aux[s]));
  }
  compare_params(models::gather_experts(fsdpp::full_parameters(*model), ep), ref, d);
  if (count_traffic) {
    // One more step's traffic: the ep group carries the 5 all-to-alls per sparse layer, efsdp
    // only the expert units' gathers (forward and backward) and reduce-scatters.
    auto b = part_of(global_batch(0, cfg.vocab_size), w.rank(), w.size());
    epg->reset_counters();
    efsdp->reset_counters();
    fsdpp::forward(model, b.x, b.y, /*output_router_logits=*/true).loss.backward();
    opt.zero_grad();
    EXPECT_EQ(epg->counters().calls_of(Collective::ALL_TO_ALL), 5u * 2);
    EXPECT_EQ(epg->counters().calls_of(Collective::ALL_GATHER), 0u);
    const auto ce = efsdp->counters();
    EXPECT_EQ(ce.calls_of(Collective::ALL_GATHER), 2u * 2);
    EXPECT_EQ(ce.calls_of(Collective::REDUCE_SCATTER), 2u);
    EXPECT_EQ(ce.calls_of(Collective::ALL_TO_ALL), 0u);
  }
  return d;
}

}  // namespace

TEST(ExpertParallelFsdp, Ep2Fsdp2EqualsSingleProcess) {
  ASSERT_EQ(test::world().size(), 4) << "this test needs 4 ranks";
  const auto cfg = tiny_moe();
  auto none = [](models::Qwen3MoeImpl&) {};
  const auto ref = train_reference(cfg, kSteps, none);
  const auto d = train_ep2_fsdp2(cfg, kSteps, ref, none, /*count_traffic=*/true);
  EXPECT_GT(d.norm_seen, kClip);
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (test::world().rank() == 0) {
    std::printf("[ep parity] EP 2 x FSDP 2: max |loss - ref| %.3g, |aux - ref| %.3g over %d "
                "steps, max relative |grad norm - ref| %.3g, max |param - ref| %.3g (%s)\n",
                d.loss, d.aux, kSteps, d.norm, d.param, d.worst.c_str());
  }
}

// Every token to one expert under EP 2 x FSDP 2: one ep rank's expert units get no rows in
// every layer and still reduce their (zero) gradients in the same order as their peers.
TEST(ExpertParallelFsdp, ForcedRoutingEqualsSingleProcess) {
  ASSERT_EQ(test::world().size(), 4) << "this test needs 4 ranks";
  auto cfg = tiny_moe();
  cfg.num_experts_per_tok = 1;
  cfg.norm_topk_prob = false;
  auto force = force_one_expert;
  constexpr int kForcedSteps = 4;
  const auto ref = train_reference(cfg, kForcedSteps, force);
  const auto d = train_ep2_fsdp2(cfg, kForcedSteps, ref, force, /*count_traffic=*/false);
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.aux, 1e-5);
  EXPECT_LT(d.norm, 1e-5);
  EXPECT_LT(d.param, 1e-5) << d.worst;
  if (test::world().rank() == 0) {
    std::printf("[ep parity] EP 2 x FSDP 2, every token to one expert: max |loss - ref| %.3g "
                "over %d steps, max |param - ref| %.3g\n", d.loss, kForcedSteps, d.param);
  }
}
