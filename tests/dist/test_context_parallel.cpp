// Context parallelism (fsdpp/cp) against attention over the whole sequence in one process: every
// rank of the world is one cp rank, draws the whole q, k, v and output gradient from one seed,
// computes the float64 reference itself (SDPA, causal, the key/value heads repeated), and
// compares its own head-tail slices of the output and of dq, dk, dv with it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "error_of.h"
#include "fsdpp/cp/context_attention.h"
#include "fsdpp/cp/sequence_layout.h"
#include "world_fixture.h"

using namespace fsdpp;
using dist::Collective;

namespace {

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The whole sequence's tensors, the same on every rank: q (B,H,T,D), k, v (B,Hkv,T,D) and the
// output's gradient w (B,H,T,D) (the loss is sum(out * w)).
struct Whole {
  at::Tensor q, k, v, w;
};

Whole draw(int64_t H, int64_t Hkv, int64_t T, uint64_t seed,
           at::ScalarType dtype = at::kFloat) {
  const int64_t B = 2, D = 8;
  return {torch::randn({B, H, T, D}, gen(seed)).to(dtype),
          torch::randn({B, Hkv, T, D}, gen(seed + 1)).to(dtype),
          torch::randn({B, Hkv, T, D}, gen(seed + 2)).to(dtype),
          torch::randn({B, H, T, D}, gen(seed + 3)).to(dtype)};
}

// One process, float64: SDPA's causal attention with each key/value head repeated for the
// H/Hkv query heads that read it.
struct Result {
  at::Tensor out, dq, dk, dv;
};

Result reference(const Whole& x) {
  auto q = x.q.to(at::kDouble).requires_grad_();
  auto k = x.k.to(at::kDouble).requires_grad_();
  auto v = x.v.to(at::kDouble).requires_grad_();
  const int64_t rep = q.size(1) / k.size(1);
  auto out = at::scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                              v.repeat_interleave(rep, 1), {}, 0.0,
                                              /*is_causal=*/true);
  (out * x.w.to(at::kDouble)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// This rank's part of the computation: its slices in, its output and gradients out.
Result on_ranks(const Whole& x, const cp::GroupPtr& g, cp::CpMethod method) {
  const int r = g->rank(), n = g->size();
  auto q = cp::shard_sequence(x.q, 2, r, n).requires_grad_();
  auto k = cp::shard_sequence(x.k, 2, r, n).requires_grad_();
  auto v = cp::shard_sequence(x.v, 2, r, n).requires_grad_();
  auto out = cp::context_attention(q, k, v, g, {.method = method});
  (out * cp::shard_sequence(x.w, 2, r, n)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// The largest difference of this rank's slices from the reference, over out, dq, dk, dv.
std::array<double, 4> errors(const Result& mine, const Result& ref, const cp::GroupPtr& g) {
  auto slice = [&](const at::Tensor& t) { return cp::shard_sequence(t, 2, g->rank(), g->size()); };
  return {max_diff(mine.out, slice(ref.out)), max_diff(mine.dq, slice(ref.dq)),
          max_diff(mine.dk, slice(ref.dk)), max_diff(mine.dv, slice(ref.dv))};
}

// torch's own float32 SDPA against the float64 reference: the rounding any float32 attention
// has, printed beside fsdpp's.
std::array<double, 4> float32_sdpa_errors(const Whole& x, const Result& ref) {
  auto q = x.q.clone().requires_grad_(), k = x.k.clone().requires_grad_();
  auto v = x.v.clone().requires_grad_();
  const int64_t rep = q.size(1) / k.size(1);
  auto out = at::scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                              v.repeat_interleave(rep, 1), {}, 0.0, true);
  (out * x.w).sum().backward();
  return {max_diff(out, ref.out), max_diff(q.grad(), ref.dq), max_diff(k.grad(), ref.dk),
          max_diff(v.grad(), ref.dv)};
}

// Every shape of the matrix: the output and gradients of this rank's slices within 1e-6 of the
// float64 reference, relative to the reference's largest value where that is above 1. Prints
// the largest errors over all ranks (absolute, then relative) and float32 SDPA's own.
void check_method(cp::CpMethod method) {
  auto g = test::world().group();
  const int n = g->size();
  auto worst = torch::zeros({3, 4}, torch::kDouble);  // rows: absolute, relative, SDPA fp32
  for (int64_t T : {int64_t{16}, int64_t{32}}) {
    for (int64_t Hkv : {6, 3, 2}) {  // GQA ratios 1, 2 and 3
      auto x = draw(6, Hkv, T, 100 + T + Hkv);
      auto ref = reference(x);
      auto err = errors(on_ranks(x, g, method), ref, g);
      auto sdpa = float32_sdpa_errors(x, ref);
      const std::array<at::Tensor, 4> wholes{ref.out, ref.dq, ref.dk, ref.dv};
      for (int i = 0; i < 4; ++i) {
        const double scale = std::max(1.0, wholes[i].abs().max().item<double>());
        EXPECT_LT(err[i], 1e-6 * scale) << cp::to_string(method) << " CP " << n << " T " << T
                                        << " Hkv " << Hkv << " tensor " << i;
        worst[0][i] = std::max(worst[0][i].item<double>(), err[i]);
        worst[1][i] = std::max(worst[1][i].item<double>(), err[i] / scale);
        worst[2][i] = std::max(worst[2][i].item<double>(), sdpa[i]);
      }
    }
  }
  g->all_reduce(worst, dist::ReduceOp::MAX);
  if (g->rank() == 0) {
    const char* rows[] = {"max |err|", "relative", "SDPA fp32 itself"};
    for (int row = 0; row < 3; ++row) {
      std::printf("[cp] %s CP %d (H 6 over Hkv 6/3/2, T 16/32, fp32 vs float64) %s: out %.2e "
                  "dq %.2e dk %.2e dv %.2e\n",
                  cp::to_string(method), n, rows[row], worst[row][0].item<double>(),
                  worst[row][1].item<double>(), worst[row][2].item<double>(),
                  worst[row][3].item<double>());
    }
  }
}

}  // namespace

// The head-tail layout: chunks i and 2W-1-i on rank i, positions, the round trip, the refusal.
TEST(ContextParallel, LayoutRoundTrips) {
  for (int world = 1; world <= 4; ++world) {
    const int64_t T = 8 * world;
    auto x = torch::arange(3 * T, torch::kFloat).view({3, T});  // position t at column t
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < world; ++r) {
      auto piece = cp::shard_sequence(x, -1, r, world);
      auto pos = cp::sequence_positions(T, r, world);
      EXPECT_EQ(pos.scalar_type(), at::kLong);
      EXPECT_TRUE(torch::equal(piece, x.index_select(1, pos))) << "W " << world << " rank " << r;
      const int64_t c = T / (2 * world);
      EXPECT_EQ(pos[0].item<int64_t>(), r * c);
      EXPECT_EQ(pos[c].item<int64_t>(), (2 * world - 1 - r) * c);
      pieces.push_back(piece);
    }
    EXPECT_TRUE(torch::equal(cp::unshard_sequence(pieces, 1), x)) << "W " << world;
    // every position exactly once over the ranks
    std::vector<at::Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(cp::sequence_positions(T, r, world));
    EXPECT_TRUE(torch::equal(std::get<0>(at::cat(all).sort()), torch::arange(T, torch::kLong)));
  }
  const auto head_tail = cp::head_tail_chunks(1, 4);
  EXPECT_EQ(head_tail.head, 1);
  EXPECT_EQ(head_tail.tail, 6);
  EXPECT_EQ(test::error_of([] { cp::shard_sequence(torch::zeros({2, 12}), 1, 0, 4); }),
            "[cp] the sequence length 12 is not divisible by 2 x the context-parallel degree 4 "
            "= 8: head-tail load balancing cuts it into 8 equal chunks");
  EXPECT_NE(test::error_of([] { cp::sequence_positions(10, 0, 3); })
                .find("the sequence length 10 is not divisible by 2 x the context-parallel "
                      "degree 3 = 6"),
            std::string::npos);
}

// Arguments are checked before anything is sent.
TEST(ContextParallel, RefusesBadShapes) {
  auto g = test::world().group();
  auto k = torch::zeros({2, 4, 8, 8});
  EXPECT_EQ(test::error_of([&] { cp::context_attention(torch::zeros({2, 6, 8, 8}), k, k, g); }),
            "[cp] cp: 6 query heads are not a multiple of 4 key/value heads");
  auto odd = torch::zeros({2, 4, 7, 8});
  EXPECT_NE(test::error_of([&] { cp::context_attention(odd, odd, odd, g); })
                .find("the local length 7 is not two equal chunks"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { cp::context_attention(torch::zeros({2, 4, 6, 8}), k, k, g); })
                .find("differ in batch, local length or head dim"),
            std::string::npos);
}

TEST(ContextParallel, AllGatherMatchesOneProcess) { check_method(cp::CpMethod::ALLGATHER); }

TEST(ContextParallel, RingMatchesOneProcess) { check_method(cp::CpMethod::RING); }

// Per call: ALLGATHER's 2 all-gathers forward and 2 reduce-scatters backward; RING's 2(W-1)
// sends of this rank's K/V blocks forward, and 2(W-1) K/V plus 2W float32 dK/dV sends backward.
TEST(ContextParallel, CommunicationPerCall) {
  auto g = test::world().group();
  const int n = g->size();
  auto x = draw(4, 2, 8 * n, 7);
  const uint64_t block = 2 * 2 * 8 * 8 * 4;  // B * Hkv * T/W * D floats
  for (auto method : {cp::CpMethod::ALLGATHER, cp::CpMethod::RING}) {
    const int r = g->rank();
    auto q = cp::shard_sequence(x.q, 2, r, n).requires_grad_();
    auto k = cp::shard_sequence(x.k, 2, r, n).requires_grad_();
    auto v = cp::shard_sequence(x.v, 2, r, n).requires_grad_();
    g->barrier();
    g->reset_counters();
    auto out = cp::context_attention(q, k, v, g, {.method = method});
    const auto fwd = g->counters();
    (out * cp::shard_sequence(x.w, 2, r, n)).sum().backward();
    const auto bwd = g->counters() - fwd;
    if (method == cp::CpMethod::ALLGATHER) {
      EXPECT_EQ(fwd.calls_of(Collective::ALL_GATHER), 2u);
      EXPECT_EQ(fwd.bytes_of(Collective::ALL_GATHER), 2 * (n - 1) * block);
      EXPECT_EQ(fwd.total_bytes(), fwd.bytes_of(Collective::ALL_GATHER));
      EXPECT_EQ(bwd.calls_of(Collective::REDUCE_SCATTER), 2u);
      EXPECT_EQ(bwd.total_bytes(), bwd.bytes_of(Collective::REDUCE_SCATTER));
      EXPECT_EQ(bwd.calls_of(Collective::ALL_GATHER) + bwd.calls_of(Collective::SEND), 0u);
    } else {
      EXPECT_EQ(fwd.calls_of(Collective::SEND), 2u * (n - 1));
      EXPECT_EQ(fwd.calls_of(Collective::RECV), 2u * (n - 1));
      EXPECT_EQ(fwd.total_bytes(), 2 * (n - 1) * block);
      EXPECT_EQ(bwd.calls_of(Collective::SEND), 2u * (n - 1) + 2u * n);
      EXPECT_EQ(bwd.calls_of(Collective::RECV), 2u * (n - 1) + 2u * n);
      EXPECT_EQ(bwd.total_bytes(), (2 * (n - 1) + 2 * n) * block);
      EXPECT_EQ(fwd.calls_of(Collective::ALL_GATHER) + bwd.calls_of(Collective::REDUCE_SCATTER),
                0u);
    }
    if (r == 0) {
      std::printf("[cp comm] %s CP %d per call: forward %llu B, backward %llu B\n",
                  cp::to_string(method), n, static_cast<unsigned long long>(fwd.total_bytes()),
                  static_cast<unsigned long long>(bwd.total_bytes()));
    }
  }
}

// CP over the "cp" dim of a (dp, cp) mesh, each dp row with its own sequence: group ranks, not
// global ones, name the ring's neighbours and the gathered order. On 2 ranks the cp groups have
// one rank (no messages; the methods compute alone).
TEST(ContextParallel, SubgroupsOfAMesh) {
  auto& w = test::world();
  ASSERT_EQ(w.size() % 2, 0) << "run with an even number of ranks";
  auto mesh = w.init_device_mesh({2, w.size() / 2}, {"dp", "cp"});
  auto g = mesh->group("cp");
  const int dp = mesh->coordinate()[0];
  for (auto method : {cp::CpMethod::ALLGATHER, cp::CpMethod::RING}) {
    auto x = draw(6, 3, 16, 300 + 10 * dp);
    auto err = errors(on_ranks(x, g, method), reference(x), g);
    for (int i = 0; i < 4; ++i) {
      EXPECT_LT(err[i], 1e-5) << cp::to_string(method) << " CP " << g->size() << " tensor " << i;
    }
  }
}

// bf16 in, bf16 out and bf16 gradients; both methods agree with the reference to bf16's
// precision (the arithmetic is float32 in both).
TEST(ContextParallel, BFloat16KeepsItsDtype) {
  auto g = test::world().group();
  auto x = draw(4, 2, 8 * g->size(), 11, at::kBFloat16);
  auto ref = reference(x);
  for (auto method : {cp::CpMethod::ALLGATHER, cp::CpMethod::RING}) {
    auto mine = on_ranks(x, g, method);
    EXPECT_EQ(mine.out.scalar_type(), at::kBFloat16);
    EXPECT_EQ(mine.dk.scalar_type(), at::kBFloat16);
    auto err = errors(mine, ref, g);
    for (int i = 0; i < 4; ++i) {
      EXPECT_LT(err[i], 0.1) << cp::to_string(method) << " tensor " << i;
    }
  }
}
