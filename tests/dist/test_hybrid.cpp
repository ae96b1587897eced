// HYBRID_SHARD on a (replicate, shard) mesh over 4 ranks, as (2, 2), (4, 1) and (1, 4):
// the communication split between shard groups and replicate groups against theory, the
// gradient norm for clipping against single-process training, and training parity.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "../support/test_models.h"
#include "fsdpp/fsdp/inspect.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

constexpr int64_t kGlobalBatch = 8;
constexpr int64_t kVocab = 29;

test::TinyTransformer make_model() { return test::TinyTransformer(kVocab, 16, 2, 2); }

struct Batch {
  torch::Tensor x, y;
};

Batch batch(int step) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(5000 + step);
  auto tokens = torch::randint(0, kVocab, {kGlobalBatch, 8}, g);
  return {tokens.narrow(1, 0, 7), tokens.narrow(1, 1, 7)};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::cross_entropy_loss(logits.reshape({-1, kVocab}), y.reshape({-1}));
}

// Each rank's part of the global batch: every rank is a data-parallel rank, whatever the mesh.
Batch local_part(const Batch& b) {
  auto& w = test::world();
  const int64_t n = kGlobalBatch / w.size();
  return {b.x.narrow(0, w.rank() * n, n), b.y.narrow(0, w.rank() * n, n)};
}

struct Shape {
  int replicas, shards;
};

std::vector<Shape> shapes() {
  const int n = test::world().size();
  std::vector<Shape> out{{1, n}, {n, 1}};
  if (n % 2 == 0 && n > 2) out.insert(out.begin(), Shape{2, n / 2});
  return out;
}

std::string name_of(ShardingStrategy s, const Shape& m) {
  return fmt::format("{} on ({} replicas, {} shards)", to_string(s), m.replicas, m.shards);
}

FullyShardOptions hybrid_options(ShardingStrategy s, const Shape& m) {
  FullyShardOptions o;
  o.strategy = s;
  o.mesh = test::world().init_device_mesh({m.replicas, m.shards}, {"replicate", "shard"});
  return o;
}

std::map<std::string, torch::Tensor> parameters_of(test::TinyTransformer& ref) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& kv : ref->named_parameters()) out[kv.key()] = kv.value();
  return out;
}

// Max relative difference between the full parameters of `model` and those of `ref`.
double max_param_error(test::TinyTransformer& model, test::TinyTransformer& ref) {
  auto expected = parameters_of(ref);
  double worst = 0;
  for (const auto& [name, t] : full_parameters(*model)) {
    const auto& e = expected.at(name);
    const double scale = std::max(1.0, e.abs().max().item<double>());
    worst = std::max(worst, (t - e).abs().max().item<double>() / scale);
  }
  return worst;
}

}  // namespace

// Per rank per step, with S the padded parameter bytes, F ranks per shard group, R groups:
// inside the shard group FULL_SHARD's 3·S·(F-1)/F (HYBRID_SHARD) or 2·S·(F-1)/F
// (HYBRID_SHARD_ZERO2); across groups one all-reduce of the reduce-scattered gradient shard,
// 2·(S/F)·(R-1)/R. Nothing else crosses the replicate groups, nothing is all-reduced inside.
TEST(Hybrid, CommunicationSplitMatchesTheory) {
  for (auto s : {ShardingStrategy::HYBRID_SHARD, ShardingStrategy::HYBRID_SHARD_ZERO2}) {
    for (const Shape& m : shapes()) {
      torch::manual_seed(3);
      auto model = make_model();
      auto opts = hybrid_options(s, m);
      model->shard(opts);
      int64_t padded = 0;  // S
      int units = 0;
      for (const auto& u : inspect_units(*model)) {
        padded += u.shard_numel * 4 * u.shard_world;
        ++units;
      }
      const int64_t F = m.shards, R = m.replicas;
      torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
      for (int step = 0; step < 2; ++step) {  // the second step is the steady state
        const auto intra0 = opts.mesh->counters("shard");
        const auto inter0 = opts.mesh->counters("replicate");
        const auto all0 = comm_counters(*model);
        auto b = local_part(batch(step));
        loss_of(fsdpp::forward(model, b.x), b.y).backward();
        opt.step();
        opt.zero_grad();
        const auto intra = opts.mesh->counters("shard") - intra0;
        const auto inter = opts.mesh->counters("replicate") - inter0;
        const auto all = comm_counters(*model) - all0;
        using C = dist::Collective;
        const int64_t gathered = intra.bytes_of(C::ALL_GATHER) + intra.bytes_of(C::REDUCE_SCATTER);
        const int64_t factor = s == ShardingStrategy::HYBRID_SHARD ? 3 : 2;
        EXPECT_EQ(gathered, factor * padded * (F - 1) / F) << name_of(s, m) << " step " << step;
        EXPECT_EQ(intra.bytes_of(C::ALL_REDUCE), 0u) << name_of(s, m);
        EXPECT_EQ(inter.bytes_of(C::ALL_GATHER) + inter.bytes_of(C::REDUCE_SCATTER), 0u)
            << name_of(s, m);
        // Each unit's all-reduce rounds 2·B·(R-1)/R down to whole bytes.
        EXPECT_NEAR(static_cast<double>(inter.bytes_of(C::ALL_REDUCE)),
                    2.0 * (static_cast<double>(padded) / F) * (R - 1) / R, units)
            << name_of(s, m) << " step " << step;
        EXPECT_EQ(inter.calls_of(C::ALL_REDUCE), R > 1 ? static_cast<uint64_t>(units) : 0u)
            << name_of(s, m);
        EXPECT_EQ(all.total_bytes(), intra.total_bytes() + inter.total_bytes()) << name_of(s, m);
        if (step == 1 && test::world().rank() == 0) {
          std::printf("[hybrid] %s: S=%lld B; intra %llu B (theory %lld), inter %llu B (theory "
                      "%.1f)\n",
                      name_of(s, m).c_str(), static_cast<long long>(padded),
                      static_cast<unsigned long long>(intra.total_bytes()),
                      static_cast<long long>(factor * padded * (F - 1) / F),
                      static_cast<unsigned long long>(inter.total_bytes()),
                      2.0 * (static_cast<double>(padded) / F) * (R - 1) / R);
        }
      }
    }
  }
}

// clip_grad_norm_ sums the squared shards over the shard group only: every replica holds the
// same reduced shard, so summing over the replicate dim too would count each R times (a norm
// sqrt(R) too large). Compared with LibTorch's clip_grad_norm_ on the single-process model, for
// the 2-norm and the inf-norm; then one SGD step (lr 1) shows the clipped gradients themselves.
TEST(Hybrid, ClipGradNormCountsEachShardOnce) {
  for (auto s : {ShardingStrategy::HYBRID_SHARD, ShardingStrategy::HYBRID_SHARD_ZERO2}) {
    for (const Shape& m : shapes()) {
      for (double norm_type : {2.0, static_cast<double>(INFINITY)}) {
        torch::manual_seed(11);
        auto ref = make_model();
        torch::manual_seed(11);
        auto model = make_model();
        model->shard(hybrid_options(s, m));
        auto b = batch(0);
        loss_of(ref->forward(b.x), b.y).backward();
        auto lb = local_part(b);
        loss_of(fsdpp::forward(model, lb.x), lb.y).backward();

        // Clip hard (to a tenth of the norm), so that the coefficient matters.
        double unclipped = 0;
        {
          torch::NoGradGuard no_grad;
          for (const auto& p : ref->parameters()) {
            if (!p.grad().defined()) continue;
            const auto g = p.grad().to(torch::kDouble);
            unclipped = std::isinf(norm_type) ? std::max(unclipped, g.abs().max().item<double>())
                                              : unclipped + g.square().sum().item<double>();
          }
          if (!std::isinf(norm_type)) unclipped = std::sqrt(unclipped);
        }
        const double max_norm = unclipped / 10;
        const double ref_norm = torch::nn::utils::clip_grad_norm_(ref->parameters(), max_norm, norm_type);
        const double norm = clip_grad_norm_(*model, max_norm, norm_type);
        const std::string what = fmt::format("{}, norm_type {}", name_of(s, m), norm_type);
        ASSERT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << what;
        if (m.replicas > 1 && !std::isinf(norm_type)) {
          // The mistake this guards against gives sqrt(R) times the norm: far outside 1e-5.
          ASSERT_GT(std::abs(std::sqrt(m.replicas) * ref_norm - norm), 0.1 * ref_norm) << what;
        }
        torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(1.0));
        torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1.0));
        ref_opt.step();
        opt.step();
        EXPECT_LE(max_param_error(model, ref), 1e-5) << what;
      }
    }
  }
}

// Five AdamW steps with clipping on every mesh shape equal single-process training within 1e-5.
TEST(Hybrid, TrainingParityOnEveryMeshShape) {
  for (auto s : {ShardingStrategy::HYBRID_SHARD, ShardingStrategy::HYBRID_SHARD_ZERO2}) {
    for (const Shape& m : shapes()) {
      torch::manual_seed(21);
      auto ref = make_model();
      torch::manual_seed(21);
      auto model = make_model();
      model->shard(hybrid_options(s, m));
      torch::optim::AdamW ref_opt(ref->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      for (int step = 0; step < 5; ++step) {
        auto b = batch(100 + step);
        loss_of(ref->forward(b.x), b.y).backward();
        auto lb = local_part(b);
        loss_of(fsdpp::forward(model, lb.x), lb.y).backward();
        const double ref_norm = torch::nn::utils::clip_grad_norm_(ref->parameters(), 0.5);
        const double norm = clip_grad_norm_(*model, 0.5);
        ASSERT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << name_of(s, m) << " step " << step;
        ref_opt.step();
        opt.step();
        ref_opt.zero_grad();
        opt.zero_grad();
      }
      EXPECT_LE(max_param_error(model, ref), 1e-5) << name_of(s, m);
    }
  }
}
