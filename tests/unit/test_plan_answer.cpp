// fsdpp-plan's one answer (fsdpp/estimate/plan_answer.h), the experts timed as their kernels
// (expert_kernels.h), and the overrides that run a planned layout (fsdpp/train/plan_overrides.h):
// each row's overrides, given to fsdpp-train's config, make the same estimate and step time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/expert_kernels.h"
#include "fsdpp/estimate/plan_answer.h"
#include "fsdpp/estimate/step_time.h"
#include "fsdpp/train/config.h"
#include "fsdpp/train/memory_check.h"
#include "fsdpp/train/parallel_dims.h"
#include "fsdpp/train/plan_overrides.h"

#include "../support/gpu_run_options.h"

namespace {

// Qwen3-30B-A3B's shape (its config.json).
fsdpp::DecoderShape qwen3_30b_a3b() {
  fsdpp::DecoderShape s{.vocab_size = 151936, .dim = 2048, .n_layers = 48, .n_heads = 32, .n_kv_heads = 4,
                        .ffn_hidden = 6144, .tie_embeddings = false, .max_seq_len = 8192};
  s.head_size = 128;
  s.qk_norm = true;
  s.moe = fsdpp::MoeShape{.num_experts = 128, .top_k = 8, .moe_intermediate = 768,
                          .sparse = std::vector<bool>(48, true)};
  return s;
}

fsdpp::EstimateOptions bf16(int world, int64_t batch, int64_t seq) {
  return fsdpp::testing::gpu_bf16_options(world, batch, seq);
}

TEST(ExpertKernels, GemmWavesByHand) {
  const auto c = fsdpp::cluster_preset("h100-sxm");
  const double rate = 989e12 * 0.60;
  // A large GEMM: 64 x 64 tiles = 4096 over 132 SMs, 32 waves (31.03 full ones): 3% above its
  // FLOPs at the rate.
  const double big = 2.0 * 8192 * 8192 * 8192 / rate;
  EXPECT_NEAR(fsdpp::gemm_seconds(8192, 8192, 8192, 2, c), big * 32 / (4096.0 / 132), 1e-12);
  // An expert's gate projection in Qwen3-30B-A3B (512 rows of 2048 to 768): 4 x 6 tiles, one
  // wave of a 128 x 128 x 2048 tile, 5.5 times its FLOPs at the rate.
  const double wave = 2.0 * 128 * 128 * 2048 / (rate / 132);
  EXPECT_NEAR(fsdpp::gemm_seconds(512, 768, 2048, 2, c), wave, 1e-15);
  EXPECT_NEAR(wave / (2.0 * 512 * 768 * 2048 / rate), 132.0 / 24, 1e-9);
  // A CPU: its FLOPs at the fitted rate; copies at the preset's copy bandwidth.
  const auto cpu = fsdpp::cluster_preset("cpu");
  EXPECT_DOUBLE_EQ(fsdpp::gemm_seconds(64, 128, 256, 4, cpu), 2.0 * 64 * 128 * 256 / 47.5e9);
}

TEST(ExpertKernels, OpsAndFlopsByHand) {
  const auto shape = qwen3_30b_a3b();
  auto c = fsdpp::cluster_preset("h100-sxm");
  auto o = bf16(8, 1, 8192);
  const auto k = fsdpp::expert_kernels(shape, o, c);
  // Per expert and layer: 8 forward ops (gather, gate, up, silu, product, down, weight,
  // index_add) and 15 backward (6 GEMMs, 3 gradients of the product and SiLU, 3 of the weight
  // and gather, the zeroed gradient of the gather, its rows, the sum): 128 experts, 48 layers.
  EXPECT_EQ(k.ops, 23 * 128 * 48);
  // The FLOPs that flops.h's 6 N counts for them: 6 x 8 experts x 3 x 2048 x 768 per token.
  EXPECT_DOUBLE_EQ(k.flops, 18.0 * 2048 * 768 * 8 * 48 * 8192);
  const auto dense = fsdpp::describe_decoder(shape);
  auto wider = shape;
  wider.moe->moe_intermediate *= 2;
  EXPECT_NEAR(fsdpp::training_flops_per_token(fsdpp::describe_decoder(wider), 8192) -
                  fsdpp::training_flops_per_token(dense, 8192),
              k.flops / 8192, 1e-6 * k.flops / 8192);
  // The out-of-place index_add copies the microbatch's 8192 x 2048 output per expert; with the
  // gather's gradient (zeros, then the sum) 6 such copies of 2 bytes per element.
  EXPECT_GT(k.copy_s, 6.0 * 8192 * 2048 * 2 * 128 * 48 / 3.35e12);
  // Checkpointing recomputes the 8 forward ops; expert parallelism 2 leaves 64 experts here,
  // twice the rows each, and no per-expert gather, weight or index_add (the rows come grouped).
  o.activation_checkpointing = true;
  EXPECT_EQ(fsdpp::expert_kernels(shape, o, c).ops, 31 * 128 * 48);
  o.activation_checkpointing = false;
  o.expert_parallel = 2;
  EXPECT_EQ(fsdpp::expert_kernels(shape, o, c).ops, (5 + 12) * 64 * 48 + 48);
  // Small experts cost the op overhead: a 100-fold overhead makes nearly all of the time.
  o.expert_parallel = 1;
  c.op_overhead_s = 1e-3;
  const auto slow = fsdpp::expert_kernels(shape, o, c);
  EXPECT_NEAR(slow.total_s(), slow.ops * 1e-3, 0.05 * slow.ops * 1e-3);
  // A dense model has none.
  EXPECT_EQ(fsdpp::expert_kernels(fsdpp::DecoderShape{.vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
                                                       .n_kv_heads = 4, .ffn_hidden = 128},
                                  o, c).ops,
            0);
}

TEST(ExpertKernels, StepTimeUsesThemInPlaceOfTheDenseRate) {
  const auto model = fsdpp::describe_decoder(qwen3_30b_a3b());
  const auto c = fsdpp::cluster_preset("h100-sxm");
  const auto o = bf16(8, 1, 8192);
  const auto t = fsdpp::predict_step_time(model, o, c);
  const auto k = fsdpp::expert_kernels(*model.shape, o, c);
  const double dense = (fsdpp::training_flops_per_token(model, 8192) * 8192 - k.flops) / (989e12 * 0.60);
  EXPECT_NEAR(t.experts_s, k.total_s(), 1e-12);
  EXPECT_NEAR(t.compute_s, dense + k.total_s(), 1e-9);
  // One expert after another is slower than the same FLOPs at the dense rate.
  EXPECT_GT(k.total_s(), 2 * k.flops / (989e12 * 0.60));
}

fsdpp::PlanEntry entry(const char* name, double seconds, int tp, int pp) {
  fsdpp::PlanEntry e;
  e.layout = name;
  e.options.world_size = 8;
  e.options.tensor_parallel = tp;
  e.options.pipeline.degree = pp;
  e.time.total_s = seconds;
  return e;
}

TEST(PlanAnswer, TiesWithinTheBandGoToTheSimplest) {
  auto c = fsdpp::cluster_preset("h100-sxm");
  c.error_band = 0.18;
  fsdpp::Plan plan;
  plan.fitting = {entry("PP 2 x FSDP 2 x TP 2", 2.0, 2, 2), entry("FSDP 4 x TP 2", 2.1, 2, 1),
                  entry("FSDP 8 + checkpointing", 2.3, 1, 1), entry("FSDP 8 (slow)", 2.5, 1, 1)};
  auto a = fsdpp::plan_answer(plan, c);
  EXPECT_EQ(a.chosen, 2) << a.why;  // 2.3 <= 2.0 x 1.18; no parallel dimension beside FSDP
  EXPECT_EQ(a.ties, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(a.why.find("simplest of the 3 layouts within +-18%"), std::string::npos) << a.why;
  // Outside the band the fastest stays the answer, said so.
  c.error_band = 0.10;
  a = fsdpp::plan_answer(plan, c);
  EXPECT_EQ(a.chosen, 1);  // FSDP 4 x TP 2 ties and is simpler than PP x TP
  c.error_band = 0.01;
  a = fsdpp::plan_answer(plan, c);
  EXPECT_EQ(a.chosen, 0);
  EXPECT_NE(a.why.find("the fastest; no other layout"), std::string::npos) << a.why;
  EXPECT_EQ(fsdpp::plan_answer(fsdpp::Plan{}, c).chosen, -1);
  // Terms no check has measured widen a row's band: half their share of its step.
  auto e = entry("EP", 1.0, 1, 1);
  e.time.ep_comm_s = 0.2;
  e.time.experts_s = 0.2;
  EXPECT_NEAR(fsdpp::error_band(e, c), 0.01 + 0.5 * 0.4, 1e-12);
  EXPECT_NEAR(fsdpp::error_band(e, fsdpp::cluster_preset("cpu")), 0.12 + 0.5 * 0.4, 1e-12);
}

// A config file of the test's own (the planner reads a YAML and writes overrides for it).
std::string write_config(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

constexpr const char* kLlama = R"(
model: {dim: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, max_seq_len: 64}
data: {path: /usr/share/games/fortunes, tokenizer: byte, seq_len: 64}
training: {fsdp: full_shard, per_device_train_batch_size: 3, gradient_accumulation_steps: 2, max_steps: 10}
)";

constexpr const char* kQwen = R"(
model: {architecture: qwen3_moe, dim: 64, n_layers: 4, n_heads: 4, n_kv_heads: 2, head_dim: 16, max_seq_len: 64,
        num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32}
data: {path: /usr/share/games/fortunes, tokenizer: byte, seq_len: 64}
training: {fsdp: full_shard, per_device_train_batch_size: 8, max_steps: 10}
)";

// Every fitting row of a plan for `world` ranks: the config with the row's overrides, estimated
// and timed as fsdpp-train and fsdpp-estimate read it, is the row.
void expect_rows_reproduced(const std::string& path, int world, const fsdpp::Cluster& c) {
  using fsdpp::train::TrainConfig;
  const auto cfg = TrainConfig::from_file(path);
  std::vector<std::string> notes;
  const int64_t vocab = fsdpp::train::configured_vocab(cfg, notes);
  const auto base = fsdpp::train::configured_estimate(cfg, vocab);
  const auto plan = fsdpp::plan_layouts(base.model, base.options, c, world, 8, {"1F1B", "ZBH1"});
  ASSERT_GE(plan.fitting.size(), 6u);
  int pipelines = 0, hybrid = 0;
  for (const auto& row : plan.fitting) {
    const auto keys = fsdpp::train::layout_overrides_for(path, {}, row.options);
    // The run's degrees as fsdpp-train resolves them on nodes of devices_per_node ranks.
    const auto run_cfg = TrainConfig::from_file(path, keys);
    const auto dims = fsdpp::train::parallel_dims(run_cfg, world, std::min(world, c.devices_per_node));
    EXPECT_EQ(dims.describe(), fsdpp::estimate_parallel_dims(row.options).describe()) << row.layout;
    const auto run = fsdpp::train::configured_estimate(run_cfg, vocab, dims);
    EXPECT_EQ(fsdpp::estimate_memory(run.model, run.options).total, row.memory.total) << row.layout;
    EXPECT_DOUBLE_EQ(fsdpp::predict_step_time(run.model, run.options, c).total_s, row.time.total_s) << row.layout;
    pipelines += row.options.pipeline.degree > 1;
    hybrid += row.options.strategy == fsdpp::ShardingStrategy::HYBRID_SHARD;
  }
  EXPECT_GT(pipelines, 0);
  EXPECT_GT(hybrid, 0);
}

TEST(PlanOverrides, EveryRowIsReproducedByItsOverrides) {
  auto c = fsdpp::cluster_preset("cpu");
  c.devices_per_node = 2;  // two nodes of 2: HYBRID_SHARD layouts too
  const auto llama = write_config("plan_llama", kLlama);
  expect_rows_reproduced(llama, 4, c);
  const auto qwen = write_config("plan_qwen", kQwen);
  expect_rows_reproduced(qwen, 4, c);
  // Only what changes the config: its own strategy and sequence length are not repeated.
  fsdpp::EstimateOptions o = fsdpp::train::TrainConfig::from_file(llama).estimate_options();
  o.strategy = fsdpp::ShardingStrategy::SHARD_GRAD_OP;
  o.batch = 4;
  const auto keys = fsdpp::train::layout_overrides_for(llama, {}, o);
  EXPECT_EQ(keys, (std::vector<std::string>{"training.fsdp=shard_grad_op", "training.per_device_train_batch_size=4",
                                            "training.gradient_accumulation_steps=1"}));
  EXPECT_EQ(fsdpp::train::layout_command(16, 8, "c.yaml", {"a=1"}, keys),
            "fsdpp-run --nproc-per-node 8 --nnodes 2 fsdpp-train c.yaml a=1 training.fsdp=shard_grad_op "
            "training.per_device_train_batch_size=4 training.gradient_accumulation_steps=1");
  // fsdpp-train reduces in float32 under bf16: a layout that reduces in bf16 has no overrides.
  o.param_dtype = o.reduce_dtype = fsdpp::EstimateDType::BF16;
  EXPECT_THROW(fsdpp::train::layout_overrides(o), fsdpp::ConfigError);
  std::filesystem::remove(llama);
  std::filesystem::remove(qwen);
}

// fsdpp-plan lays the cluster out itself: a config's replicate degree that does not divide the
// data-parallel ranks is refused where that layout is estimated (fsdpp-estimate, --budget), and
// never reaches the planner's rows, whose HSDP layouts are a node of shards and replicas of it,
// each row's overrides naming its own replicate degree.
TEST(PlanAnswer, AConfigsReplicateDegreeIsNotThePlannersLayout) {
  auto c = fsdpp::cluster_preset("cpu");
  c.devices_per_node = 2;  // two nodes of 2: HYBRID_SHARD layouts too
  const auto path = write_config("plan_replicas", kLlama);
  const std::vector<std::string> bad = {"training.fsdp=hybrid_shard", "parallelism.data_parallel_replicate_degree=3"};
  const auto cfg = fsdpp::train::TrainConfig::from_file(path, bad);
  std::vector<std::string> notes;
  const auto base = fsdpp::train::configured_estimate(cfg, fsdpp::train::configured_vocab(cfg, notes));
  ASSERT_EQ(base.options.replicas, 3);
  auto own = base.options;
  own.world_size = 4;
  try {
    (void)fsdpp::estimate_memory(base.model, own);
    ADD_FAILURE() << "the config's layout on 4 ranks was estimated";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[estimate] parallelism.data_parallel_replicate_degree=3 cannot fill 4 "
                                         "data-parallel ranks"),
              std::string::npos)
        << e.what();
  }
  fsdpp::Plan plan;
  ASSERT_NO_THROW(plan = fsdpp::plan_layouts(base.model, base.options, c, 4, 8, {"1F1B"}));
  int hybrid = 0;
  for (const auto& row : plan.fitting) {
    EXPECT_EQ(row.options.replicas, 0) << row.layout;
    const auto keys = fsdpp::train::layout_overrides_for(path, bad, row.options);
    EXPECT_NE(std::find_if(keys.begin(), keys.end(),
                           [](const std::string& k) { return k.starts_with("parallelism.data_parallel_replicate_degree="); }),
              keys.end())
        << row.layout;
    hybrid += row.options.strategy == fsdpp::ShardingStrategy::HYBRID_SHARD;
  }
  EXPECT_GT(hybrid, 0);
  for (const auto& row : plan.rejected) EXPECT_EQ(row.rejected.find("replicate_degree"), std::string::npos) << row.rejected;
  EXPECT_GE(fsdpp::plan_answer(plan, c).chosen, 0);
  std::filesystem::remove(path);
}

}  // namespace
