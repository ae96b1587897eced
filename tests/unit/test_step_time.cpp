// The step-time model (fsdpp/estimate/step_time.h) against sums done by hand from its formulas
// and published shapes; the planner's ranking and reasons. Its numbers against measured steps and
// published runs are in docs/planner.md (bench/plan_calibration.py).
#include <gtest/gtest.h>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/memory_traffic.h"
#include "fsdpp/estimate/step_time.h"

#include "../support/gpu_run_options.h"

namespace {

fsdpp::DecoderShape llama3_8b() {
  return {.vocab_size = 128256, .dim = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8, .ffn_hidden = 14336,
          .tie_embeddings = false, .max_seq_len = 8192};
}

fsdpp::EstimateOptions bf16(int world, int64_t batch, int64_t seq) {
  return fsdpp::testing::gpu_bf16_options(world, batch, seq);
}

TEST(StepTime, FlopsPerTokenAsTorchtitanCounts) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  EXPECT_EQ(model.num_params(), 8'030'261'248);  // Llama 3 8B, as its model card counts
  // torchtitan: 6 x (parameters - embedding) + 12 x layers x heads x head_dim x seq.
  const double expected = 6.0 * (8'030'261'248.0 - 128256.0 * 4096) + 12.0 * 32 * 32 * 128 * 8192;
  EXPECT_DOUBLE_EQ(fsdpp::training_flops_per_token(model, 8192), expected);
}

TEST(StepTime, FsdpOnOneNodeByHand) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  const auto c = fsdpp::cluster_preset("h100-sxm");
  auto o = bf16(8, 2, 8192);
  const auto t = fsdpp::predict_step_time(model, o, c);
  const double tokens = 2.0 * 8192;
  const double compute = fsdpp::training_flops_per_token(model, 8192) * tokens / (989e12 * 0.60);
  EXPECT_NEAR(t.compute_s, compute, 1e-9 * compute);
  // Two bf16 all-gathers and one fp32 reduce-scatter over NVLink, ring: bytes x 7/8 / bandwidth.
  const double p = static_cast<double>(model.num_params());
  const int units = static_cast<int>(model.units.size());
  const double comm = 2 * (2 * p * 7 / 8 / 360e9 + 7 * 10e-6 * units) + (4 * p * 7 / 8 / 360e9 + 7 * 10e-6 * units);
  EXPECT_NEAR(t.fsdp_comm_s, comm, 1e-9 * comm);
  // Compute-bound: only the first gather and the last reduction show.
  EXPECT_NEAR(t.fsdp_exposed_s, comm / units, 1e-9 * comm);
  const double memory = fsdpp::step_memory_traffic(model, o, 8).total() / 3.35e12;
  EXPECT_NEAR(t.memory_bound_s, memory, 1e-9 * memory);
  EXPECT_NEAR(t.total_s, t.compute_s + t.memory_bound_s + t.fsdp_exposed_s, 1e-12);
  EXPECT_NEAR(t.tokens_per_s_per_device, tokens / t.total_s, 1e-6);
  EXPECT_NEAR(t.mfu, fsdpp::training_flops_per_token(model, 8192) * t.tokens_per_s_per_device / 989e12, 1e-12);
  // Checkpointing recomputes the forward: 8/6 of the compute.
  o.activation_checkpointing = true;
  EXPECT_NEAR(fsdpp::predict_step_time(model, o, c).compute_s, compute * 8 / 6, 1e-9 * compute);
}

TEST(StepTime, MemoryTrafficByHand) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  auto o = bf16(8, 2, 8192);
  const auto t = fsdpp::step_memory_traffic(model, o, 8);
  const double tokens = 2.0 * 8192;
  // One layer's forward, elements per token: norms 2 x 2 x 4096, residual adds 2 x 3 x 4096,
  // rotary 2 x (4096 + 1024), attention's q, k, v and output 2 x 4096 + 2 x 1024, SwiGLU 3 x 14336.
  const double layer = 16384 + 24576 + 10240 + 10240 + 43008;
  EXPECT_DOUBLE_EQ(t.activations, tokens * 32 * layer * 3 * 2);  // forward + backward (x3), bf16
  EXPECT_DOUBLE_EQ(t.loss, tokens * 128256 * (24 + 4));
  const double p = static_cast<double>(model.num_params());
  EXPECT_DOUBLE_EQ(t.optimizer, p / 8 * 28);  // AdamW over the fp32 shard
  // Two gathers (cast the shard, copy the gathered unit out), one reduction (cast, copy in).
  EXPECT_DOUBLE_EQ(t.fsdp, 2 * (p / 8 * 6 + p * 4) + p * (6 + 8));
  // Checkpointing runs the forward again; SHARD_GRAD_OP gathers once.
  o.activation_checkpointing = true;
  EXPECT_DOUBLE_EQ(fsdpp::step_memory_traffic(model, o, 8).activations, t.activations * 4 / 3);
  o.activation_checkpointing = false;
  o.strategy = fsdpp::ShardingStrategy::SHARD_GRAD_OP;
  EXPECT_DOUBLE_EQ(fsdpp::step_memory_traffic(model, o, 8).fsdp, t.fsdp - (p / 8 * 6 + p * 4));
  // Tensor parallelism with sequence parallelism splits every per-token tensor.
  o.strategy = fsdpp::ShardingStrategy::FULL_SHARD;
  o.tensor_parallel = 2;
  o.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(fsdpp::step_memory_traffic(model, o, 4).activations, t.activations / 2);
  EXPECT_DOUBLE_EQ(fsdpp::step_memory_traffic(model, o, 4).loss, t.loss / 2);
  // The cpu preset folds this work into its fitted compute rate.
  EXPECT_EQ(fsdpp::predict_step_time(model, bf16(1, 1, 128), fsdpp::cluster_preset("cpu")).memory_bound_s, 0);
}

TEST(StepTime, ShardGroupAcrossNodesUsesTheNetwork) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  const auto c = fsdpp::cluster_preset("h100-sxm");
  const auto one_node = fsdpp::predict_step_time(model, bf16(8, 2, 8192), c);
  const auto two_nodes = fsdpp::predict_step_time(model, bf16(16, 2, 8192), c);
  // 15/16 of the bytes at 40 GB/s instead of 7/8 at 360 GB/s.
  EXPECT_GT(two_nodes.fsdp_comm_s / one_node.fsdp_comm_s, 8.0);
  // HYBRID keeps the gathers in the node: only the gradient shards' all-reduce crosses.
  auto h = bf16(16, 2, 8192);
  h.strategy = fsdpp::ShardingStrategy::HYBRID_SHARD;
  h.shard_group_size = 8;
  EXPECT_LT(fsdpp::predict_step_time(model, h, c).fsdp_comm_s, two_nodes.fsdp_comm_s / 3);
}

TEST(StepTime, PipelineBubbleFromTheSchedule) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  const auto c = fsdpp::cluster_preset("h100-sxm");
  auto o = bf16(8, 8, 2048);
  o.pipeline.degree = 4;
  o.pipeline.microbatches = 8;
  o.pipeline.schedule = "1F1B";
  const auto t = fsdpp::predict_step_time(model, o, c);
  // 1F1B: (p-1)/(m+p-1) = 3/11 of the makespan idle, i.e. 3/8 of the busy time (compute, its
  // memory-bound part and TP).
  EXPECT_NEAR(t.pp_bubble_s, (t.compute_s + t.memory_bound_s + t.tp_comm_s) * 3.0 / 8.0, 1e-9);
  EXPECT_GT(t.pp_p2p_s, 0);
}

TEST(StepTime, CpuRanksShareTheCores) {
  const auto model = fsdpp::describe_decoder({.vocab_size = 256, .dim = 256, .n_layers = 4, .n_heads = 8,
                                              .n_kv_heads = 4, .ffn_hidden = 704, .max_seq_len = 128});
  const auto c = fsdpp::cluster_preset("cpu");
  fsdpp::EstimateOptions o;
  o.seq_len = 128;
  o.batch = 8;
  o.world_size = 1;
  const double one = fsdpp::predict_step_time(model, o, c).compute_s;
  o.batch = 4;
  o.world_size = 2;
  EXPECT_NEAR(fsdpp::predict_step_time(model, o, c).compute_s, one / 2, 1e-12);  // a core each
  o.batch = 1;
  o.world_size = 8;
  EXPECT_NEAR(fsdpp::predict_step_time(model, o, c).compute_s, one / 8 * 4, 1e-12);  // 4 ranks per core
}

TEST(StepTime, PlanRanksAndSaysWhyLayoutsFail) {
  const auto model = fsdpp::describe_decoder(llama3_8b());
  auto base = bf16(8, 1, 8192);
  const auto plan = fsdpp::plan_layouts(model, base, fsdpp::cluster_preset("h100-sxm"), 8, 4);
  ASSERT_FALSE(plan.fitting.empty());
  for (size_t i = 1; i < plan.fitting.size(); ++i) {
    EXPECT_LE(plan.fitting[i - 1].time.total_s, plan.fitting[i].time.total_s);
  }
  bool memory = false, pipeline = false, split = false;
  for (const auto& e : plan.rejected) {
    EXPECT_FALSE(e.rejected.empty()) << e.layout;
    memory = memory || e.rejected.find("GiB per device >") != std::string::npos;
    pipeline = pipeline || e.rejected.find("fewer than the") != std::string::npos;
    split = split || e.rejected.find("does not split over 8 data-parallel ranks") != std::string::npos;
  }
  EXPECT_TRUE(memory) << "DDP of an 8B model's TP half in fp32 Adam cannot fit 80 GB";
  EXPECT_TRUE(pipeline) << "PP 8 with 4 sequences";
  EXPECT_TRUE(split) << "4 sequences over FSDP 8";
  EXPECT_THROW(fsdpp::cluster_preset("tpu-v9"), fsdpp::ConfigError);
}

}  // namespace
