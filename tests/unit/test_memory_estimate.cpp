// fsdpp-estimate's model (src/estimate/memory_estimate.cpp) against references computed other ways:
// the ZeRO paper's published figures, the parameter counts and shard sizes of the real model under
// fully_shard, and the peak of live tensor bytes measured by a counting CPU allocator while the
// real model trains three steps (one rank, and 2 or 4 ranks as threads, each rank's bytes
// counted apart).
// The RSS side (runtime baseline, allocator) is checked by tests/bench/estimate_vs_rss.sh.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>

#include "../support/counting_allocator.h"
#include "../support/thread_world.h"
#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/models/llama_tp_plan.h"

namespace {

using fsdpp::ShardingStrategy;

TEST(MemoryEstimate, ZeroPaperTable7_5BOn64) {
  // Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12.
  const auto z = fsdpp::zero_model_states(7.5e9, 64);
  EXPECT_NEAR(z.no_shard / 1e9, 120.0, 0.05);
  EXPECT_NEAR(z.zero1 / 1e9, 31.4, 0.05);
  EXPECT_NEAR(z.zero2 / 1e9, 16.6, 0.05);
  EXPECT_NEAR(z.zero3 / 1e9, 1.88, 0.005);
  // 7B on 8 GPUs: 16 bytes per parameter, divided as each stage divides them.
  const auto s = fsdpp::zero_model_states(7e9, 8);
  EXPECT_DOUBLE_EQ(s.zero3, 16 * 7e9 / 8);
  EXPECT_DOUBLE_EQ(s.zero2, (2 + 14.0 / 8) * 7e9);
}

TEST(MemoryEstimate, ModelStatesFollowZeroStagesInFp32) {
  // fp32 AdamW: 4 (params) + 4 (grads) + 8 (exp_avg, exp_avg_sq) bytes per parameter.
  auto m = fsdpp::describe_parameter_count(1'000'000'000, 10);
  fsdpp::EstimateOptions o;
  o.world_size = 8;
  o.strategy = ShardingStrategy::FULL_SHARD;
  EXPECT_EQ(fsdpp::estimate_memory(m, o).model_states, 16'000'000'000 / 8);
  o.strategy = ShardingStrategy::NO_SHARD;
  EXPECT_EQ(fsdpp::estimate_memory(m, o).model_states, 16'000'000'000);
  o.strategy = ShardingStrategy::ZERO1;
  EXPECT_EQ(fsdpp::estimate_memory(m, o).model_states, 4'000'000'000 + 12'000'000'000 / 8);
}

fsdpp::DecoderShape shape_of(const fsdpp::models::LlamaConfig& c) {
  return {c.vocab_size, c.dim, c.n_layers, c.n_heads, c.kv_heads(), c.ffn_hidden_dim(), c.tie_embeddings,
          c.max_seq_len};
}

// The Llama plan's shares, counted by hand for vocab 97, dim 48, 3 layers, 4 heads / 2 kv heads
// (head_dim 12), FFN 90, untied, over 2 ranks: the embedding and the output 49 rows of 48 (the
// first rank holds the odd row), per block the norms 48 each, wq 24 x 48, wk and wv 12 x 48, wo
// 48 x 24, w1 and w3 45 x 48, w2 48 x 45; and the real model's parameters on rank 0 after
// parallelize_llama.
TEST(MemoryEstimate, TensorParallelSliceHoldsThePlansShares) {
  fsdpp::models::LlamaConfig cfg;
  cfg.vocab_size = 97;
  cfg.dim = 48;
  cfg.n_layers = 3;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.ffn_hidden = 90;
  cfg.max_seq_len = 16;
  const auto whole = fsdpp::describe_decoder(shape_of(cfg));
  EXPECT_EQ(whole.num_params(), 2 * 97 * 48 + 48 + 3 * (2 * 48 + 2 * 48 * 48 + 2 * 24 * 48 + 3 * 90 * 48));
  const auto local = fsdpp::tensor_parallel_slice(whole, 2);
  const int64_t block = 48 + 24 * 48 + 12 * 48 + 12 * 48 + 48 * 24 + 48 + 45 * 48 + 48 * 45 + 45 * 48;
  EXPECT_EQ(block, 10032);
  EXPECT_EQ(local.num_params(), 2 * 49 * 48 + 48 + 3 * block);  // 34848, half of 69264 is 34632
  // wo is row-parallel: all 48 rows, 24 columns each (FSDP then shards its rows).
  EXPECT_EQ(local.units[1].params[4].rows, 48);
  EXPECT_EQ(local.units[1].params[4].row_numel, 24);
  std::vector<int64_t> held(2);
  fsdpp::test::run_ranks(2, [&](fsdpp::dist::World& w) {
    fsdpp::models::Llama model(cfg);
    fsdpp::models::parallelize_llama(*model, w.group(), {});
    held[w.rank()] = fsdpp::models::num_parameters(*model);
  });
  EXPECT_EQ(held[0], local.num_params());
  EXPECT_EQ(held[1], local.num_params() - 2 * 48);  // one vocabulary row fewer in each table
  // Model states: the TP-local parameters sharded over world / tp ranks, 16 bytes each (fp32 AdamW).
  fsdpp::EstimateOptions o;
  o.world_size = 4;
  o.tensor_parallel = 2;
  EXPECT_EQ(fsdpp::estimate_memory(whole, o).model_states, 16 * 34848 / 2);
  EXPECT_EQ(fsdpp::estimate_memory(whole, o).shard_world, 2);
  // A parameter count: every parameter divided by the degree.
  auto m = fsdpp::describe_parameter_count(1'000'000'000, 10);
  o.world_size = 8;
  EXPECT_EQ(fsdpp::estimate_memory(m, o).model_states, 16'000'000'000 / 2 / 4);
  // The plan's errors come before any estimate, in the plan's words (fsdpp-train's memory check
  // meets them first).
  cfg.n_kv_heads = 1;
  try {
    fsdpp::tensor_parallel_slice(fsdpp::describe_decoder(shape_of(cfg)), 2);
    FAIL();
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads=1 is smaller than the tensor-parallel degree 2"),
              std::string::npos) << e.what();
  }
  o.world_size = 3;
  EXPECT_THROW(fsdpp::estimate_memory(whole, o), fsdpp::ConfigError);
  o.world_size = 2;
  o.sequence_parallel = true;
  o.seq_len = 9;
  EXPECT_THROW(fsdpp::estimate_memory(whole, o), fsdpp::ConfigError);
}

TEST(MemoryEstimate, DescribeDecoderCountsTheRealModelsParameters) {
  for (bool tie : {false, true}) {
    for (int64_t kv : {0, 2}) {
      auto cfg = fsdpp::test::small_llama_config(tie, kv);
      fsdpp::models::Llama model(cfg);
      const auto d = fsdpp::describe_decoder(shape_of(cfg));
      EXPECT_EQ(d.num_params(), fsdpp::models::num_parameters(*model)) << "tie " << tie << " kv " << kv;
      EXPECT_EQ(d.units.size(), static_cast<size_t>(cfg.n_layers + 1));
    }
  }
}

using fsdpp::test::CountingAllocator;
using fsdpp::test::CountingScope;
using fsdpp::test::tl_rank;

struct Measured {
  int64_t peak = 0;
  int64_t padded_shard_numel = 0;
};

// Trains the real model for three steps (the second is the steady state the estimate describes) on
// `world.size()` ranks and returns each rank's peak of live tensor bytes, everything the rank
// allocated included (parameters, optimizer state, activations, buffers).
// With tp > 1: the Llama plan over groups of tp ranks, FSDP over the rest (docs/tensor-parallel.md),
// every rank of a tp group on the same batch.
Measured train_and_measure(fsdpp::dist::World& world, CountingAllocator& counter,
                           const fsdpp::models::LlamaConfig& cfg, ShardingStrategy s, int64_t B,
                           int64_t T, int tp = 1, bool sp = false) {
  tl_rank = world.rank();
  Measured m;
  {
    fsdpp::models::Llama model(cfg);
    fsdpp::FullyShardOptions opts;
    opts.mesh = world.mesh();
    std::optional<fsdpp::tp::TensorParallel> plan;
    if (tp > 1) {
      auto mesh = world.init_device_mesh({world.size() / tp, tp}, {"shard", "tp"});
      plan = fsdpp::models::parallelize_llama(*model, mesh->group("tp"), {.sequence_parallel = sp});
      opts.mesh = mesh->sub({"shard"});
      opts.outer_layout = plan->outer_layout(*model);
    }
    opts.strategy = s;
    fsdpp::apply_fully_shard(*model, fsdpp::transformer_layer_policy({"TransformerBlock"}), opts);
    m.padded_shard_numel = fsdpp::models::num_parameters(*model);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + world.rank() / tp);
    counter.reset_peak(world.rank());
    for (int step = 0; step < 3; ++step) {
      auto x = torch::randint(cfg.vocab_size, {B, T}, gen), y = torch::randint(cfg.vocab_size, {B, T}, gen);
      auto out = fsdpp::forward(model, x, y);
      out.loss.backward();
      opt.step();
      opt.zero_grad();
    }
    m.peak = counter.peak(world.rank());
    world.group()->barrier();
  }
  tl_rank = -1;
  return m;
}

struct Case {
  const char* name;
  ShardingStrategy strategy;
  int ranks;
  bool tie;
  int64_t kv;
  int tp = 1;
  bool sp = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EstimateVsAllocator : public ::testing::TestWithParam<Case> {};

TEST_P(EstimateVsAllocator, PeakTensorBytesWithinFivePercent) {
  const Case c = GetParam();
  const auto cfg = fsdpp::test::small_llama_config(c.tie, c.kv);
  const int64_t B = 8, T = 32;
  CountingScope scope;
  std::vector<Measured> got(c.ranks);
  fsdpp::test::run_ranks(c.ranks, [&](fsdpp::dist::World& w) {
    got[w.rank()] = train_and_measure(w, scope.counter(), cfg, c.strategy, B, T, c.tp, c.sp);
  });
  fsdpp::EstimateOptions o;
  o.strategy = c.strategy;
  o.world_size = c.ranks;
  o.tensor_parallel = c.tp;
  o.sequence_parallel = c.sp;
  o.batch = B;
  o.seq_len = T;
  o.runtime_baseline_bytes = 0;
  const auto model = fsdpp::describe_decoder(shape_of(cfg));
  const auto e = fsdpp::estimate_memory(model, o);
  // The shards the estimate pads are the shards fully_shard made (plus the rotary tables).
  const int64_t rope = cfg.n_layers * 2 * cfg.max_seq_len * (cfg.head_dim() / 2) * 4;
  EXPECT_EQ(e.parameters, 4 * got[0].padded_shard_numel + rope) << "peak at " << e.peak_at;
  for (int r = 0; r < c.ranks; ++r) {
    const double err = static_cast<double>(e.tensors - got[r].peak) / got[r].peak;
    if (r == 0) {
      std::printf("[estimate] %s: live tensor peak estimated %lld B, counted %lld B (%+.3f%%), at %s\n", c.name,
                  static_cast<long long>(e.tensors), static_cast<long long>(got[r].peak), 100 * err,
                  e.peak_at.c_str());
    }
    // Exact but for timing: a finished collective's buffers are released by the communication
    // thread when it drops the task, which may come after the rank's next allocation.
    EXPECT_LT(std::abs(err), 0.05) << c.name << " rank " << r << ": estimate " << e.tensors << " B, measured "
                                   << got[r].peak << " B (" << 100 * err << "%), peak at " << e.peak_at
                                   << "; params " << e.parameters << " grads " << e.gradients << " optim "
                                   << e.optimizer_state << " unsharded " << e.unsharded << " acts "
                                   << e.activations;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, EstimateVsAllocator,
    ::testing::Values(Case{"full_shard_1", ShardingStrategy::FULL_SHARD, 1, false, 0},
                      Case{"full_shard_1_tied_gqa", ShardingStrategy::FULL_SHARD, 1, true, 2},
                      Case{"full_shard_2", ShardingStrategy::FULL_SHARD, 2, false, 2},
                      Case{"full_shard_4", ShardingStrategy::FULL_SHARD, 4, true, 0},
                      Case{"shard_grad_op_2", ShardingStrategy::SHARD_GRAD_OP, 2, false, 0},
                      Case{"no_shard_2", ShardingStrategy::NO_SHARD, 2, false, 2},
                      Case{"zero1_2", ShardingStrategy::ZERO1, 2, false, 0},
                      // Tensor parallelism: rank 0 holds the larger share of the uneven vocabulary (97).
                      Case{"tp2", ShardingStrategy::FULL_SHARD, 2, false, 2, 2, false},
                      Case{"tp2_sp", ShardingStrategy::FULL_SHARD, 2, false, 2, 2, true},
                      Case{"tp2_fsdp2", ShardingStrategy::FULL_SHARD, 4, false, 2, 2, false},
                      Case{"tp2_fsdp2_sp_tied", ShardingStrategy::FULL_SHARD, 4, true, 0, 2, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(MemoryEstimate, BudgetPicksTheFastestThatFits) {
  fsdpp::DecoderShape shape{32000, 4096, 32, 32, 32, 11008, false};  // Llama-2 7B
  const auto model = fsdpp::describe_decoder(shape);
  EXPECT_NEAR(model.num_params() / 1e9, 6.74, 0.01);
  fsdpp::EstimateOptions o;
  o.world_size = 8;
  o.batch = 1;
  o.seq_len = 4096;
  o.param_dtype = o.reduce_dtype = fsdpp::EstimateDType::BF16;
  o.device_is_gpu = true;
  o.runtime_baseline_bytes = 0;
  const int64_t gib = 1ll << 30;
  // NO_SHARD needs at least 16 bytes per parameter (108 GB): not in 80 GiB; FULL_SHARD fits.
  auto r = fsdpp::recommend(model, o, 80 * gib);
  ASSERT_GE(r.chosen, 0);
  EXPECT_FALSE(r.candidates[0].fits);
  EXPECT_NE(r.candidates[0].why.find("needs"), std::string::npos) << r.candidates[0].why;
  for (int i = 0; i < r.chosen; ++i) EXPECT_FALSE(r.candidates[i].fits) << r.candidates[i].name;
  EXPECT_TRUE(r.candidates[r.chosen].fits);
  // Each candidate down the list needs no more than the one before it.
  for (size_t i = 1; i < r.candidates.size(); ++i)
    EXPECT_LE(r.candidates[i].estimate.total, r.candidates[i - 1].estimate.total) << r.candidates[i].name;
  // Nothing fits in 1 GiB.
  EXPECT_EQ(fsdpp::recommend(model, o, gib).chosen, -1);
}

// Deferred initialisation: no rank builds the model whole, so the 70 B model's peak on 16 GPUs is
// the step's; built whole, every rank needs the whole model in fp32 first, whatever the world size.
TEST(MemoryEstimate, DeferredInitHasNoBuildingPeak) {
  fsdpp::DecoderShape shape{128256, 8192, 80, 64, 8, 28672, false, 8192};  // Llama-3 70B
  const auto model = fsdpp::describe_decoder(shape);
  EXPECT_NEAR(model.num_params() / 1e9, 70.55, 0.01);
  fsdpp::EstimateOptions o;
  o.batch = 1;
  o.seq_len = 4096;
  o.param_dtype = o.reduce_dtype = fsdpp::EstimateDType::BF16;
  o.activation_checkpointing = true;
  o.device_is_gpu = true;
  o.runtime_baseline_bytes = 0;
  const double gib = 1ll << 30;
  for (int n : {8, 16}) {
    o.world_size = n;
    o.deferred_init = false;
    const auto whole = fsdpp::estimate_memory(model, o);
    EXPECT_EQ(whole.peak_at, "building the model") << n;
    EXPECT_GT(whole.total, 4 * model.num_params());
    o.deferred_init = true;
    const auto deferred = fsdpp::estimate_memory(model, o);
    EXPECT_EQ(deferred.peak_at.find("building"), std::string::npos) << deferred.peak_at;
    EXPECT_EQ(deferred.peak_at.find("initialising"), std::string::npos) << deferred.peak_at;
    // Model states (16 bytes per parameter over N: fp32 master shards and gradient shards, AdamW's
    // two moments) and the step's transients (gathered units, activations, a unit's gradients).
    EXPECT_NEAR(deferred.model_states, 16.0 * model.num_params() / n, 0.001 * deferred.model_states);
    EXPECT_GT(deferred.total, deferred.model_states);
    EXPECT_LT(deferred.total - deferred.model_states, 20 * gib) << n;
    // Built whole, every rank holds the fp32 model (4 bytes per parameter) besides what the step
    // needs; deferred, 2 bytes per parameter of model states at N = 8, 1 at N = 16.
    EXPECT_LT(deferred.total, whole.total / (n == 8 ? 1.5 : 3)) << n;
  }
  // --budget names where each candidate peaks, the model's build where that is the peak (with
  // CPU offload the fp32 model is built in host memory, not on the GPU).
  o.world_size = 16;
  o.deferred_init = false;
  const auto r = fsdpp::recommend(model, o, static_cast<int64_t>(80 * gib));
  int building = 0;
  for (const auto& c : r.candidates) {
    EXPECT_NE(c.why.find(c.estimate.peak_at), std::string::npos) << c.why;
    building += c.estimate.peak_at == "building the model";
  }
  EXPECT_GE(building, 1);  // FULL_SHARD: the build is above its step
}

TEST(MemoryEstimate, CheckpointingAndOffloadShrinkTheDevicePart) {
  fsdpp::DecoderShape shape{32000, 2048, 16, 16, 16, 5632, false};
  const auto model = fsdpp::describe_decoder(shape);
  fsdpp::EstimateOptions o;
  o.world_size = 4;
  o.batch = 4;
  o.seq_len = 2048;
  o.device_is_gpu = true;
  const auto plain = fsdpp::estimate_memory(model, o);
  o.activation_checkpointing = true;
  const auto ckpt = fsdpp::estimate_memory(model, o);
  EXPECT_LT(ckpt.activations, plain.activations / 3);  // a quarter with the GPU's fused RMSNorm
  o.cpu_offload = true;
  const auto off = fsdpp::estimate_memory(model, o);
  EXPECT_EQ(off.parameters, 0);
  EXPECT_EQ(off.optimizer_state, 0);
  EXPECT_GT(off.host, 0);
  EXPECT_LT(off.total, ckpt.total);
  // On a CPU device offload moves nothing.
  o.device_is_gpu = false;
  EXPECT_EQ(fsdpp::estimate_memory(model, o).total, [&] {
    auto p = o;
    p.cpu_offload = false;
    return fsdpp::estimate_memory(model, p).total;
  }());
}

TEST(MemoryEstimate, ErrorsNameTheProblem) {
  try {
    fsdpp::parse_estimate_dtype("fp8");
    FAIL();
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[estimate] dtype 'fp8'"), std::string::npos) << e.what();
  }
  fsdpp::EstimateOptions o;
  o.strategy = ShardingStrategy::HYBRID_SHARD;
  o.world_size = 12;
  o.shard_group_size = 8;
  EXPECT_THROW(fsdpp::estimate_memory(fsdpp::describe_parameter_count(1000, 2), o), fsdpp::ConfigError);
  EXPECT_THROW(fsdpp::describe_decoder({256, 30, 2, 4, 4, 64, false}), fsdpp::ConfigError);  // 30 % 4
}

}  // namespace
